"""What of a patch ran: the lines each hunk writes (plan/diffs.py changed_lines), those of them that run inside a
function (plan/patch_lines.py), the rank's watch of them (rank/measures/line_watch.py, coverage.py on a file of its
own), their union over ranks, and the closing block's words (commands/ran_lines.py,
judge_change/changed_coverage.py)."""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path

from harness.commands.ran_lines import code_of, patch_ran_lines
from harness.judge_change.patch_coverage import hunk_coverage
from harness.judge_change.patch_verdict import PatchVerdict
from harness.paths import ROOT
from harness.plan.diffs import HunkOrigin, changed_lines
from harness.plan.patch_lines import patch_hunks, watched_lines
from harness.records.results import RankMeasures, merge_over_ranks

SOURCE = """import os


def used(x):
    y = x + 1
    return y


def unused(x):
    z = x * 2
    return z
"""

# Hunk 1 changes an import (no function's code), hunk 2 the body of `used`, hunk 3 that of `unused`.
DIFF = """Three hunks.
--- a/verl/mod.py
+++ b/verl/mod.py
@@ -1,2 +1,3 @@
 import os
+import sys

@@ -5,2 +6,3 @@
     y = x + 1
+    y = y + 0
     return y
@@ -9,3 +11,3 @@
 def unused(x):
-    z = x * 2
+    z = 2 * x
     return z
"""

# A second diff of the same arm: one line before both functions, which moves their lines by one.
LATER = """--- a/verl/mod.py
+++ b/verl/mod.py
@@ -1,2 +1,3 @@
+# moved
 import os
 import sys
"""

ONLY_REMOVES = """--- a/verl/mod.py
+++ b/verl/mod.py
@@ -4,3 +4,2 @@
 def used(x):
-    y = x + 1
     return y
"""


def _verl(tmp_path: Path) -> Path:
    verl = tmp_path / "site" / "verl"
    verl.mkdir(parents=True)
    (verl / "mod.py").write_text(SOURCE)
    return verl


def _diffs(tmp_path: Path, *texts: str) -> list[tuple[Path, bytes]]:
    out = []
    for i, text in enumerate(texts):
        path = tmp_path / f"d{i}.diff"
        path.write_text(text)
        out.append((path, text.encode()))
    return out


def test_each_hunk_names_the_lines_it_wrote_in_the_patched_file(tmp_path):
    text, by_hunk = changed_lines(_verl(tmp_path), _diffs(tmp_path, DIFF))["verl/mod.py"]
    lines = text.splitlines()
    numbers = {origin.number: found for origin, found in by_hunk.items()}
    assert numbers == {1: [2], 2: [7], 3: [12]}
    assert [lines[n - 1] for n in (2, 7, 12)] == ["import sys", "    y = y + 0", "    z = 2 * x"]


def test_a_later_diff_of_the_arm_moves_an_earlier_hunks_lines(tmp_path):
    _, by_hunk = changed_lines(_verl(tmp_path), _diffs(tmp_path, DIFF, LATER))["verl/mod.py"]
    got = {(Path(o.diff).name, o.number): found for o, found in by_hunk.items()}
    assert got == {("d0.diff", 1): [3], ("d0.diff", 2): [8], ("d0.diff", 3): [13], ("d1.diff", 1): [1]}


def test_a_hunk_that_only_removes_names_the_line_standing_where_they_were(tmp_path):
    (hunk,) = patch_hunks(_verl(tmp_path), _diffs(tmp_path, ONLY_REMOVES))
    assert hunk.lines == (5,) and hunk.where == "used"


def test_only_lines_inside_a_function_count_and_the_hunk_names_its_function(tmp_path):
    hunks = patch_hunks(_verl(tmp_path), _diffs(tmp_path, DIFF))
    assert [(h.name, h.lines, h.where) for h in hunks] == [
        ("hunk 1 of mod.py", (), "no line of it runs inside a function: imports, definitions or comments only"),
        ("hunk 2 of mod.py", (7,), "used"),
        ("hunk 3 of mod.py", (12,), "unused"),
    ]
    assert watched_lines(hunks) == {"verl/mod.py": [7, 12]}


PKG = "fake_arm_pkg"  # the watch's files, as a package of their own: a test process never imports verl


@contextlib.contextmanager
def _arm_copy(tmp_path: Path):
    """The patched module as an arm's copy holds it, importable as PKG.mod from the copy's root, and gone after."""
    text, _ = changed_lines(_verl(tmp_path), _diffs(tmp_path, DIFF))["verl/mod.py"]
    root = tmp_path / "arm"
    (root / PKG).mkdir(parents=True)
    (root / PKG / "__init__.py").write_text("")
    (root / PKG / "mod.py").write_text(text)
    sys.path.insert(0, str(root))
    before = sys.gettrace()
    try:
        yield root
    finally:
        sys.settrace(before)
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n.split(".")[0] == PKG]:
            del sys.modules[name]


