""" "Is my recipe hit?": for each recipe verify ran (a scenario with a `verl:` block, as `harness import` writes one
from a verl run script), whether the recipe runs the code the patch changes, then what the patch changes for it.

The answer comes from two things, never from the outcome alone (a recipe that never runs the fused head passes under
every arm, and that pass says nothing about the change):
- the lines that ran: per record, the patch's hunks whose lines its ranks ran (judge_change/patch_coverage.py);
- the settings that route there, from the scenario as it ran: `use_fused_kernels` (verl's fused head runs only with
  it), the fused backend (#6659 changed the torch backend's forward only), the model's family file (verl routes
  each model type to one file's fused forward: plan/families.py) and the trainer whose batch the engine got.
Verifying upstream itself (no patch), the code in question is #6659's: qwen3_vl.py's forward_with_torch_backend.
The answers in words: render/verify_closing.py recipe_lines (the block's first lines), render/verdict_line.py
recipe_note (the verdict line's word).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.records.failure_signature import FailureSignature
from harness.records.measures import RecordedEngine, RecordedScenario
from harness.records.results import Record

SUBJECT_PR = "#6659"
SUBJECT_FILE = "qwen3_vl.py"  # the file #6659 changed: its fused forward of the torch backend
FUSED_NAME = "actor_rollout_ref.model.use_fused_kernels"
WHY_CHARS = 90


@dataclass
class RecipeAnswer:
    scenario: str
    runs: bool  # the recipe runs the code the patch (or #6659) changes
    answer: str  # the user's question answered, one line
    change: str  # what the patch changes for this recipe: the outcomes beside each other


def is_recipe(record: Record) -> bool:
    """A scenario that carries a verl run's settings under verl's names (its `verl:` block): a user's recipe."""
    return record.stamp.scenario_spec is not None and bool(record.stamp.scenario_spec.verl)


def _routing(record: Record) -> tuple[bool, str, str, str]:
    """(use_fused_kernels, the fused backend, the model's family file, the trainer) of the scenario as it ran."""
    from harness.inputs.model_families import fused_file
    from harness.inputs.models import type_and_tie

    spec = record.stamp.scenario_spec or RecordedScenario()
    fused = (spec.engine or RecordedEngine()).use_fused_kernels
    backend = spec.fused_backend or "torch"
    try:
        family = fused_file(type_and_tie(spec.model or "tiny-qwen3-vl", spec.model_overrides or {})[0])
    except (OSError, ValueError):
        family = "(its model's file: not read)"
    return fused, backend, family, record.trainer() or "direct"


def _outcome(record: Record | None) -> str:
    if record is None:
        return "not run"
    if record.outcome in ("pass", "skipped"):
        return record.outcome
    why = " ".join((record.verdict.why or "").split())
    why = why if len(why) <= WHY_CHARS else why[: WHY_CHARS - 1] + "…"
    return f"{record.outcome} ({why})" if why else record.outcome


def _change(arm: str, mine: Record, beside: dict[str, Record], runs: bool) -> str:
    """The outcomes of the arms that ran this scenario, and in words what the patch changes for the recipe."""
    base_arm = "none" if arm == "upstream" else "upstream"
    base = beside.get(base_arm)
    shown = f"{base_arm}: {_outcome(base)}; {arm}: {_outcome(mine)}"
    if base is None:
        return shown
    if FailureSignature.of(base).same_outcome(FailureSignature.of(mine)):  # the outcome alone (failure_signature.py)
        same = "the same outcome" if runs else "the same outcome, as it must be where the changed code never runs"
        return f"{shown}: {same}"
    if mine.outcome == "pass":
        return f"{shown}: {arm} fixes what {base_arm} gets wrong for this recipe"
    if base.outcome == "pass":
        return f"{shown}: {arm} breaks this recipe"
    return f"{shown}: a different failure"


