"""What a patch changes against its base, in words (judge_change/base_change.py classifies;
judge_change/patch_verdict.py keeps the list): the block of a pull request's differential verdict (`harness pr`,
`verify --differential`), the groups and names its verdict line uses (render/verdict_line.py writes that line), and
the one line verify adds under its absolute verdict. It reads the verdict's fields (arm, against_base, not_judged, ran,
not_applied) and the records, never judge's code: render comes before judge."""

from __future__ import annotations

from harness.records.record_cause import cause_of
from harness.records.results import ChangeKind
from harness.render.cause_words import grouped

NAMES_SHOWN = 4  # the scenarios named after a group; all of them: the table above or the comment's

# The kinds of judge_change/base_change.py (ChangeKind, in its one order), as the block heads them.
HEADINGS = {
    ChangeKind.NEW: "new: fails where its base passes, or otherwise than its base (counted against it)",
    ChangeKind.FIXED: "fixed: its base fails, it passes",
    ChangeKind.SAME: "the same as its base: the base's own failures, which it leaves as they are (not counted)",
    ChangeKind.NOT_JUDGED: "not judged here: the cell cannot run in this environment (not counted)",
    ChangeKind.UNCHANGED: "unchanged: passes, as its base does",
    ChangeKind.NO_BASE: "without its base beside it (compared with nothing)",
}


def names(changes: list, shown: int = NAMES_SHOWN) -> str:
    """ "a" or "3 scenarios (a, b, c)", at most `shown` named."""
    listed = [c.scenario for c in changes]
    if len(listed) == 1:
        return listed[0]
    more = ", …" if len(listed) > shown else ""
    return f"{len(listed)} scenarios ({', '.join(listed[:shown])}{more})"


def groups(changes: list, kind: ChangeKind) -> list[tuple[str, list]]:
    """The changes of one class grouped by their cause, the largest group first, each with its words: new by the
    patch's cause, same and fixed by the base's, not judged by what stops the cell."""
    chosen = [c for c in changes if c.kind == kind]
    if kind == ChangeKind.NOT_JUDGED:
        by: dict[str, list] = {}
        for c in chosen:
            by.setdefault(f"cannot run here: {c.blocked}", []).append(c)
        found = list(by.items())
    elif kind in (ChangeKind.SAME, ChangeKind.FIXED):
        failing = [c for c in chosen if c.base is not None and c.base.outcome != "pass"]
        found = grouped(failing, lambda c: cause_of(c.base))
    elif kind == ChangeKind.NEW:
        found = [
            (with_error(words, group[0].patch), group) for words, group in grouped(chosen, lambda c: cause_of(c.patch))
        ]
    else:
        found = [("", chosen)] if chosen else []
    return sorted(found, key=lambda kv: -len(kv[1]))


ERROR_CHARS = 100  # an unclassed error's own message after its cause's words


def with_error(words: str, record) -> str:
    """A new failure's cause, and where it is an error of no known class, its root message: what a maintainer
    needs to see first (the class alone says only "no known pattern")."""
    err = record.verdict.error
    if record.outcome != "error" or err is None or not words.startswith("no known pattern"):
        return words
    message = " ".join((err.root_message() or "").split())
    kind = err.root_type()
    cut = message if len(message) <= ERROR_CHARS else message[: ERROR_CHARS - 1] + "…"
    return f"{kind}: {cut}" if cut else words


def base_words(records: list) -> str:
    """The verl the patch was judged on, as a line names it: the tree's commit, else the installed version."""
    for r in records:
        tree = r.stamp.verl_tree
        if tree and tree.commit:
            return f"verl {tree.version or ''} at {tree.commit[:12]}".replace("  ", " ")
    versions = records[0].stamp.versions if records else None
    return f"the installed verl {(versions or {}).get('verl', '')}".rstrip()


def change_block(verdict, records: list) -> list[str]:
    """The differential block: per class, its scenarios grouped by cause, one line a group."""
    changes = verdict.against_base
    if not changes:
        return []
    lines = [f"what {verdict.arm} changes against its base ({base_words(records)}, run beside it), per scenario:"]
    for kind, heading in HEADINGS.items():
        found = groups(changes, kind)
        if not found:
            continue
        lines.append(f"  {heading}:")
        for words, group in found:
            how = ""
            if kind == ChangeKind.NEW:
                hows = sorted({c.how for c in group if c.how})
                how = f" ({'; '.join(hows[:2])}{'; …' if len(hows) > 2 else ''})" if hows else ""
            lines.append(f"    {words + ': ' if words else ''}{names(group)}{how}")
    return lines


def top_causes(found: list[tuple[str, list]], shown: int = 2) -> str:
    """ "cause (n), cause (m), +k other cause(s)": the largest groups first (a verdict line's causes)."""
    ordered = sorted(found, key=lambda kv: -len(kv[1]))
    parts = [f"{words} ({len(group)})" for words, group in ordered[:shown]]
    more = f", +{len(ordered) - shown} other cause(s)" if len(ordered) > shown else ""
    return ", ".join(parts) + more


def summary_line(verdict) -> str | None:
    """verify's one line under its absolute verdict: the same scenarios counted against upstream run beside it."""
    changes = verdict.against_base
    if all(c.kind == ChangeKind.NO_BASE for c in changes):  # --alone: nothing ran beside it
        return None
    counts = {k: sum(c.kind == k for c in changes) for k in HEADINGS}
    parts = [f"{n} {k if k != ChangeKind.SAME else 'the same as upstream'}" for k, n in counts.items() if n]
    return f"against upstream run beside it: {', '.join(parts)} (harness pr's verdict counts only the new)"