def test_the_watch_starts_at_the_patched_modules_import_and_sees_the_lines_that_ran(tmp_path):
    """The rank's watch itself (coverage.py), on the patched module imported from a copy, as a rank imports verl's."""
    from harness.rank.measures.line_watch import PatchLineWatch

    with _arm_copy(tmp_path) as root:
        watch = PatchLineWatch({f"{PKG}/mod.py": [7, 12]}, root).start()
        try:
            assert sys.gettrace() is None  # nothing patched imported yet: nothing traced
            module = importlib.import_module(f"{PKG}.mod")
            assert sys.gettrace() is not None
            assert module.used(1) == 2
        finally:
            ran = watch.stop()
        assert sys.gettrace() is None
    assert ran == {f"{PKG}/mod.py": [7]} and watch.failed is None


def test_the_watch_of_a_module_imported_already_starts_at_once_and_nothing_to_watch_traces_nothing(tmp_path):
    from harness.rank.measures.line_watch import PatchLineWatch

    with _arm_copy(tmp_path) as root:
        module = importlib.import_module(f"{PKG}.mod")  # imported before the watch: it measures at once
        watch = PatchLineWatch({f"{PKG}/mod.py": [7, 12]}, root).start()
        try:
            assert sys.gettrace() is not None
            module.used(1)
            module.unused(1)
        finally:
            ran = watch.stop()
        assert ran == {f"{PKG}/mod.py": [7, 12]}
        nothing = PatchLineWatch({f"{PKG}/mod.py": []}, root).start()
        assert sys.gettrace() is None
        assert nothing.stop() == {f"{PKG}/mod.py": []}


def test_a_watch_that_fails_leaves_the_work_as_it_is_and_says_the_lines_were_not_measured(tmp_path, monkeypatch):
    """issue 65: the old watcher's own TypeError became the cell's error (a false FAIL). Where coverage.py fails to
    start or to say what ran, the rank's code runs on and its result says the lines were not measured."""
    import coverage

    from harness.rank.measures.line_watch import PatchLineWatch
    from harness.rank.worker import stop_patch_watch
    from harness.records.results import RankResult

    def broken(*args, **kwargs):
        raise TypeError("unhashable type: 'dict'")

    with _arm_copy(tmp_path) as root:
        for method in ("start", "get_data"):
            with monkeypatch.context() as patched:
                patched.setattr(coverage.Coverage, method, broken)
                watch = PatchLineWatch({f"{PKG}/mod.py": [7]}, root).start()
                module = importlib.import_module(f"{PKG}.mod")
                assert module.used(1) == 2  # the work is untouched
                out = RankResult(rank=1, world_size=2, device="cpu")
                stop_patch_watch(watch, out)
            assert sys.gettrace() is None
            when = "start" if method == "start" else "stop"
            assert out.patch_lines_unseen == (
                f"the patch's lines were not measured on rank 1: coverage.py failed to {when}: "
                "TypeError: unhashable type: 'dict'"
            )
            assert "patch_lines_run" not in out.model_fields_set
            del sys.modules[f"{PKG}.mod"]


def test_no_module_of_the_harness_sets_a_trace_function_of_its_own():
    """The lines a patch runs are measured by coverage.py, not by a sys.settrace watcher of the house's."""
    from harness.paths import ROOT

    own = [p for p in (ROOT / "harness").rglob("*.py") if "settrace(" in p.read_text()]
    assert own == []


def test_lines_run_are_merged_over_ranks_as_a_union():
    ranks = [RankMeasures(patch_lines_run={"verl/a.py": [3, 5]}), RankMeasures(patch_lines_run={"verl/a.py": [4]})]
    assert merge_over_ranks(ranks)["patch_lines_run"] == {"verl/a.py": [3, 4, 5]}
    assert "patch_lines_run" not in merge_over_ranks([RankMeasures(), RankMeasures()])


def _hunks(tmp_path):
    return patch_hunks(_verl(tmp_path), _diffs(tmp_path, DIFF))


def _block(tmp_path, records, left_out=()):
    """(the closing block's lines, the verdict line's note) of DIFF's arm d0 for the records."""
    return patch_ran_lines(code_of(_verl(tmp_path), _diffs(tmp_path, DIFF)), "d0", records, list(left_out))


