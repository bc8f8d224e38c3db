"""A three-way merge of one file, in memory: a diff's changes to the verl it was written against (base -> theirs)
carried onto another verl's copy of that file (ours), as `git merge-file` carries them, with one difference: a
change of ours that only borders one of theirs (the lines next to it, not the same lines) is no conflict. A diff's
context lines are such neighbours: `patches/none.diff`'s hunk reads 0.9.1's `FusedLinearForPPO(impl_backend=...)`
line as context beside the lines it removes, and verl main has another line there; git would stop at it, yet the
two changes touch different lines and merge one way only. Changes of the same lines (or two insertions at one
place, or one inside the lines the other replaces) are a conflict, unless both sides made the same change.

Each line carries a tag (plan/diffs.py: which hunk wrote it): ours' lines keep theirs, the lines theirs' changes
bring keep the change's."""

from __future__ import annotations

from dataclasses import dataclass, field
from difflib import SequenceMatcher


@dataclass
class LineChange:
    """Base lines [start, end) replaced by `lines` (start == end: an insertion before base line start)."""

    start: int
    end: int
    lines: list[str]
    tags: list = field(default_factory=list)  # one per line of `lines`
    hunk: int | None = None  # theirs' changes: the hunk of the diff it comes from
    mark: object = None  # a change that only removes: the tag of the line left standing where its lines were


@dataclass(frozen=True)
class Conflict:
    """Where theirs' change (from hunk `hunk`) and ours' changes meet: base lines [base_start, base_end) and ours'
    lines [ours_start, ours_end) (0-based, end excluded; an empty range: ours removed the base's lines there)."""

    hunk: int | None
    base_start: int
    base_end: int
    ours_start: int
    ours_end: int


@dataclass
class Merged:
    lines: list[str]
    tags: list
    conflicts: list[Conflict]


def _meets(a_start: int, a_end: int, b_start: int, b_end: int) -> bool:
    """Whether two changes of base lines [a_start, a_end) and [b_start, b_end) are in each other's way."""
    if a_start < b_end and b_start < a_end:  # they change a line in common
        return True
    if a_start == a_end and b_start == b_end:  # two insertions at one place: no order between them is known
        return a_start == b_start
    if a_start == a_end:  # an insertion strictly inside the lines the other replaces
        return b_start < a_start < b_end
    return a_start < b_start < a_end if b_start == b_end else False


def merge(base: list[str], ours: list[str], ours_tags: list, theirs: list[LineChange]) -> Merged:
    """Theirs' changes (to base, in base order, none overlapping) carried onto ours."""
    ops = SequenceMatcher(None, base, ours, autojunk=False).get_opcodes()
    mine = [op for op in ops if op[0] != "equal"]
    placed, conflicts = [], []
    for change in theirs:
        met = [op for op in mine if _meets(op[1], op[2], change.start, change.end)]
        if met:
            if any(op[1:3] == (change.start, change.end) and ours[op[3] : op[4]] == change.lines for op in met):
                continue  # ours made the very same change
            base_start = min([change.start] + [op[1] for op in met])
            base_end = max([change.end] + [op[2] for op in met])
            conflicts.append(
                Conflict(change.hunk, base_start, base_end, min(op[3] for op in met), max(op[4] for op in met))
            )
            continue
        placed.append((_ours_at(ops, change.start, last=True), _ours_at(ops, change.end, last=False), change))
    lines, tags = list(ours), list(ours_tags)
    for start, end, change in reversed(placed):  # from the end, so that earlier places stay where they are
        lines[start:end] = change.lines
        tags[start:end] = change.tags or [None] * len(change.lines)
        if change.mark is not None and not change.lines and lines:
            tags[min(start, len(lines) - 1)] = change.mark
    return Merged(lines, tags, conflicts)


def _ours_at(ops: list, point: int, last: bool) -> int:
    """The place in ours of base's line boundary `point` (before base line `point`), which no change of ours
    crosses (one that crosses it meets the change placed there: a conflict, never placed). Where ours inserted lines
    at that boundary, the place after them (last: where a change of theirs starts) or before them (where it ends):
    either way ours' insertion stays beside theirs' change, never replaced by it."""
    for tag, i1, i2, j1, j2 in reversed(ops) if last else ops:
        if i1 <= point <= i2:
            if tag == "equal":
                return j1 + point - i1
            return j1 if point == i1 else j2
    return 0  # base and ours both empty: no opcodes at all