def _hunks_ran(record: Record, coverage) -> tuple[list[str], int]:
    """(the names of the patch's hunks with code whose lines this record's ranks ran, how many hunks have code)."""
    runnable = [c for c in coverage if c.runnable]
    return [c.hunk.name for c in runnable if record.scenario in c.ran_in], len(runnable)


def recipe_answer(
    arm: str, mine: Record, beside: dict[str, Record], coverage=None, defects: dict | None = None
) -> RecipeAnswer:
    """The answer for one recipe's record of the arm under verify. coverage: the patch's hunks and where they ran
    (judge_change/patch_coverage.py hunk_coverage), None when verifying upstream itself (the code is #6659's then).
    defects: family file -> how its fused head still reads lm_head (plan/families.py), where #6659's defect is left."""
    fused, backend, family, trainer = _routing(mine)
    route = f"use_fused_kernels {str(fused).lower()}, backend {backend}, {family}, trainer {trainer}"
    subject = SUBJECT_PR if coverage is None else f"the patch ({arm})"
    watched = coverage is not None and mine.measures.patch_lines_run is not None
    ran, with_code = _hunks_ran(mine, coverage) if watched else ([], 0)
    if not fused and not ran:
        text = (
            f"your recipe does not run the fused head (use_fused_kernels false): {subject} does not affect it; set "
            f"{FUSED_NAME}=True to judge the fused path"
        )
        runs = False
    elif not fused:
        text = (
            f"your recipe does not run the fused head (use_fused_kernels false), but it runs {len(ran)} of the "
            f"{with_code} hunk(s) of {subject} with code ({', '.join(ran)}): affected ({route})"
        )
        runs = True
    elif watched:
        runs = bool(ran)
        files = sorted({c.hunk.origin.file.rsplit("/", 1)[-1] for c in coverage if c.runnable})
        if runs:
            text = f"your recipe runs the code {subject} changes: {len(ran)} of its {with_code} hunk(s) ran ({route})"
        elif family not in files:
            text = (
                f"your recipe's model runs its fused head in {family}, which {subject} does not change (it changes "
                f"{', '.join(files) or 'no function'}): it does not affect this recipe ({route})"
            )
            if (defects or {}).get(family):
                text += f"; but {family} {defects[family]}: #6659's defect, which it leaves in your recipe's path"
        else:
            text = (
                f"your recipe runs the fused head ({route}) but none of {subject}'s changed lines ran: it does not "
                "affect this recipe as run here"
            )
    elif coverage is not None:
        runs = False
        text = f"not known whether your recipe runs {subject}'s code: its lines were not recorded in this cell"
    else:  # upstream: #6659's code is the torch backend's fused forward of qwen3_vl.py
        runs = backend == "torch" and family == SUBJECT_FILE
        if runs:
            text = f"your recipe runs the code {SUBJECT_PR} changed (the fused head of {SUBJECT_FILE}; {route})"
        elif backend != "torch":
            text = (
                f"your recipe runs the fused head with the {backend} backend: {SUBJECT_PR} changed the torch "
                "backend's forward only, and does not affect it"
            )
        else:
            text = (
                f"your recipe's model runs the fused head of {family}, not {SUBJECT_FILE}'s that {SUBJECT_PR} "
                "changed: #6659 itself does not affect it"
            )
            if (defects or {}).get(family):
                text += f"; but {family} {defects[family]}: the same defect, in your recipe's path"
    return RecipeAnswer(mine.scenario, runs, text, _change(arm, mine, beside, runs))


def recipe_answers(arm: str, records: list[Record], coverage=None, defects: dict | None = None) -> list[RecipeAnswer]:
    """The answer for each recipe the arm ran (skipped cells left out), in the records' order."""
    by_scenario: dict[str, dict[str, Record]] = {}
    for r in records:
        by_scenario.setdefault(r.scenario, {})[r.arm] = r
    return [
        recipe_answer(arm, r, by_scenario[r.scenario], coverage, defects)
        for r in records
        if r.arm == arm and r.outcome != "skipped" and is_recipe(r)
    ]