def test_the_closing_block_names_the_lines_that_ran_per_file_and_those_no_scenario_ran(tmp_path, record, scenario):
    records = [
        record("fsdp2-1gpu", "d0", patch_lines_run={"verl/mod.py": [7]}),
        record("fsdp2-multigpu", "d0", patch_lines_run={"verl/mod.py": [7]}),
    ]
    lines, note = _block(tmp_path, records, [scenario("engine-update-8")])
    assert lines == [
        "the patch's changed code that ran (2 cell(s) watched): 1 of 2 changed line(s) ran",
        "  verl/mod.py: 1 of 2 changed line(s) ran",
        "    line 12, in `unused`: called in no scenario",
        "    by scenario: 1 line(s) in 2 (fsdp2-1gpu, fsdp2-multigpu)",
        "  hunk 3 of mod.py (unused) ran in no scenario; not run here, and not known whether they run it: 1 "
        "scenario(s) (engine-update-8)",
    ]
    assert note == "; judged on the code that ran: 1 of 2 changed line(s) ran, the rest in no scenario (above)"


def test_earlier_records_of_the_same_diffs_name_the_left_out_scenarios_that_ran_a_hunk(tmp_path, record):
    here = [record("fsdp2-1gpu", "d0", patch_lines_run={"verl/mod.py": []})]
    earlier = [
        record("engine-update-8", "d0", patch_lines_run={"verl/mod.py": [12]}),
        record("fsdp2-1gpu", "d0", patch_lines_run={"verl/mod.py": [12]}),  # run here: this run's word stands
    ]
    (cover,) = [c for c in hunk_coverage(_hunks(tmp_path), here, earlier) if c.hunk.origin.number == 3]
    assert cover.ran_in == [] and cover.elsewhere == ["engine-update-8"]


def test_a_pass_whose_changed_lines_ran_nowhere_is_no_plain_pass(tmp_path, record):
    from harness.render.verdict_line import verdict_line

    records = [record("fsdp2-1gpu", "d0", patch_lines_run={"verl/mod.py": []})]
    verdict = PatchVerdict("d0", ran=records)
    verdict.ran_note = _block(tmp_path, records)[1]
    assert verdict_line(verdict) == (
        "verdict: d0 passes all 1 scenario(s) it is judged on here; but none of its changed lines ran in any of "
        "them: this verdict says nothing about the change"
    )
    assert verdict.exit_code == 0


def test_cells_that_watched_nothing_say_not_recorded_and_add_no_note(tmp_path, record):
    records = [record("fsdp2-1gpu", "d0")]  # failed before verl's import, or a record from before the watch
    assert _block(tmp_path, records) == (
        ["the patch's lines: not recorded in any cell (none reached verl's import)"],
        "",
    )


def test_hunk_origin_is_hashable_and_ordered_by_diff():
    a = HunkOrigin("d.diff", "verl/a.py", 1, "@@ -1 +1 @@")
    assert {a: 1}[HunkOrigin("d.diff", "verl/a.py", 1, "@@ -1 +1 @@")] == 1


FIXTURE = ROOT / "tests" / "fixtures" / "coverage" / "unfused-path-only.diff"


def test_report_of_a_verify_says_what_ran_from_the_diffs_its_records_keep(record):
    """`make report`: the hunks come from the text the record keeps (stamp.arm_patches), against installed verl."""
    import hashlib

    from harness.commands.ran_lines import report_ran_lines

    text = FIXTURE.read_text()
    patch = {"file": "tests/fixtures/coverage/unfused-path-only.diff", "text": text}
    patch["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    mine = record(
        "fsdp2-1gpu", "unfused-path-only", patch_lines_run={"verl/workers/engine/fsdp/transformer_impl.py": []}
    )
    mine.stamp.arm_patches = [patch]
    lines = report_ran_lines([mine, record("fsdp2-1gpu", "upstream")], "unfused-path-only")
    assert lines[1:3] == [
        "  verl/workers/engine/fsdp/transformer_impl.py: 0 of 1 changed line(s) ran",
        "    line 1425, the `if not distillation_only:` branch: taken in no scenario",
    ]
    assert report_ran_lines([mine], "upstream") == []


def test_upstreams_report_carries_the_same_per_hunk_lines():
    from harness.upstream.report import render_report

    lines = ["the patch's lines that ran, by hunk (1 cell(s) watched):", "  hunk 2 of qwen3_vl.py (f): ran in 1"]
    text = render_report(
        records=[],
        runs=[],
        candidate="c",
        fix_check="ok.",
        releases_table="",
        results_path="r",
        out_dir="o",
        ran_lines=lines,
    )
    assert (
        "What of `fix.diff` ran in the `c` runs above, line by line and branch by branch:\n\n```\n"
        + "\n".join(lines)
        + "\n```"
        in text
    )


def test_where_every_changed_line_ran_in_every_scenario_one_line_per_file_says_so(tmp_path, record):
    ran = {"verl/mod.py": [7, 12]}
    records = [record("fsdp2-1gpu", "d0", patch_lines_run=ran), record("direct-1gpu", "d0", patch_lines_run=ran)]
    assert _block(tmp_path, records) == (
        [
            "the patch's changed code that ran (2 cell(s) watched): 2 of 2 changed line(s) ran",
            "  verl/mod.py: 2 of 2 changed line(s) ran, in every scenario (2)",
        ],
        "; all 2 of its changed line(s) ran",
    )


