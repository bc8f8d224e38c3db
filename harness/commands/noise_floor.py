"""noise-floor: a correct arm over several seeds; the largest error per precision and reference is the
measurement each tolerance in inputs/tolerances.py must sit above."""

from __future__ import annotations

from harness.errors import EXIT_OK
from harness.inputs.scenario import load_chosen
from harness.records.measures import Parity
from harness.records.results import Record


def _parity_numbers(parity: Parity) -> dict:
    """A reference's numbers, named as the Tolerance bound each is judged by."""
    return {
        "logprob_abs": parity.logprob_max_abs,
        "entropy_abs": parity.entropy_max_abs,
        "grad_rel": parity.grad_worst_rel,
    }


def floors_of(records: list[Record]) -> dict:
    """(precision, reference) -> {metric: largest value} over the records that ran to a comparison."""
    floors = {}
    for r in records:
        if r.outcome not in ("pass", "mismatch") or not r.measures.parity:
            continue
        precision = r.settings.precision
        for ref_name, parity in {"oracle": r.measures.parity, **r.measures.parity.references}.items():
            numbers = _parity_numbers(parity)
            floor = floors.setdefault((precision, ref_name), dict.fromkeys(numbers, 0.0))
            for metric, value in numbers.items():
                if isinstance(value, (int, float)):
                    floor[metric] = max(floor[metric], value)
    return floors


def update_floors_of(records: list[Record]) -> dict:
    """precision -> the largest of each training-update measure (records of scenarios with `steps`), named as
    inputs/tolerances.py's UpdateTolerance fields."""
    from harness.judge_cell.update_verdict import METRICS as UPDATE_METRICS

    kinds = dict(UPDATE_METRICS.values())
    floors = {}
    for r in records:
        u = r.measures.update
        if r.outcome not in ("pass", "mismatch") or not u:
            continue
        floor = floors.setdefault(r.settings.precision, dict.fromkeys(_update_measures(), 0.0))
        worst = u.metric_worst
        values = {
            "update_rel": u.update_worst_rel,
            "param_rel": u.param_worst_rel,
            "metric_rel": _largest_number(v for name, v in worst.items() if kinds[name] == "rel"),
            "metric_abs": _largest_number(v for name, v in worst.items() if kinds[name] == "abs"),
            # after the first step: the log-probs on updated weights (the first step's are a one-step cell's)
            "logprob_abs": max((x.logprob_max_abs for x in u.log_probs[1:]), default=0.0),
            # after the first optimizer step: the gradients before the clip on updated weights
            "grad_rel": _largest_number(v for step in u.steps[1:] for v in step.grad_rel.values()),
        }
        for measure, value in values.items():
            if isinstance(value, (int, float)):
                floor[measure] = max(floor[measure], value)
    return floors


def _largest_number(values) -> float:
    """The largest of the numbers among values: as for the parity floors, "inf" (a non-finite error) is no noise
    floor, and max() cannot compare it with a float."""
    return max((v for v in values if isinstance(v, (int, float))), default=0.0)


def _update_measures() -> tuple[str, ...]:
    """UpdateTolerance's bounds, by field name (its noise_floor is the record of them, not a bound)."""
    from harness.inputs.tolerances import UpdateTolerance

    return tuple(name for name in UpdateTolerance.__dataclass_fields__ if name != "noise_floor")


def cmd_noise_floor(args) -> int:
    from harness.inputs.tolerances import TOLERANCES
    from harness.plan.arms import resolve_arm
    from harness.run.runner import run_plan

    arm = resolve_arm(args.arm)
    scenarios = load_chosen(args.scenario)
    seeded = [s.model_copy(update={"seed": s.seed + k}) for k in range(args.seeds) for s in scenarios]
    result = run_plan("noise-floor", [(s, arm) for s in seeded], jobs=args.jobs)
    print(f"noise floor of arm {arm.name} over {args.seeds} seed(s), {len(result.records)} runs ({result.path.name}):")
    for (precision, ref_name), floor in sorted(floors_of(result.records).items()):
        tol = TOLERANCES.get((precision, ref_name))
        bounds = ", ".join(
            f"{m} {v:.3g}" + (f" (tolerance {getattr(tol, m):g})" if tol else "") for m, v in floor.items()
        )
        print(f"  {precision:<11} vs {ref_name:<13} {bounds}")
    from harness.inputs.tolerances import UPDATE_TOLERANCES

    for precision, floor in sorted(update_floors_of(result.records).items()):
        tol = UPDATE_TOLERANCES.get(precision)
        bounds = ", ".join(
            f"{m} {v:.3g}" + (f" (tolerance {getattr(tol, m)})" if tol else "") for m, v in floor.items()
        )
        print(f"  {precision:<11} update        {bounds}")
    for line in not_measured(result.records):
        print(line)
    return EXIT_OK


def not_measured(records: list[Record]) -> list[str]:
    """A line for each seed run that ended before its comparison (an error or a hang): no floor comes from it."""
    return [
        f"  not measured: {r.scenario} seed run: {r.outcome}: {r.verdict.error.message if r.verdict.error else None}"
        for r in records
        if r.outcome not in ("pass", "mismatch")
    ]
