"""The lines about what of a patch ran, as verify, `report` and `upstream`'s REPORT.md print them: per changed
file its lines and branches that ran and those that did not (judge_change/changed_coverage.py), a config file's changed
defaults (plan/config_change.py), and for a hunk that ran nowhere what earlier records of the same diffs or the
left-out scenarios' settings say (judge_change/patch_coverage.py). The code comes from the arm's diffs (the files, or
the text a record keeps) on the verl they ran on, what ran from the records."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UsageError
from harness.judge_change.patch_coverage import hunk_coverage, recorded, unrun
from harness.plan.arms import installed_verl_dir, patch_from_text
from harness.plan.changed_code import ChangedFile, changed_code
from harness.plan.config_change import ConfigChange, config_changes
from harness.plan.diffs import read_patch
from harness.plan.patch_lines import PatchHunk, patch_hunks
from harness.records.results import Record, VerlTree


@dataclass
class PatchCode:
    """An arm's diffs as the closing block reads them: the hunks, the changed Python code per file, the config
    files' changed defaults."""

    hunks: list[PatchHunk] = field(default_factory=list)
    files: list[ChangedFile] = field(default_factory=list)
    configs: list[ConfigChange] = field(default_factory=list)


def code_of(verl_dir: Path, diffs: list[tuple[Path, bytes]]) -> PatchCode:
    hunks = patch_hunks(verl_dir, diffs)
    return PatchCode(hunks, changed_code(verl_dir, diffs, hunks), config_changes(verl_dir, diffs))


def code_of_files(patches) -> PatchCode:
    """The code of an arm's diff files, applied to the installed verl as its copy was."""
    return code_of(installed_verl_dir(), [(Path(p), read_patch(Path(p))) for p in patches])


def hunks_of_files(patches) -> list[PatchHunk]:
    return code_of_files(patches).hunks


def code_of_record(record: Record) -> PatchCode:
    """The code of the diffs a record keeps (stamp.arm_patches), applied to the verl the record ran on (the verl
    tree of VERL=PATH[@REF] where it ran on one: its line numbers are those its ranks watched, not the installed
    verl's); empty where it keeps none or they no longer apply."""
    import tempfile

    patches = record.stamp.arm_patches or []
    try:
        files = [patch_from_text(p.text, p.sha256, p.file, "record") for p in patches]
        if not files:
            return PatchCode()
        diffs = [(f, f.read_bytes()) for f in files]
        tree = record.stamp.verl_tree
        if not tree:
            return code_of(installed_verl_dir(), diffs)
        with tempfile.TemporaryDirectory() as tmp:
            return code_of(_tree_copy(tree, Path(tmp)), diffs)
    except UsageError:
        return PatchCode()


def _tree_copy(tree: VerlTree, where: Path) -> Path:
    """The verl package of the tree a record ran on, written under `where` (its verl/ directory returned)."""
    from harness.plan.verl_trees import source_files

    for name, blob in source_files(Path(tree.path), tree.commit or tree.ref).items():
        target = where / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
    return where / "verl"


def patch_ran_lines(
    code: PatchCode, arm: str, records: list[Record], left_out: list = (), earlier_from: Path | None = None
) -> tuple[list[str], str]:
    """(the closing block's lines about what of the patch ran, the verdict line's note) for the arm's records;
    left_out: the scenarios the run left out (Scenario); earlier_from: the results file of this run, whose
    neighbours' records of the same diffs tell about the scenarios left out."""
    from harness.judge_change.changed_coverage import block_lines, file_coverage, verdict_note
    from harness.plan.config_change import config_lines

    mine = [r for r in records if r.arm == arm]
    watched = recorded(mine)
    lines: list[str] = []
    if code.files and not watched:
        lines.append("the patch's lines: not recorded in any cell (none reached verl's import)")
    covers = file_coverage(code.files, watched) if watched else []
    lines += block_lines(covers, len(watched))
    if covers:
        earlier = earlier_records(mine, earlier_from) if earlier_from is not None and left_out else []
        lines += _unrun_hunk_lines(hunk_coverage(code.hunks, mine, earlier, left_out), watched, left_out)
    if code.configs:
        specs = {r.scenario: (r.stamp.scenario_spec.verl if r.stamp.scenario_spec else None) or {} for r in mine}
        for change in code.configs:
            lines += config_lines(change, specs)
    return lines, verdict_note(covers) if covers else ""


def _unrun_hunk_lines(coverage, watched: list[Record], left_out: list) -> list[str]:
    """For the hunks with code that ran in no scenario: what earlier records of the same diffs, or the left-out
    scenarios' settings, say of where they run; what the watch could not see. Hunks with the same word share a line."""
    from harness.judge_change.patch_coverage import SCENARIOS_NAMED, scenarios_named

    said: dict[str, list[str]] = {}
    unseen = [r for r in watched if r.measures.patch_lines_unseen]
    for c in unrun(coverage):
        if unseen:
            hint = f"not seen in {len(unseen)} cell(s): {unseen[0].measures.patch_lines_unseen}"
        elif c.elsewhere:
            hint = f"earlier records of this patch ran it in {scenarios_named(c.elsewhere)}, not here"
        elif c.matching:
            named = ", ".join(f"{n} ({m})" for n, m in sorted(c.matching.items())[:SCENARIOS_NAMED])
            hint = f"left out here, with the settings its branch asks: {named}: add them (--nightly)"
        elif left_out:
            hint = f"not run here, and not known whether they run it: {scenarios_named([s.name for s in left_out])}"
        else:
            continue
        said.setdefault(hint, []).append(f"{c.hunk.name} ({c.hunk.where})")
    lines = []
    for hint, hunks in said.items():
        if len(hunks) == 1:
            lines.append(f"  {hunks[0]} ran in no scenario; {hint}")
        else:
            names = ", ".join(h.split(" (")[0] for h in hunks[:SCENARIOS_NAMED]) + (", …" if len(hunks) > 4 else "")
            lines.append(f"  {len(hunks)} hunks ran in no scenario ({names}); {hint}")
    return lines


def report_ran_lines(records: list[Record], arm: str | None) -> list[str]:
    """`report`'s lines for the arm a verify judged: its code from the diffs its records keep."""
    mine = [r for r in records if r.arm == arm and r.stamp.arm_patches]
    if arm is None or not mine:
        return []
    return patch_ran_lines(code_of_record(mine[0]), arm, records)[0]


def earlier_records(mine: list[Record], this_file: Path) -> list[Record]:
    """Records of other results files with the same diffs (by their sha256) and the lines watched."""
    from harness.records.store import records_mentioning

    shas = [p.sha256 for r in mine[:1] for p in (r.stamp.arm_patches or [])]
    if not shas:
        return []
    found = records_mentioning(shas[0], exclude=this_file)
    return [r for r in found if [p.sha256 for p in r.stamp.arm_patches or []] == shas]
