"""A three-way merge of one file (plan/merge.py): a diff's changes to its base carried onto another copy of the file,
on small synthetic files where every line's fate can be read off."""

from __future__ import annotations

import pytest

from harness.plan.merge import Conflict, LineChange, merge

pytestmark = pytest.mark.unit

BASE = ["a\n", "b\n", "c\n", "d\n", "e\n", "f\n", "g\n"]


def carried(ours: list[str], *theirs: LineChange):
    return merge(BASE, ours, [f"ours{i}" for i in range(len(ours))], list(theirs))


def test_changes_far_apart_both_land():
    ours = ["a\n", "B\n", "c\n", "d\n", "e\n", "f\n", "g\n"]  # ours changed b
    done = carried(ours, LineChange(5, 6, ["F\n", "F2\n"], ["t", "t"], hunk=1))  # theirs changed f into two lines
    assert done.conflicts == []
    assert done.lines == ["a\n", "B\n", "c\n", "d\n", "e\n", "F\n", "F2\n", "g\n"]
    # Ours' lines keep their tags (an earlier diff's), theirs' bring the change's.
    assert done.tags == ["ours0", "ours1", "ours2", "ours3", "ours4", "t", "t", "ours6"]


def test_a_change_of_ours_beside_one_of_theirs_is_no_conflict():
    """As none.diff meets verl main: theirs removes c and changes e, ours changed d, the line between (theirs'
    context). git merge-file stops at such neighbours; the changes touch different lines and merge one way only."""
    ours = ["a\n", "b\n", "c\n", "D\n", "e\n", "f\n", "g\n"]
    done = carried(ours, LineChange(2, 3, [], hunk=1), LineChange(4, 5, ["E\n"], ["t"], hunk=1))
    assert done.conflicts == []
    assert done.lines == ["a\n", "b\n", "D\n", "E\n", "f\n", "g\n"]


def test_a_change_of_the_same_line_conflicts_naming_both_sides():
    ours = ["a\n", "b\n", "c\n", "D\n", "e\n", "f\n", "g\n"]
    done = carried(ours, LineChange(2, 5, ["X\n"], ["t"], hunk=4))  # theirs replaces c, d, e
    assert done.conflicts == [Conflict(hunk=4, base_start=2, base_end=5, ours_start=3, ours_end=4)]
    assert done.lines == ours  # nothing of a conflicting change is carried


def test_the_same_change_on_both_sides_is_taken_once():
    ours = ["a\n", "b\n", "d\n", "e\n", "f\n", "g\n"]  # ours removed c too
    done = carried(ours, LineChange(2, 3, [], hunk=1), LineChange(6, 7, ["G\n"], ["t"], hunk=2))
    assert done.conflicts == [] and done.lines == ["a\n", "b\n", "d\n", "e\n", "f\n", "G\n"]


@pytest.mark.parametrize(
    "ours, theirs, conflict",
    [
        # Two insertions at one place: no order between them is known.
        (["a\n", "b\n", "o\n", "c\n", "d\n", "e\n", "f\n", "g\n"], LineChange(2, 2, ["t\n"]), True),
        # An insertion inside the lines the other replaces.
        (["a\n", "b\n", "c\n", "o\n", "d\n", "e\n", "f\n", "g\n"], LineChange(2, 5, ["T\n"]), True),
        # Ours removed lines theirs changes: a conflict, named as ours' empty range.
        (["a\n", "b\n", "f\n", "g\n"], LineChange(3, 4, ["D\n"]), True),
        # An insertion of ours right before lines theirs replaces stays before them.
        (["a\n", "b\n", "o\n", "c\n", "d\n", "e\n", "f\n", "g\n"], LineChange(2, 4, ["T\n"]), False),
    ],
)
def test_what_is_and_is_not_in_each_others_way(ours, theirs, conflict):
    done = carried(ours, theirs)
    assert bool(done.conflicts) is conflict
    if not conflict:
        assert done.lines == ["a\n", "b\n", "o\n", "T\n", "e\n", "f\n", "g\n"]


def test_an_insertion_of_ours_after_lines_theirs_replaces_stays_after_them():
    ours = ["a\n", "b\n", "c\n", "d\n", "o\n", "e\n", "f\n", "g\n"]
    done = carried(ours, LineChange(2, 4, ["T\n"]))
    assert done.conflicts == [] and done.lines == ["a\n", "b\n", "T\n", "o\n", "e\n", "f\n", "g\n"]


def test_a_change_that_only_removes_marks_the_line_left_where_its_lines_were():
    ours = list(BASE)
    done = carried(ours, LineChange(2, 4, [], hunk=1, mark="t"))
    assert done.lines == ["a\n", "b\n", "e\n", "f\n", "g\n"]
    assert done.tags == ["ours0", "ours1", "t", "ours5", "ours6"]
