"""What of a patch's changed code ran, in lines and branches (plan/changed_code.py ChangedFile, the records'
measures.patch_lines_run and patch_arcs_run): per changed file, which changed lines ran and which did not, which ways
out of its branches were taken, per scenario and in all; the code that never ran named by its line range and by
what guards it ("lines 120-129, the `if equal_layout:` branch: taken in no scenario").

A verdict is evidence about the code that ran: a hunk counts as judged only for its lines that ran, and a branch no
scenario took is code the verdict says nothing about, however many scenarios ran the lines around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.plan.changed_code import ChangedFile
from harness.records.results import Record

SCENARIOS_NAMED = 4  # the scenarios named in a group; all of them: each record's measures
RANGES_NAMED = 6  # the ranges of code that never ran named per file; the rest counted


@dataclass
class FileCoverage:
    """One changed file's code against the cells that watched it."""

    changed: ChangedFile
    ran: set[int] = field(default_factory=set)  # changed lines any scenario ran
    taken: set[tuple[int, int]] = field(default_factory=set)  # branches (line, to) any scenario took
    by_scenario: dict[str, tuple[frozenset, frozenset]] = field(default_factory=dict)  # scenario -> (lines, arcs)
    arcs_measured: bool = True  # some record measured the file's arcs (a record from before the arcs has none)

    @property
    def possible(self) -> set[tuple[int, int]]:
        """The branches counted: none where no record measured them (never "not taken" for "not measured")."""
        return {(b.line, b.to) for b in self.changed.branches} if self.arcs_measured else set()

    def unrun_ranges(self) -> list[tuple[int, int]]:
        """(first, last) of each run of changed lines no scenario ran: a changed line that ran, or another function,
        ends one."""
        out: list[list[int]] = []
        previous = None
        for n in self.changed.lines:
            if n in self.ran:
                previous = None
                continue
            fn = self.changed.function_of(n)
            if previous is not None and fn == previous:
                out[-1][1] = n
            else:
                out.append([n, n])
            previous = fn
        return [(a, b) for a, b in out]


def file_coverage(files: list[ChangedFile], records: list[Record]) -> list[FileCoverage]:
    """Per changed file, what the records (the patch's own cells that watched its lines) ran of it."""
    out = []
    for changed in files:
        measured = any(changed.file in (r.measures.patch_arcs_run or {}) for r in records)
        cover = FileCoverage(changed, arcs_measured=measured)
        possible = cover.possible
        for r in records:
            lines = set((r.measures.patch_lines_run or {}).get(changed.file) or ()) & set(changed.lines)
            arcs = {changed.arc(tuple(a)) for a in (r.measures.patch_arcs_run or {}).get(changed.file) or ()}
            arcs &= possible
            old_lines, old_arcs = cover.by_scenario.get(r.scenario, (frozenset(), frozenset()))
            cover.by_scenario[r.scenario] = (old_lines | lines, old_arcs | arcs)
            cover.ran |= lines
            cover.taken |= arcs
        out.append(cover)
    return out


def _range(first: int, last: int) -> str:
    return f"line {first}" if first == last else f"lines {first}-{last}"


def ranges_of(lines: list[int]) -> list[str]:
    """Sorted line numbers as runs of consecutive ones: ["lines 120-129", "line 133"]."""
    runs: list[list[int]] = []
    for n in lines:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return [_range(a, b) for a, b in runs]


def range_words(cover: FileCoverage, first: int, last: int) -> str:
    """A range of changed code no scenario ran, named by what guards it: the innermost `if`, `else` or loop body
    holding it (taken in no scenario), else the function holding it."""
    changed = cover.changed
    guard = changed.guard_of(first)
    fn = changed.function_of(first)
    inside_fn = guard is not None and (fn is None or fn[0] <= guard.first <= fn[1])
    if inside_fn and not any(guard.first <= n <= guard.last for n in cover.ran):
        return f"{_range(first, last)}, {guard.words}: taken in no scenario"
    # Code past an early exit: the way out of a branch that leads to it was never taken ("`if X is None:` false").
    into = [b for b in changed.branches if b.to == first and (b.line, b.to) in cover.possible - cover.taken]
    if into:
        return f"{_range(first, last)}, reached by {into[0].words}: taken in no scenario"
    # Called in none: its body's first line is changed code and never ran (else only the changed lines are known).
    if fn is not None and fn[3] in changed.lines and not any(fn[0] <= n <= fn[1] for n in cover.ran):
        return f"{_range(first, last)}, in `{fn[2]}`: called in no scenario"
    where = f", in `{fn[2]}`" if fn is not None else ""
    return f"{_range(first, last)}{where}: ran in no scenario"


