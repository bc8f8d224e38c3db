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

from harness.errors import UsageError
from harness.paths import RESULTS_DIR, ROOT, SCENARIOS_DIR

SWEEP_DIR = SCENARIOS_DIR / "sweep"
SWEEP_EXPECTATIONS = SWEEP_DIR / "expectations.yaml"
TRITON_SUFFIX = "-triton"


def resolve_arm(name: str):
    """An arm name of patches/, a diff path, or several joined by '+' (one arm applying each diff in turn)."""
    from harness.arms import Arm, UPSTREAM
    from harness.arms import resolve_arm as resolve_one

    parts = name.split("+")
    if len(parts) == 1:
        return resolve_one(name)
    arms = [resolve_one(p) for p in parts]
    if any(a.name == UPSTREAM for a in arms):
        raise UsageError(f"arm {name!r}: 'upstream' is no diff to join with others")
    return Arm(name, tuple(p for a in arms for p in a.patches))


def sweep_scenarios(directory: Path = SWEEP_DIR) -> list:
    """Every scenario of the directory as written (torch backend), each followed by its triton twin."""
    from harness.scenario import load_all

    cells = []
    for s in load_all(directory):
        if s.fused_backend != "torch":
            raise UsageError(f"{directory / (s.name + '.yaml')}: field 'fused_backend': sweep scenarios are written "
                             f"for torch; the sweep adds the triton cell itself")
        cells.append(s)
        cells.append(s.model_copy(update={"name": s.name + TRITON_SUFFIX, "fused_backend": "triton"}))
    return cells


def family_of(scenario) -> tuple[str, bool]:
    """(model_type, tied) of the model the scenario builds, read from its config, as verl reads them."""
    from harness.model import load_config

    config = load_config(scenario.model, scenario.model_overrides)
    return config.model_type, bool(getattr(config, "tie_word_embeddings", False))


def plan(scenarios: list, expected: dict, *, names=None, families=None, arms=None) -> list[tuple]:
    """(scenario, arm name) cells: every arm expectations.yaml lists for the scenario, then the filters."""
    known = {s.name for s in scenarios}
    missing = sorted(known - set(expected))
    if missing:
        raise UsageError(f"{SWEEP_EXPECTATIONS.relative_to(ROOT)}: no entry for sweep cell(s) {', '.join(missing)}")
    stale = sorted(set(expected) - known)
    if stale:
        raise UsageError(f"{SWEEP_EXPECTATIONS.relative_to(ROOT)}: entries for no sweep scenario: {', '.join(stale)}")
    for label, wanted, have in (("scenario", names, lambda: known),
                                ("family", families, lambda: {family_of(s)[0] for s in scenarios}),
                                ("arm", arms, lambda: {a for e in expected.values() for a in e})):
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


def _error_text(record: dict, width: int = 64) -> str:
    """The report's error cell, led by the phase the error was raised in ([build], [forward], ...)."""
    from harness.report import _error_cell

    phase = (record.get("error") or {}).get("phase")
    if not phase:
        return _error_cell(record, width)
    return f"[{phase}] " + _error_cell(record, width - len(phase) - 3)