def test_earlier_records_of_the_same_diffs_are_found_in_other_results_files(tmp_path, record, monkeypatch):
    import json

    from harness.commands.ran_lines import earlier_records

    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path))
    patch = {"file": "d0.diff", "sha256": "ab" * 32, "text": DIFF}
    other = {"file": "d1.diff", "sha256": "cd" * 32, "text": LATER}

    from harness.records.signing import signed_record

    def line(scenario, patches, signed=True):
        r = record(scenario, "d0", patch_lines_run={"verl/mod.py": [12]})
        r.stamp.arm_patches = patches
        return json.dumps(signed_record(r.written()) if signed else r.written(), default=str)

    (tmp_path / "1-matrix-1.jsonl").write_text(
        line("engine-update-8", [patch]) + "\n" + line("x", [patch, other]) + "\n"
    )
    # A record of the same diff that this harness did not write (no MAC): its lines are not taken as run.
    (tmp_path / "1-matrix-0.jsonl").write_text(line("forged", [patch], signed=False) + "\n")
    this = tmp_path / "2-verify-2.jsonl"
    this.write_text(line("fsdp2-1gpu", [patch]) + "\n")
    mine = [record("fsdp2-1gpu", "d0")]
    mine[0].stamp.arm_patches = [patch]
    assert [r.scenario for r in earlier_records(mine, this)] == ["engine-update-8"]  # not this run's, not d0+d1


def test_report_full_shows_the_patch_lines_a_record_ran_and_its_remark(record):
    from harness.commands.inspect import full_report

    r = record(patch_lines_run={"verl/mod.py": [7], "verl/b.py": []}, parity={"unread_rows_remark": "only prompt"})
    text = full_report(r, "r").splitlines()
    assert "the patch's lines run in verl/mod.py: 7" in text and "the patch's lines run in verl/b.py: none" in text
    assert "remark: only prompt" in text


BRANCHY = """def pick(fused, padded):
    if padded:
        if fused:
            return 1
        else:
            return 2
    elif fused:
        return 3
    return 4
"""


def test_a_hunk_is_named_by_its_function_and_the_branches_that_hold_it(tmp_path):
    verl = tmp_path / "site" / "verl"
    verl.mkdir(parents=True)
    (verl / "b.py").write_text(BRANCHY)
    diff = "--- a/verl/b.py\n+++ b/verl/b.py\n@@ -6,1 +6,1 @@\n-            return 2\n+            return -2\n"
    diff += "@@ -8,1 +8,1 @@\n-        return 3\n+        return -3\n"
    hunks = patch_hunks(verl, _diffs(tmp_path, diff))
    assert [h.where for h in hunks] == ["pick, where padded and not fused", "pick, where not padded and fused"]


def test_a_hunk_under_a_setting_names_the_left_out_scenarios_whose_settings_its_branch_asks(record, scenario):
    """The unfused-path fixture: its branch asks use_remove_padding and not use_fused_kernels; engine-unfused (the
    nightly's) has them, fsdp2-multigpu has the fused kernels on."""
    from harness.judge_change.patch_coverage import settings_match
    from harness.plan.arms import installed_verl_dir

    (hunk,) = patch_hunks(installed_verl_dir(), [(FIXTURE, FIXTURE.read_bytes())])
    assert settings_match(hunk, scenario("engine-unfused")) == "use_fused_kernels: false"
    assert settings_match(hunk, scenario("fsdp2-multigpu")) is None
    here = [record("fsdp2-1gpu", "unfused-path-only", patch_lines_run={hunk.origin.file: []})]
    left_out = [scenario("engine-unfused"), scenario("engine-update-8")]
    code = code_of(installed_verl_dir(), [(FIXTURE, FIXTURE.read_bytes())])
    lines, _ = patch_ran_lines(code, "unfused-path-only", here, left_out)
    assert lines[-1].endswith(
        "ran in no scenario; left out here, with the settings its branch asks: engine-unfused (use_fused_kernels: "
        "false): add them (--nightly)"
    )


def test_a_hunk_that_ran_nowhere_says_what_the_watch_could_not_see_on_cuda(tmp_path, record):
    unseen = "backward on CUDA runs on autograd's own threads, which the watch does not reach"
    records = [record("fsdp2-1gpu", "d0", patch_lines_run={"verl/mod.py": [7]}, patch_lines_unseen=unseen)]
    lines, _ = _block(tmp_path, records)
    assert lines[-1] == f"  hunk 3 of mod.py (unused) ran in no scenario; not seen in 1 cell(s): {unseen}"
    assert merge_over_ranks([RankMeasures(patch_lines_unseen=unseen), RankMeasures()])["patch_lines_unseen"] == unseen
