"""verify's default verdict leads with what the patch changes against upstream beside it (issue 74): a one-family fix
is told what it fixes, upstream's own failures in code it does not touch are said, not counted (exit 0), what it
leaves failing in its own code counts; --absolute keeps the old count. Built records (tests/record_builder.py), no
torchrun."""

from __future__ import annotations

import pytest
from record_builder import UNREDUCED, cell, error, make_record  # tests/record_builder.py

from harness.errors import EXIT_COUNTED, EXIT_NOT_JUDGED, EXIT_OK
from harness.judge_change.patch_reach import reached, untouched
from harness.judge_change.patch_verdict import judge_patch, new_warnings

pytestmark = pytest.mark.unit

QWEN2_VL = "verl/models/transformers/qwen2_vl.py"
HELPER = "verl/utils/experimental/torch_functional.py"
FILES = [QWEN2_VL, HELPER]  # the Qwen2.5-VL-only fix's files (tests/fixtures/family_fixes/qwen2-5-vl-only.diff)


def _cell(arm: str, outcome: str, scenario: str, model: str, *, lines=None, **kw):
    """A judged record of the scenario on the model; lines: the patch's lines its ranks ran (None: not measured)."""
    record = cell(arm, outcome, scenario, **kw)
    record.stamp.scenario_spec = {"model": model}
    record.measures.patch_lines_run = lines
    return record


def _unreduced(arm: str, scenario: str, model: str, lines=None):
    return _cell(arm, "mismatch", scenario, model, lines=lines, cause=UNREDUCED, failing=["lm_head.weight"])


def _qwen2_vl_fix(qwen2_vl_lines=(512,)):
    """Two Qwen3-VL scenarios failing in both arms where none of the fix's lines ran; one Qwen2.5-VL scenario that
    upstream fails and the fix passes, its lines run."""
    none_ran = {QWEN2_VL: [], HELPER: []}
    ran = {QWEN2_VL: list(qwen2_vl_lines), HELPER: [300]}
    return [
        _unreduced("fix", "fsdp2-multigpu", "tiny-qwen3-vl", none_ran),
        _unreduced("upstream", "fsdp2-multigpu", "tiny-qwen3-vl"),
        _unreduced("fix", "engine-update", "tiny-qwen3-vl", none_ran),
        _unreduced("upstream", "engine-update", "tiny-qwen3-vl"),
        _cell("fix", "pass", "engine-qwen2-5-vl", "tiny-qwen2-5-vl", lines=ran),
        _unreduced("upstream", "engine-qwen2-5-vl", "tiny-qwen2-5-vl"),
    ]


def test_a_one_family_fix_is_told_what_it_fixes_and_exits_0_by_default_and_1_absolute():
    from harness.render.verdict_line import verdict_line

    records = _qwen2_vl_fix()
    verdict = judge_patch("fix", records, {}, patch_files=FILES)
    assert verdict.by_change and verdict.exit_code == EXIT_OK and verdict.counted == []
    assert verdict.untouched == {"fsdp2-multigpu": "qwen3_vl.py", "engine-update": "qwen3_vl.py"}
    line = verdict_line(verdict)
    assert line.startswith(
        "verdict: fix fixes engine-qwen2-5-vl of 3 compared with upstream run beside it, and breaks none; leaves 2 as "
        "upstream has them, in code it does not touch (qwen3_vl.py): "
    ), line
    assert line.endswith("(2) (not counted)") and "FAILS" not in line
    absolute = judge_patch("fix", records, {})  # --absolute: upstream's own failures count too
    assert not absolute.by_change and absolute.exit_code == EXIT_COUNTED
    assert verdict_line(absolute).startswith("verdict: fix FAILS in 2 of 3 scenario(s)")


def test_what_a_fix_leaves_failing_in_its_own_code_counts():
    """The Qwen2.5-VL scenario fails as upstream does with the fix's lines run: the fix does not fix what it touches."""
    records = _qwen2_vl_fix()
    records[4] = _unreduced("fix", "engine-qwen2-5-vl", "tiny-qwen2-5-vl", {QWEN2_VL: [512], HELPER: []})
    verdict = judge_patch("fix", records, {}, patch_files=FILES)
    assert verdict.exit_code == EXIT_COUNTED and [r.scenario for r, _ in verdict.counted] == ["engine-qwen2-5-vl"]
    from harness.render.verdict_line import verdict_line

    line = verdict_line(verdict)
    assert (
        "changes no outcome in the 3 scenario(s)" in line and "; LEAVES 1 failing as upstream does, in code it " in line
    )