def _named(names: list[str]) -> str:
    shown = ", ".join(names[:SCENARIOS_NAMED]) + (", …" if len(names) > SCENARIOS_NAMED else "")
    return f"{len(names)} ({shown})"


def totals(covers: list[FileCoverage]) -> tuple[int, int, int, int]:
    """(changed lines that ran, changed lines, branches taken, branches) over every file."""
    return (
        sum(len(c.ran) for c in covers),
        sum(len(c.changed.lines) for c in covers),
        sum(len(c.taken) for c in covers),
        sum(len(c.possible) for c in covers),
    )


def _counts(ran: int, lines: int, taken: int, branches: int) -> str:
    text = f"{ran} of {lines} changed line(s) ran"
    return text + (f", {taken} of {branches} branch(es) taken" if branches else "")


def file_lines(cover: FileCoverage) -> list[str]:
    """A file's lines in the block: its counts, the code that never ran by range and guard, the branches not
    taken, and per scenario how much ran (scenarios alike grouped)."""
    changed = cover.changed
    head = f"  {changed.file}: {_counts(len(cover.ran), len(changed.lines), len(cover.taken), len(cover.possible))}"
    scenarios = sorted(cover.by_scenario)
    if len(cover.ran) == len(changed.lines) and cover.taken == cover.possible:
        alike = all(cover.by_scenario[s] == (frozenset(cover.ran), frozenset(cover.taken)) for s in scenarios)
        if alike:
            return [f"{head}, in every scenario ({len(scenarios)})"]
    lines = [head]
    if changed.branches and not cover.arcs_measured:
        lines.append(f"    its {len(changed.branches)} branch(es): not measured in these records (written before arcs)")
    ranges = cover.unrun_ranges()
    for first, last in ranges[:RANGES_NAMED]:
        lines.append(f"    {range_words(cover, first, last)}")
    if len(ranges) > RANGES_NAMED:
        lines.append(f"    +{len(ranges) - RANGES_NAMED} more range(s) that ran in no scenario")
    words = {(b.line, b.to): b.words for b in changed.branches}
    missed = sorted(cover.possible - cover.taken)
    if missed:
        named = "; ".join(f"{words[a]} (line {a[0]})" for a in missed[:RANGES_NAMED])
        lines.append(f"    branch(es) taken in no scenario: {named}")
    groups: dict[tuple, list[str]] = {}
    for s in scenarios:
        ran, taken = cover.by_scenario[s]
        groups.setdefault((len(ran), len(taken)), []).append(s)
    parts = [
        f"{n} line(s){f', {t} branch(es)' if cover.possible else ''} in {_named(names)}"
        if n
        else f"none in {_named(names)}"
        for (n, t), names in sorted(groups.items(), reverse=True)
    ]
    lines.append(f"    by scenario: {'; '.join(parts)}")
    return lines


def block_lines(covers: list[FileCoverage], cells: int) -> list[str]:
    """The closing block's lines about the changed code: one line in all, then each file's."""
    if not covers:
        return []
    counts = _counts(*totals(covers))
    lines = [f"the patch's changed code that ran ({cells} cell(s) watched): {counts}"]
    for cover in covers:
        lines += file_lines(cover)
    return lines


def verdict_note(covers: list[FileCoverage]) -> str:
    """What the verdict line adds: how much of the changed code ran, and that the rest is not judged; that none of
    it ran at all, where none did."""
    ran, lines, taken, branches = totals(covers)
    if not lines:
        return ""
    if not ran:
        return "; but none of its changed lines ran in any of them: this verdict says nothing about the change"
    if ran == lines and taken == branches:
        taken_all = f" and all {branches} branch(es) were taken" if branches else ""
        return f"; all {lines} of its changed line(s) ran{taken_all}"
    return f"; judged on the code that ran: {_counts(ran, lines, taken, branches)}, the rest in no scenario (above)"
