"""`python -m harness sweep`: the lm_head bug class across verl's fused-head families.

A sweep cell is a scenario of scenarios/sweep/ (one per model family x tied/untied lm_head) x a fused backend
(torch as written; triton derived here, it needs CUDA) x an arm. Which arms run for which cell is what
scenarios/sweep/expectations.yaml lists, so that file is both the plan and the golden outcomes: any drift from
it, an unexpected error or an unexpected pass, makes the command exit 1. Adding a family takes a model config
in models/ and two YAML files (plus their expectations), no code.

Arm names may join diffs with "+" (applied in that order), e.g. `glm4v-vision+fsdp2-lmhead-forward-all`.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import EXIT_COUNTED, EXIT_OK, UsageError
from harness.paths import ROOT, SCENARIOS_DIR, results_dir
from harness.records.measures import Parity
from harness.records.results import Record, other_all_gather_bytes
from harness.render.untrusted import report_text

SWEEP_DIR = SCENARIOS_DIR / "sweep"
SWEEP_EXPECTATIONS = SWEEP_DIR / "expectations.yaml"
TRITON_SUFFIX = "-triton"


def sweep_scenarios(directory: Path = SWEEP_DIR) -> list:
    """Every scenario of the directory as written (torch backend), each followed by its triton twin."""
    from harness.inputs.scenario import load_all

    cells = []
    for s in load_all(directory):
        if s.fused_backend != "torch":
            raise UsageError(
                f"{directory / (s.name + '.yaml')}: field 'fused_backend': sweep scenarios are written "
                f"for torch; the sweep adds the triton cell itself"
            )
        cells.append(s)
        cells.append(s.model_copy(update={"name": s.name + TRITON_SUFFIX, "fused_backend": "triton"}))
    return cells


def family_of(scenario) -> tuple[str, bool]:
    """(model_type, tied) of the model the scenario builds, read from its config, as verl reads them."""
    from harness.inputs.models import type_and_tie

    return type_and_tie(scenario.model, scenario.model_overrides)


def plan(scenarios: list, expected: dict, *, names=None, families=None, arms=None) -> list[tuple]:
    """(scenario, arm name) cells: every arm expectations.yaml lists for the scenario, then the filters."""
    known = {s.name for s in scenarios}
    missing = sorted(known - set(expected))
    if missing:
        raise UsageError(f"{SWEEP_EXPECTATIONS.relative_to(ROOT)}: no entry for sweep cell(s) {', '.join(missing)}")
    stale = sorted(set(expected) - known)
    if stale:
        raise UsageError(f"{SWEEP_EXPECTATIONS.relative_to(ROOT)}: entries for no sweep scenario: {', '.join(stale)}")
    for label, wanted, have in (
        ("scenario", names, lambda: known),
        ("family", families, lambda: {family_of(s)[0] for s in scenarios}),
        ("arm", arms, lambda: {a for e in expected.values() for a in e}),
    ):
        unknown = sorted(set(wanted or ()) - have()) if wanted else []
        if unknown:
            raise UsageError(f"unknown sweep {label} '{unknown[0]}' (known: {', '.join(sorted(have()))})")
    cells = []
    for s in scenarios:
        if names and s.name not in names:
            continue
        if families and family_of(s)[0] not in families:
            continue
        cells += [(s, a) for a in expected[s.name] if not arms or a in arms]
    return cells


def _error_text(record: Record, width: int = 64) -> str:
    """The verdict table's error cell, led by the phase the error was raised in ([build], [forward], ...)."""
    from harness.render.tables import error_cell

    phase = record.verdict.error.phase if record.verdict.error else None
    if not phase:
        return error_cell(record, width)
    return f"[{phase}] " + error_cell(record, width - len(phase) - 3)


COLUMNS = [
    "family",
    "tied",
    "backend",
    "arm",
    "outcome",
    "error / worst failure",
    "logprob err",
    "entropy err",
    "worst grad rel err (param)",
    "extra AG bytes",
    "expected",
]


def table_row(record: Record, family: str, tied: bool, problems: list[str]) -> list[str]:
    from harness.render.tables import bytes_cell, grad_cell
    from harness.render.tables import num as _num

    parity = record.measures.parity or Parity()
    return [
        family,
        "tied" if tied else "untied",
        (record.stamp.scenario_spec.fused_backend if record.stamp.scenario_spec else None) or "?",
        record.arm,
        record.outcome,
        _error_text(record),
        _num(parity.logprob_max_abs),
        _num(parity.entropy_max_abs),
        grad_cell(parity),
        bytes_cell(other_all_gather_bytes(record)),
        "yes" if not problems else "DRIFT",
    ]


def render(records: list[Record], families: dict, problems: dict) -> str:
    """Cells that ran, one row each; cells skipped for the same reason are folded into one line below."""
    rows, skipped = [], {}
    for r in records:
        family, tied = families[r.scenario]
        if r.outcome == "skipped":
            skipped.setdefault(r.verdict.skipped_reason or "?", []).append((family, tied, r.arm))
            continue
        rows.append(table_row(r, family, tied, problems.get((r.scenario, r.arm), [])))
    from harness.render.tables import markdown_table

    text = markdown_table(COLUMNS, rows) if rows else "(no cell ran)"
    for reason, cells in skipped.items():
        names = sorted({f for f, _, _ in cells})
        arms = sorted({a for _, _, a in cells})
        text += (
            f"\n\nskipped, {len(cells)} cells ({', '.join(names)}; "
            f"{'/'.join(sorted({'tied' if t else 'untied' for _, t, _ in cells}))}; arms {', '.join(arms)}): "
            f"{reason}"
        )
    return text


def cmd_sweep(args) -> int:
    from harness.inputs.expectations import drift, drift_lines, load_expectations
    from harness.paths import shown_path
    from harness.plan.arms import resolve_arm
    from harness.render.tables import summary_counts, versions_line
    from harness.run.runner import run_plan

    expected = load_expectations(SWEEP_EXPECTATIONS)
    scenarios = sweep_scenarios()
    cells = plan(scenarios, expected, names=args.scenario, families=args.family, arms=args.arm)
    if not cells:
        raise UsageError("the filters leave no sweep cell to run")
    arms = {a: resolve_arm(a) for a in sorted({a for _, a in cells})}
    result = run_plan("sweep", [(s, arms[a]) for s, a in cells], jobs=args.jobs, keep_traces=args.keep_traces)
    records = result.records
    families = {s.name: family_of(s) for s, _ in cells}
    problems = {(r.scenario, r.arm): drift(r, expected[r.scenario][r.arm]) for r in records}
    text = (
        render(records, families, problems) + f"\n\n{summary_counts(records)}\n{versions_line(records)}\n"
        f"records: {shown_path(result.path)}\n"
    )
    results_dir().mkdir(parents=True, exist_ok=True)
    (results_dir() / "sweep.md").write_text(report_text(text), encoding="utf-8")
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps([r.written() for r in records], indent=1, default=str))
    moved = drift_lines(records, expected)
    if moved:
        print(f"DRIFT in {len(moved)} cell(s) from {SWEEP_EXPECTATIONS.relative_to(ROOT)}:\n" + "\n".join(moved))
        return EXIT_COUNTED
    print(f"sweep: all {len(records)} cells as expected")
    return EXIT_OK