def test_where_lines_were_not_measured_the_family_files_decide():
    """A cell that stopped before verl was imported watched no line: a patch of family files only reaches the
    scenarios of those files; one that changes any other file may reach every scenario."""
    qwen3_vl = _unreduced("fix", "fsdp2-multigpu", "tiny-qwen3-vl", None)
    assert untouched(qwen3_vl, {"qwen2_vl.py"}) == "qwen3_vl.py"
    assert untouched(qwen3_vl, {"qwen3_vl.py"}) is None
    assert untouched(qwen3_vl, None) is None  # touches a file outside the families: every scenario
    verdict = judge_patch("fix", _qwen2_vl_fix()[:4], {}, patch_files=[HELPER])
    assert verdict.untouched == {"fsdp2-multigpu": "qwen3_vl.py", "engine-update": "qwen3_vl.py"}  # measured: none ran


def test_a_fix_judged_only_where_it_changes_nothing_is_not_judged():
    """Only scenarios the patch does not reach, each failing as upstream does: nothing said about the patch."""
    verdict = judge_patch("fix", _qwen2_vl_fix()[:4], {}, patch_files=FILES)
    assert verdict.exit_code == EXIT_NOT_JUDGED
    from harness.render.verdict_line import verdict_line

    assert verdict_line(verdict).startswith("verdict: fix NOT JUDGED: each of the 2 scenario(s) compared fails exactly")


def test_a_fix_that_breaks_a_scenario_upstream_passes_is_counted():
    records = [
        _unreduced("fix", "fsdp2-1gpu", "tiny-qwen3-vl", {QWEN2_VL: [512]}),
        _cell("upstream", "pass", "fsdp2-1gpu", "tiny-qwen3-vl"),
    ]
    verdict = judge_patch("fix", records, {}, patch_files=FILES)
    assert verdict.exit_code == EXIT_COUNTED
    from harness.render.verdict_line import verdict_line

    assert verdict_line(verdict).startswith("verdict: fix BREAKS fsdp2-1gpu of 1 compared with upstream run beside it")


VIEW = {"category": "UserWarning", "message": "FSDP2-wrapped module (FSDPLinear) returned a view tensor."}


def test_a_warning_is_the_patchs_only_where_upstreams_cell_got_as_far():
    """Upstream crashed in its build where the fix ran to the end: the warning the fix raised there is not known
    to be the fix's (upstream may raise it too where it gets that far); beside a cell that got as far, it is."""
    crashed = error("RuntimeError", "boom")
    crashed["phase"] = "build"
    records = [
        make_record("fsdp2-bf16", "fix", "pass", warnings=[VIEW]),
        cell("upstream", "error", "fsdp2-bf16", err=crashed),
    ]
    assert reached(records[1]) < reached(records[0])
    [found], against = new_warnings("fix", records)
    assert (found.cells, found.beyond_base, against) == (0, 1, "upstream's runs beside it")
    from harness.render.verify_closing import warning_lines

    [line] = warning_lines(judge_patch("fix", records, {}))
    assert line.startswith("warnings raised only where upstream's cell stopped earlier (not compared): UserWarning")
    records.append(make_record("fsdp2-multigpu", "fix", "pass", warnings=[VIEW]))
    records.append(make_record("fsdp2-multigpu", "upstream", "mismatch", warnings=[]))
    [found], _ = new_warnings("fix", records)
    assert (found.cells, found.beyond_base) == (1, 1)


def test_a_recipe_failing_as_upstream_where_the_fix_changes_nothing_is_said_once():
    """A recipe's own failure (no expectation names it) in code the fix does not touch: one of the scenarios left as
    upstream has them, not a second time as a known defect's."""
    from harness.render.verdict_line import verdict_line

    records = _qwen2_vl_fix()
    for r in records[:2]:
        r.stamp.scenario_spec = {"model": "tiny-qwen3-vl", "verl": {"actor_rollout_ref.model.use_fused_kernels": True}}
    verdict = judge_patch("fix", records, {}, patch_files=FILES)
    assert [r.scenario for r, _, _ in verdict.as_upstream] == ["fsdp2-multigpu"] and verdict.exit_code == EXIT_OK
    line = verdict_line(verdict)
    assert "leaves 2 as upstream has them" in line and "known verl defect" not in line, line