def _num(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return "0" if x == 0 else f"{x:.2g}"


def extra_gather_bytes(record: dict):
    """Bytes all-gathered outside FSDP's own hooks (a hand-made full_tensor() of the lm_head weight), per rank."""
    by_origin = ((record.get("comm") or {}).get("all_gather") or {}).get("by_origin")
    if not by_origin:
        return None
    return (by_origin.get("other") or {}).get("bytes", 0)


COLUMNS = ["family", "tied", "backend", "arm", "outcome", "error / worst failure", "logprob err", "entropy err",
           "worst grad rel err (param)", "extra AG bytes", "expected"]


def table_row(record: dict, family: str, tied: bool, problems: list[str]) -> list[str]:
    parity = record.get("parity") or {}
    worst = parity.get("grad_worst_rel")
    param = (parity.get("grad_worst_param") or "").removeprefix("model.").removeprefix("language_model.")
    grad = "-" if worst is None else f"{_num(worst)} ({param or '-'})"
    if parity.get("missing_grads"):
        grad += f", {len(parity['missing_grads'])} missing"
    extra = extra_gather_bytes(record)
    return [family, "tied" if tied else "untied", (record.get("scenario_spec") or {}).get("fused_backend", "?"),
            record.get("arm", "?"), record.get("outcome", "?"), _error_text(record),
            _num(parity.get("logprob_max_abs")), _num(parity.get("entropy_max_abs")), grad,
            "-" if extra is None else str(extra), "yes" if not problems else "DRIFT"]


def markdown(rows: list[list[str]]) -> str:
    widths = [max([len(COLUMNS[i])] + [len(r[i]) for r in rows]) for i in range(len(COLUMNS))]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    return "\n".join([line(COLUMNS), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])


def render(records: list[dict], families: dict, problems: dict) -> str:
    """Cells that ran, one row each; cells skipped for the same reason are folded into one line below."""
    rows, skipped = [], {}
    for r in records:
        family, tied = families[r["scenario"]]
        if r.get("outcome") == "skipped":
            skipped.setdefault(r.get("skipped_reason") or "?", []).append((family, tied, r["arm"]))
            continue
        rows.append(table_row(r, family, tied, problems.get((r["scenario"], r["arm"]), [])))
    text = markdown(rows) if rows else "(no cell ran)"
    for reason, cells in skipped.items():
        names = sorted({f for f, _, _ in cells})
        arms = sorted({a for _, _, a in cells})
        text += (f"\n\nskipped, {len(cells)} cells ({', '.join(names)}; "
                 f"{'/'.join(sorted({'tied' if t else 'untied' for _, t, _ in cells}))}; arms {', '.join(arms)}): "
                 f"{reason}")
    return text


def main(args) -> int:
    """args: scenario, family, arm (lists or None), jobs, json, keep_traces."""
    from harness.cli import execute
    from harness.expectations import drift, load_expectations
    from harness.report import summary_counts, versions_line

    expected = load_expectations(SWEEP_EXPECTATIONS)
    scenarios = sweep_scenarios()
    cells = plan(scenarios, expected, names=getattr(args, "scenario", None), families=getattr(args, "family", None),
                 arms=getattr(args, "arm", None))
    if not cells:
        raise UsageError("the filters leave no sweep cell to run")
    arm_names = sorted({a for _, a in cells}, key=lambda a: (a != "upstream", a))
    chosen = [s for s in scenarios if any(s is c for c, _ in cells)]
    records, path = execute("sweep", chosen, [resolve_arm(a) for a in arm_names], jobs=getattr(args, "jobs", 1),
                            keep_traces=getattr(args, "keep_traces", False), plan=cells)
    families = {s.name: family_of(s) for s in chosen}
    problems = {(r["scenario"], r["arm"]): drift(r, expected[r["scenario"]][r["arm"]]) for r in records}
    text = (render(records, families, problems) + f"\n\n{summary_counts(records)}\n{versions_line(records)}\n"
            f"records: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}\n")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "sweep.md").write_text(text)
    print(text)
    if getattr(args, "json", None):
        Path(args.json).write_text(json.dumps(records, indent=1, default=str))
    moved = [f"  {s} x {a}: {p}" for (s, a), ps in problems.items() for p in ps]
    if moved:
        print(f"DRIFT in {len(moved)} cell(s) from {SWEEP_EXPECTATIONS.relative_to(ROOT)}:\n" + "\n".join(moved))
        return 1
    print(f"sweep: all {len(records)} cells as expected")
    return 0


def add_parser(sub) -> None:
    """The `sweep` subcommand, for harness.cli.build_parser."""
    p = sub.add_parser("sweep", help="the lm_head bug class across verl's fused-head model families "
                                     "(scenarios/sweep/ x arms of its expectations.yaml); exit 1 on drift")
    p.add_argument("--scenario", action="append", help="only this sweep cell (e.g. qwen3-untied, qwen3-untied-triton)")
    p.add_argument("--family", action="append", help="only this model_type (e.g. qwen2_5_vl; repeatable)")
    p.add_argument("--arm", action="append", help="only this arm of the expectations (repeatable)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (each run starts ranks processes)")
    p.add_argument("--json", help="also write the records as one JSON list to this file")
    p.add_argument("--keep-traces", action="store_true", help="keep each rank's profiler trace")

