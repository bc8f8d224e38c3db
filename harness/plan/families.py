"""verl's fused-head model families in verify: which family scenarios a patch brings in, and which family files it
leaves with #6659's defect.

verl 0.9.1 routes each model type to one file's forward_with_torch_backend (models/transformers/monkey_patch.py,
patch_forward_with_backends: its branches on model.config.model_type). A scenario tagged `family` runs in the
default verify only when the patch touches its model's file: a Qwen3.5 fix gets Qwen3.5's verdict, a Qwen3-VL fix
does not pay for it. Every family file is also read as the patch leaves it (never imported): where its fused
forward still gathers lm_head by hand (full_tensor()) or reads the sharded weight as is, the family still has
#6659's defect, and verify's closing block names it, run or not (docs/SWEEP.md: what each file does under FSDP2).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.inputs.model_families import DENSE_FILE, fused_file

FAMILY_TAG = "family"  # a scenario of one family besides Qwen3-VL's: in verify only where the patch touches its file
FAMILY_DIR = "verl/models/transformers"
ALL_FILES = ("qwen3_vl.py", "qwen3_5.py", "qwen2_vl.py", DENSE_FILE, "glm4v.py")  # the order verify names them in

# How a file's fused forward reads lm_head.weight (plan/release_facts.py lm_head_read) -> the words for #6659's
# defect left there (one file, several). full_tensor() as #6659 calls it, no grad_placements: an unreduced gradient.
DEFECT_WORDS = {
    "full_tensor()": ("still gathers lm_head by hand", "still gather lm_head by hand"),
    "as is (self.lm_head.weight)": ("still reads the sharded lm_head weight", "still read the sharded lm_head weight"),
}
LINE_WIDTH = 116  # the closing block's width (commands/run.py wraps the patch's description so)


def scenario_family_file(scenario) -> str:
    """The verl file whose fused forward the scenario's model runs through."""
    from harness.inputs.models import type_and_tie

    return fused_file(type_and_tie(scenario.model, scenario.model_overrides)[0])


def touched_family_files(changed: dict) -> set[str]:
    """The family files among a patch's changed files ({"verl/...": text}, plan/diffs.py patched_files)."""
    return {name.rsplit("/", 1)[1] for name in changed if name.rsplit("/", 1)[0] == FAMILY_DIR} & set(ALL_FILES)


def family_scenarios(scenarios: list, touched: set[str]) -> tuple[list, list]:
    """(the scenarios verify runs, the family scenarios it leaves out): a scenario tagged `family` stays only where
    its model's file is among the touched ones."""
    kept, left_out = [], []
    for s in scenarios:
        untouched = FAMILY_TAG in s.tags and scenario_family_file(s) not in touched
        (left_out if untouched else kept).append(s)
    return kept, left_out


@dataclass(frozen=True)
class FamilyRead:
    file: str  # qwen3_5.py
    read: str  # how its fused forward reads lm_head.weight (lm_head_read's value)
    where: str  # models/transformers/qwen3_5.py:596
    own_unit: bool = True  # fsdp_utils.py wraps an untied lm_head in an FSDP unit of its own (else: the root's)

    @property
    def defect(self) -> bool:
        """#6659's defect is left in this file: its fused forward reads lm_head.weight outside lm_head, whose own
        FSDP unit gathers it only inside lm_head's forward (in the root unit the weight is gathered whole)."""
        return self.read in DEFECT_WORDS and self.own_unit


def family_reads(verl_dir: Path, changed: dict) -> list[FamilyRead]:
    """Every family file as the patch leaves it: its changed text where the patch changes it, else the installed
    verl's."""
    from harness.plan.release_facts import lm_head_read, lm_head_unit_in

    def text(name: str) -> str:
        path = Path(verl_dir).parent / name
        return (changed[name] if name in changed else (path.read_text() if path.is_file() else "")) or ""

    own_unit = lm_head_unit_in(text("verl/utils/fsdp_utils.py"))["value"] != "root unit"
    reads = []
    for name in ALL_FILES:
        fact = lm_head_read(text(f"{FAMILY_DIR}/{name}"), f"models/transformers/{name}")
        reads.append(FamilyRead(name, fact["value"], fact["where"], own_unit))
    return reads


def patch_family_view(patches) -> tuple[set[str], list[FamilyRead] | str]:
    """(the family files the patch touches, each family file as it leaves it), or, where its diffs do not apply
    to the installed verl, that reason in place of the reads (the arm's own cells say so too)."""
    from harness.errors import UsageError
    from harness.plan.arms import installed_verl_dir
    from harness.plan.diffs import patched_files, read_patch

    verl_dir = installed_verl_dir()
    try:
        changed = patched_files(verl_dir, [(p, read_patch(p)) for p in patches])
    except UsageError as exc:
        return set(), f"not read: {exc}"
    return touched_family_files(changed), family_reads(verl_dir, changed)


def family_lines(
    reads: list[FamilyRead] | str, judged: dict[str, int], touched: set[str], patched: bool = True
) -> list[str]:
    """verify's line about the families, wrapped: the family files the patch leaves with #6659's defect, by how
    they read the weight ("qwen3_5.py still gathers lm_head by hand") and whether their scenarios ran (judged:
    family file -> scenarios run), then the files it fixes whose scenarios ran. None where no file has the defect
    and no family scenario ran beyond Qwen3-VL's. patched: False for the installed verl itself, no patch to touch a
    file."""
    import textwrap

    if isinstance(reads, str):
        return [f"families: {reads}"]
    groups: dict[tuple, list[str]] = {}
    for r in reads:
        ran = judged.get(r.file, 0)
        if r.defect:
            groups.setdefault((r.read, _runs(ran, r.file in touched, patched)), []).append(r.file)
        elif r.file in touched and ran and r.read == "does not read lm_head.weight":
            groups.setdefault(("fixed", _runs(ran, True)), []).append(r.file)
    parts = []
    for (read, runs), files in groups.items():
        names = ", ".join(files)
        runs = f"{runs} each" if len(files) > 1 and runs.endswith("above") else runs
        if read == "fixed":
            parts.append(
                f"{names} no longer read{'s' if len(files) == 1 else ''} lm_head.weight outside lm_head ({runs})"
            )
        else:
            parts.append(f"{names} {DEFECT_WORDS[read][len(files) > 1]} ({runs})")
    if not parts:
        return []
    text = "families: " + "; ".join(parts)
    return textwrap.wrap(text, LINE_WIDTH, subsequent_indent="  ", break_on_hyphens=False)


def _runs(ran: int, touched: bool, patched: bool = True) -> str:
    if ran:
        return f"{ran} scenario(s) above"
    if not patched:
        return "not run: a verify of a patch that touches it runs its scenarios"
    return "no scenario of it ran" if touched else "not run: the patch does not touch it"
