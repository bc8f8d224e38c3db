"""Which of a patch's scenarios run code the patch touches, and how far a cell got: what verify's default verdict
(judge_change/patch_verdict.py, issue 74) needs to tell upstream's own failures, which a patch leaves where it changes
nothing, from the failures it leaves in its own code, and a warning the patch raises from one upstream never got far
enough to raise.

A cell runs code the patch touches where its ranks ran one of the patch's lines (measures.patch_lines_run,
rank/measures/line_watch.py: a Qwen2.5-VL fix's helper in torch_functional.py runs only under qwen2_vl.py's forward).
Where the lines were not measured (a cell that stopped before verl was imported, a patch with no line that runs in a
function), verl's routing decides (plan/families.py): a patch whose changed files are all family files reaches only
the scenarios whose model runs through one of them; a patch that changes any other file may reach every scenario.
"""

from __future__ import annotations

from harness.rank.phases import PHASES
from harness.records.results import Record


def family_file_of(record: Record) -> str | None:
    """The family file whose fused forward the record's model ran through (plan/families.py scenario_family_file,
    from the scenario as it ran); None where the record does not say (an older record, an unreadable model)."""
    from harness.inputs.model_families import fused_file
    from harness.inputs.models import type_and_tie

    spec = record.stamp.scenario_spec
    model = (spec.model if spec is not None else None) or (record.settings.model if record.settings else None)
    if not model:
        return None
    try:
        return fused_file(type_and_tie(model, (spec.model_overrides if spec is not None else None) or {})[0])
    except (OSError, ValueError, KeyError):
        return None


def touched_families(patch_files: list[str]) -> set[str] | None:
    """The family files a patch's changed files name (plan/families.py touched_family_files), or None where it
    changes any other file: then it may reach every scenario."""
    from harness.plan.families import touched_family_files

    names = touched_family_files(dict.fromkeys(patch_files))
    return names if len(names) == len(set(patch_files)) else None


def untouched(record: Record, families: set[str] | None) -> str | None:
    """The family file of a record whose cell ran none of the patch's code (families: touched_families), else
    None. Measured lines decide where there are any; else verl's routing; a record whose family file is unknown
    counts as reached (its failures stay the patch's to answer)."""
    file = family_file_of(record)
    if file is None:
        return None
    ran = record.measures.patch_lines_run
    if ran:  # measured, on a patch with lines that run in a function
        return None if any(ran.values()) else file
    if families is None:
        return None
    return file if file not in families else None


def reached(record: Record) -> int:
    """How far the record's ranks got, as an index of rank/phases.py PHASES: a pass or a mismatch ran every phase;
    an error or a hang stopped in its error's phase (unknown: the first)."""
    if record.outcome in ("pass", "mismatch"):
        return len(PHASES) - 1
    err = record.verdict.error
    phase = err.phase if err is not None else None
    return PHASES.index(phase) if phase in PHASES else 0
