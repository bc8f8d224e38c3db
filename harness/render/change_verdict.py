"""verify's default verdict in words (issue 74), the block above its verdict line (render/verdict_line.py writes the
line): it leads with what the patch changes against upstream run beside it (what it fixes, what it breaks), then what
it leaves as upstream has it, named once by cause (in code it does not touch: not counted; in its own code: counted),
then what could not be judged here, and last the absolute count that `verify --absolute` would give. Reads the
verdict's fields (judge_change/patch_verdict.py PatchVerdict: arm, against_base, untouched, counted, as_upstream,
failing, ran, judged, not_judged, not_applied) and the records, never judge's code.
"""

from __future__ import annotations

from harness.records.record_cause import cause_of
from harness.render.cause_words import grouped
from harness.render.differential import groups, names


def by_base_cause(changes: list) -> list[tuple[str, list]]:
    """The changes grouped by the base's (upstream's) cause, each group with its words."""
    return grouped(changes, lambda c: cause_of(c.base))


def left_unfixed(verdict) -> list:
    """The scenarios failing as upstream does in code the patch touches, counted (not a known defect)."""
    counted = {id(r) for r, _ in verdict.counted}
    return [c for c in verdict.against_base if c.kind == "same" and id(c.patch) in counted]


def untouched_files(verdict) -> str:
    """The family files the scenarios left as upstream has them run through, which the patch does not touch."""
    return ", ".join(sorted(set(verdict.untouched.values())))


def change_block(verdict, records: list) -> list[str]:
    """The block above the verdict line: per class, its scenarios grouped by cause, one line a group."""
    from harness.render.differential import base_words

    changes = verdict.against_base
    if not changes:
        return []
    elsewhere = {c.scenario for c in verdict.left_as_upstream}
    known = {id(r) for r, _, _ in verdict.as_upstream if r.scenario not in elsewhere}
    rows = [
        ("fixed: upstream fails, it passes", "fixed", [c for c in changes if c.kind == "fixed"]),
        ("BREAKS: fails where upstream passes, or otherwise (counted)", "new", [c for c in changes if c.kind == "new"]),
        ("leaves failing in code it touches, as upstream does (counted)", "same", left_unfixed(verdict)),
        (
            f"left as upstream has it, in code it does not touch ({untouched_files(verdict)}; not counted)",
            "same",
            verdict.left_as_upstream,
        ),
        (
            "the same as upstream, for a known verl defect or a recipe's own (not counted)",
            "same",
            [c for c in changes if c.kind == "same" and id(c.patch) in known],
        ),
        ("not judged here: the cell cannot run in this environment", "not judged", verdict.not_judged),
        ("unchanged: passes, as upstream does", "unchanged", [c for c in changes if c.kind == "unchanged"]),
    ]
    lines = [f"what {verdict.arm} changes against upstream ({base_words(records)}, run beside it), per scenario:"]
    for heading, kind, chosen in rows:
        if not chosen:
            continue
        lines.append(f"  {heading}:")
        for words, group in groups(chosen, kind):
            lines.append(f"    {words + ': ' if words else ''}{names(group)}")
    return lines


def absolute_line(verdict) -> str:
    """One line under the by-change verdict: what `verify --absolute` counts (every failure but a known defect's)."""
    failing, judged = len(verdict.failing), len(verdict.judged)
    word = f"FAILS in {failing} of {judged}" if failing else f"passes all {judged - len(verdict.as_upstream)}"
    return f"absolute (--absolute: upstream's own failures counted too): {word} scenario(s)"
