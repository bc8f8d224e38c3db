"""Reach (verify --reach-seconds S; `pr`'s default): where the patch's changed lines or branches ran in no scenario
of the default set, run the candidates plan/reach.py orders (the scenarios the harness has and did not run, then
variants of the nearest ones), the patch's arm first; one that runs code still unrun is judged there in both arms
(its base beside it). Guided by what is still unrun (a candidate reaching nothing new is only said as tried), bounded
by the budget: no candidate starts after S seconds. Says which scenario reached which code, what it tried without
reaching the rest, and how to keep a found variant (`cp` of its YAML into scenarios/)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from harness.commands.ran_lines import PatchCode
from harness.paths import CACHE_DIR, shown_path
from harness.records.results import Record

REACH_DIR = CACHE_DIR / "reach"
_AXES = {"ranks", "engine", "trainer", "model_overrides"}  # what a scenario on an axis from a seed may differ in


@dataclass
class Reached:
    records: list[Record] = field(default_factory=list)  # the reached scenarios' cells, both arms: judged
    lines: list[str] = field(default_factory=list)


def missing_code(code: PatchCode, records: list[Record]) -> tuple[set, list]:
    """(what of the changed code no record ran: ("line", file, n) and ("arc", file, (a, b)); the files' coverage)."""
    from harness.judge_change.changed_coverage import file_coverage
    from harness.judge_change.patch_coverage import recorded

    covers = file_coverage(code.files, recorded(records))
    missing = set()
    for c in covers:
        missing |= {("line", c.changed.file, n) for n in c.changed.lines if n not in c.ran}
        missing |= {("arc", c.changed.file, a) for a in c.possible - c.taken}
    return missing, covers


SEEDS_PER_FILE = 2  # the nearest scenarios whose variants are tried, per file with code left unrun


def _seeds(covers, scenarios: list) -> dict[str, set[str]]:
    """The scenarios run whose variants are tried, nearest first, each with the files it is a seed for: per file with
    code left unrun, the ones that ran the most of its changed lines and branches, else (none ran any) those whose
    model's fused forward is that file (plan/families.py: a family's file, run without the code's settings)."""
    from harness.plan.families import scenario_family_file

    score: dict[str, int] = {}
    files: dict[str, set[str]] = {}
    for c in covers:
        if len(c.ran) == len(c.changed.lines) and c.taken == c.possible:
            continue
        ran = {name: len(lines) + len(arcs) for name, (lines, arcs) in c.by_scenario.items() if lines or arcs}
        if not ran and c.changed.file.startswith("verl/models/transformers/"):
            ran = {s.name: 1 for s in scenarios if scenario_family_file(s) == c.changed.name}
        for name in sorted(ran, key=lambda n: (-ran[n], n))[:SEEDS_PER_FILE]:
            score[name] = score.get(name, 0) + ran[name]
            files.setdefault(name, set()).add(c.changed.file)
    near = sorted((s for s in scenarios if s.name in score), key=lambda s: (-score[s.name], s.ranks, s.name))
    return {s.name: files[s.name] for s in near}


def _on_an_axis(scenario, seeds: list) -> bool:
    """Whether a scenario is one of the seeds (on its path) varied only along the axes the harness owns: its ranks,
    its SP size, its trainer, its model's overrides."""
    from harness.inputs.scenario import training_configuration

    def rest(s) -> dict:
        fields = training_configuration(s)
        fields["engine"] = {k: v for k, v in fields["engine"].items() if k != "ulysses_sequence_parallel_size"}
        return {k: v for k, v in fields.items() if k not in _AXES - {"engine"}}

    mine = rest(scenario)
    return any(s.path == scenario.path and mine == rest(s) for s in seeds)


def _not_run(code: PatchCode, seeds: list, ran: set[str], left_out: list) -> list[tuple]:
    """The harness's own scenarios not run here worth a try, (tier, scenario, why), in order: a never-run hunk's
    branch asks its settings (0), it is the nearest seed on a larger SP size (1), on another world size, trainer or
    model layout (2: tried after the variants)."""
    from harness.inputs.scenario import load_each
    from harness.judge_change.patch_coverage import settings_match

    everything, _ = load_each()
    nightly = {s.name for s in left_out}
    out = []
    for s in everything:
        if s.name in ran or s.path == "head":
            continue
        matched = [m for h in code.hunks if h.conditions and (m := settings_match(h, s))]
        where = "nightly scenario" if s.name in nightly else "scenario not in the default set"
        if matched:
            out.append((0, s, f"{where}, with the settings a changed branch asks ({matched[0]})"))
        elif seeds and _on_an_axis(s, seeds):
            # Before the variants where it goes further than the nearest seed (a larger SP size), after them else.
            further = s.engine.ulysses_sequence_parallel_size > seeds[0].engine.ulysses_sequence_parallel_size
            out.append((1 if further else 2, s, f"{where}, on an axis from {seeds[0].name}"))
    return sorted(out, key=lambda t: (t[0], t[1].ranks, t[1].name))


def reach_further(
    args, target, code: PatchCode, records: list[Record], scenarios: list, left_out: list, run_cells
) -> Reached:
    """The reach after verify's cells (records: every arm's), within args.reach_seconds; run_cells: verify's
    (commands/run.py), which runs a list of cells and returns the PlanResult."""
    budget = float(getattr(args, "reach_seconds", 0) or 0)
    mine = [r for r in records if r.arm == target.name]
    missing, covers = missing_code(code, mine)
    if budget <= 0 or not missing or not code.files:
        return Reached()
    from harness.plan.reach import candidates

    ran = {r.scenario for r in records}
    by_name = {s.name: s for s in scenarios if s.name in ran}
    relevant = _seeds(covers, list(by_name.values()))
    seeds = [by_name[name] for name in relevant]
    tiers = _not_run(code, seeds, ran, left_out)
    first = candidates(seeds, [(s, how) for tier, s, how in tiers if tier < 2], ran)
    known = ran | {c.scenario.name for c in first}
    order = first + candidates([], [(s, how) for tier, s, how in tiers if tier == 2], known)
    return _try(args, target, code, order, missing, budget, run_cells, relevant)


def _try(args, target, code: PatchCode, order: list, missing: set, budget: float, run_cells, relevant: dict) -> Reached:
    from harness.judge_change.base_change import change_against
    from harness.plan.arms import resolve_arm
    from harness.plan.reach import write_variant

    out, start, first = Reached(), time.monotonic(), len(missing)
    tried, reached_words = [], []
    base = resolve_arm("upstream")
    left = list(order)
    while left and missing and time.monotonic() - start < budget:
        candidate = left.pop(0)
        if candidate.seed and not relevant.get(candidate.seed, set()) & {f for _, f, _ in missing}:
            continue  # its seed's files have nothing left unrun: guided by what is still unrun
        path = write_variant(candidate.scenario, REACH_DIR) if candidate.variant else None
        (mine,) = run_cells("verify", args, [(candidate.scenario, target)]).records
        now, covers = missing_code(code, [mine])
        gained = missing - now
        if not gained:
            tried.append(f"{candidate.scenario.name} ({candidate.how})")
            continue
        missing -= gained
        fresh = getattr(args, "fresh", False) or getattr(args, "keep_traces", False)
        reuse = frozenset() if fresh else frozenset({"upstream"})  # the base's cell, as verify's (plan/reuse.py)
        (theirs,) = run_cells("verify", args, [(candidate.scenario, base)], reuse).records
        change = change_against(mine, theirs)
        out.records += [mine, theirs]
        kind = f"{change.kind}{f': {change.how}' if change.how else ''}"
        reached_words.append(
            f"  {candidate.scenario.name} ({candidate.how}): ran {_gained_words(gained, covers)}; against its base: "
            f"{kind} ({mine.outcome} / {theirs.outcome})"
        )
        if path is not None:
            reached_words.append(f"    keep it: cp {shown_path(path)} scenarios/")
    spent = time.monotonic() - start
    out.lines = [
        f"reach: {first} piece(s) of the changed code (lines, branches) ran in no scenario of the default set; "
        f"tried {len(tried) + len(out.records) // 2} scenario(s) in {spent:.0f} s (budget {budget:.0f} s):",
        *reached_words,
    ]
    if tried:
        out.lines.append(f"  tried without reaching the rest: {', '.join(tried)}")
    if missing:
        why = "budget spent" if left else "no candidate left"
        out.lines.append(f"  still in no scenario: {len(missing)} piece(s) ({why}; {len(left)} candidate(s) not tried)")
    return out


def _gained_words(gained: set, covers) -> str:
    """What a scenario newly ran: per file, its lines (as ranges) and its branches, in the branches' words."""
    from harness.judge_change.changed_coverage import ranges_of

    parts = []
    words = {(c.changed.file, (b.line, b.to)): b.words for c in covers for b in c.changed.branches}
    for file in sorted({f for _, f, _ in gained}):
        lines = sorted(n for kind, f, n in gained if kind == "line" and f == file)
        arcs = sorted(a for kind, f, a in gained if kind == "arc" and f == file)
        said = [", ".join(ranges_of(lines))] if lines else []
        said += [words.get((file, a), f"line {a[0]} to {a[1]}") for a in arcs]
        parts.append(f"{file} {'; '.join(said)}")
    return "; ".join(parts)
