"""`python -m harness sensitivity [SCENARIO ...]` (make sensitivity): for each update scenario (steps > 0; all of them
by default), each setting set back to its library's default and each loss term turned off, and how far that moves
the numbers the update verdict judges, in their tolerances (judge_change/setting_effects.py). The oracle alone, in this
process: no verl, no torchrun. Exit 1 where a change the verdict cannot see is not declared in the scenario's
`cannot_see`, or a declared one is seen."""

from __future__ import annotations

from harness.errors import EXIT_COUNTED, EXIT_OK, UsageError
from harness.inputs.scenario import load_chosen


def update_scenarios(names: list[str] | None):
    chosen = load_chosen(names)
    if names:
        no_update = [s.name for s in chosen if not s.steps]
        if no_update:
            raise UsageError(f"{no_update[0]}: no training update (steps: 0), so no setting of one to check")
    return [s for s in chosen if s.steps]


def report_lines(scenario, reaches) -> list[str]:
    from harness.judge_change.setting_effects import SEES

    declared = scenario.cannot_see
    lines = [f"{scenario.name} ({scenario.precision}, {scenario.steps} RL steps, {scenario.optim.optimizer}):"]
    for r in reaches:
        verdict = "sees" if r.sees else ("cannot see (declared)" if r.change.name in declared else "CANNOT SEE")
        lines.append(f"  {r.change.name:<28} {r.change.shown}")
        lines.append(f"  {'':<28} {r.units:10.3g} tolerances ({r.number}): {verdict}")
        if not r.sees and r.change.name in declared:
            lines.append(f"  {'':<28} why: {declared[r.change.name]}")
    lines.append(f"  (sees: some judged number moves >= {SEES:g} of its tolerances)")
    return lines


def cmd_sensitivity(args) -> int:
    from harness.judge_change.setting_effects import findings, sensitivity

    scenarios = update_scenarios(args.scenario or None)
    problems = []
    for scenario in scenarios:
        reaches = sensitivity(scenario)
        print("\n".join(report_lines(scenario, reaches)), flush=True)
        problems += findings(scenario, reaches)
    for line in problems:
        print(line)
    return EXIT_COUNTED if problems else EXIT_OK
