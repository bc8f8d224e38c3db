"""A patch's changed code in lines and branches (plan/changed_code.py, rank/measures/line_watch.py with branch=True,
judge_change/changed_coverage.py): a branch that a diff adds and no scenario takes is named by its line range and its
guard, the ways out of it counted, per scenario and in all; the verdict line judges only the code that ran. The
module is watched as a rank watches verl's: imported from a copy, measured by coverage.py; nothing imports verl."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from harness.commands.ran_lines import code_of, patch_ran_lines
from harness.plan.changed_code import PATCH_ARCS_FILE, arc_lines, write_arc_lines
from harness.plan.diffs import changed_lines
from harness.plan.patch_lines import watched_lines

pytestmark = pytest.mark.unit

SOURCE = """def gather(q, k, group=None):
    if group is None:
        return q, k
    return q + 1, k + 1
"""

# A packed path like verl PR 7417's: taken only where q and k have one shape (here: one value).
DIFF = """--- a/verl/pack.py
+++ b/verl/pack.py
@@ -1,4 +1,11 @@
 def gather(q, k, group=None):
     if group is None:
         return q, k
+    equal_layout = (
+        q == k
+        and group > 0
+    )
+    if equal_layout:
+        packed = q + k
+        return packed, packed
     return q + 1, k + 1
"""
PKG = "fake_pack_pkg"


def _code(tmp_path: Path):
    verl = tmp_path / "site" / "verl"
    verl.mkdir(parents=True, exist_ok=True)
    (verl / "pack.py").write_text(SOURCE)
    diff = tmp_path / "pack.diff"
    diff.write_text(DIFF)
    diffs = [(diff, DIFF.encode())]
    return code_of(verl, diffs), changed_lines(verl, diffs)["verl/pack.py"][0]


def test_the_changed_codes_branches_are_read_from_its_text_with_their_words(tmp_path):
    code, _ = _code(tmp_path)
    (changed,) = code.files
    assert changed.lines == (4, 5, 6, 8, 9, 10)
    assert [(b.line, b.to, b.words) for b in changed.branches] == [
        (8, 9, "`if equal_layout:` true"),
        (8, 11, "`if equal_layout:` false"),
    ]
    assert changed.guard_of(9).words == "the `if equal_layout:` branch"
    assert arc_lines(changed) == [8]
    write_arc_lines(tmp_path, code.files)
    assert json.loads((tmp_path / PATCH_ARCS_FILE).read_text()) == {"verl/pack.py": [8]}


def _watched(tmp_path: Path, text: str, calls: list[tuple]) -> tuple[dict, dict]:
    """(lines, arcs) a rank's watch records of the patched module imported from an arm's copy, for the calls."""
    from harness.rank.measures.line_watch import PatchLineWatch

    code, _ = _code(tmp_path)
    root = tmp_path / "arm"
    (root / PKG).mkdir(parents=True, exist_ok=True)
    (root / PKG / "__init__.py").write_text("")
    (root / PKG / "pack.py").write_text(text)
    rel = f"{PKG}/pack.py"
    watch = PatchLineWatch({rel: watched_lines(code.hunks)["verl/pack.py"]}, root, {rel: arc_lines(code.files[0])})
    sys.path.insert(0, str(root))
    try:
        watch.start()
        module = importlib.import_module(f"{PKG}.pack")
        for args in calls:
            module.gather(*args)
        ran = watch.stop()
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n.split(".")[0] == PKG]:
            del sys.modules[name]
    assert watch.failed is None
    return {"verl/pack.py": ran[rel]}, {"verl/pack.py": watch.arcs[rel]}


def test_a_branch_no_scenario_takes_is_named_by_its_lines_and_guard(tmp_path, record):
    code, text = _code(tmp_path)
    # Two scenarios: unequal q and k (the old path), and no group at all (returns before the change).
    lines_a, arcs_a = _watched(tmp_path / "a", text, [(1, 2, 1)])
    lines_b, arcs_b = _watched(tmp_path / "b", text, [(1, 2)])
    records = [
        record("engine-sp2", "pr", patch_lines_run=lines_a, patch_arcs_run=arcs_a),
        record("fsdp2-1gpu", "pr", patch_lines_run=lines_b, patch_arcs_run=arcs_b),
    ]
    block, note = patch_ran_lines(code, "pr", records)
    # Unequal q and k: `and group > 0` (line 6) is never evaluated, the packed branch (9-10) never taken.
    assert block[:6] == [
        "the patch's changed code that ran (2 cell(s) watched): 3 of 6 changed line(s) ran, 1 of 2 branch(es) taken",
        "  verl/pack.py: 3 of 6 changed line(s) ran, 1 of 2 branch(es) taken",
        "    line 6, in `gather`: ran in no scenario",
        "    lines 9-10, the `if equal_layout:` branch: taken in no scenario",
        "    branch(es) taken in no scenario: `if equal_layout:` true (line 8)",
        "    by scenario: 3 line(s), 1 branch(es) in 1 (engine-sp2); none in 1 (fsdp2-1gpu)",
    ]
    assert note == (
        "; judged on the code that ran: 3 of 6 changed line(s) ran, 1 of 2 branch(es) taken, the rest in no "
        "scenario (above)"
    )


def test_a_scenario_that_takes_the_branch_makes_every_line_and_branch_ran(tmp_path, record):
    code, text = _code(tmp_path)
    lines, arcs = _watched(tmp_path, text, [(1, 2, 1), (2, 2, 1)])  # unequal, then equal q and k
    block, note = patch_ran_lines(code, "pr", [record("engine-sp4", "pr", patch_lines_run=lines, patch_arcs_run=arcs)])
    assert block[1] == "  verl/pack.py: 6 of 6 changed line(s) ran, 2 of 2 branch(es) taken, in every scenario (1)"
    assert note == "; all 6 of its changed line(s) ran and all 2 branch(es) were taken"


def test_arcs_are_merged_over_ranks_as_a_union():
    from harness.records.results import RankMeasures, merge_over_ranks

    ranks = [RankMeasures(patch_arcs_run={"verl/a.py": [(3, 4)]}), RankMeasures(patch_arcs_run={"verl/a.py": [(3, 9)]})]
    assert merge_over_ranks(ranks)["patch_arcs_run"] == {"verl/a.py": [(3, 4), (3, 9)]}


EARLY = """--- a/verl/pack.py
+++ b/verl/pack.py
@@ -1,4 +1,7 @@
 def gather(q, k, group=None):
+    if group is None:
+        return q, k
+    q = q + 0
     if group is None:
         return q, k
     return q + 1, k + 1
"""


def test_code_past_an_early_exit_is_named_by_the_way_out_that_leads_to_it(tmp_path, record):
    verl = tmp_path / "site" / "verl"
    verl.mkdir(parents=True)
    (verl / "pack.py").write_text(SOURCE)
    diff = tmp_path / "early.diff"
    diff.write_text(EARLY)
    code = code_of(verl, [(diff, EARLY.encode())])
    # Every scenario runs without a group: the early return, never the line after it.
    ran = record(
        "fsdp2-1gpu", "pr", patch_lines_run={"verl/pack.py": [2, 3]}, patch_arcs_run={"verl/pack.py": [(2, 3)]}
    )
    block, _ = patch_ran_lines(code, "pr", [ran])
    assert "    line 4, reached by `if group is None:` false: taken in no scenario" in block
