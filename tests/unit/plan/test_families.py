"""verl's model families in verify (harness/plan/families.py): which `family` scenarios a patch brings into the
default verify, how each family file reads lm_head.weight as the patch leaves it (the installed verl's source text
with the diffs applied in memory; nothing imported), and the closing block's words. The runs: tests/distributed/
test_verify_families.py."""

from __future__ import annotations

import pytest

from harness.commands.run import FamilyView, verify_scenarios
from harness.inputs.scenario import load_all
from harness.paths import ROOT
from harness.plan.arms import resolve_arm
from harness.plan.families import (
    FAMILY_TAG,
    FamilyRead,
    family_lines,
    family_scenarios,
    patch_family_view,
    scenario_family_file,
    touched_family_files,
)

pytestmark = pytest.mark.unit

FIXTURES = ROOT / "tests" / "fixtures"
QWEN3_5_ONLY = str(FIXTURES / "family_fixes/qwen3-5-only.diff")
QWEN2_5_VL_SCENARIOS = {f"engine-qwen2-5-vl-{n}" for n in ("multigpu", "multigpu-3", "update", "update-3")}
QWEN3_DENSE_SCENARIOS = {f"engine-qwen3-dense-{n}" for n in ("multigpu", "multigpu-3", "update", "update-3")}
QWEN3_5_SCENARIOS = {
    "engine-qwen3-5-multigpu",
    "engine-qwen3-5-multigpu-3",
    "engine-qwen3-5-update",
    "engine-qwen3-5-update-3",
}


def test_shipped_family_scenarios_are_one_backward_and_update_at_two_and_three_ranks_per_family():
    family = [s for s in load_all() if FAMILY_TAG in s.tags]
    default = [s for s in family if "nightly" not in s.tags]
    assert {s.name for s in default} == QWEN3_5_SCENARIOS | QWEN2_5_VL_SCENARIOS | QWEN3_DENSE_SCENARIOS
    assert {scenario_family_file(s) for s in family} == {"qwen3_5.py", "qwen2_vl.py", "dense_common.py"}
    for file in ("qwen3_5.py", "qwen2_vl.py", "dense_common.py"):
        mine = [s for s in default if scenario_family_file(s) == file]
        assert sorted((s.ranks, bool(s.steps)) for s in mine) == [(2, False), (2, True), (3, False), (3, True)], file
    # every untagged shipped scenario runs Qwen3-VL's file: the default verify's own family
    assert {scenario_family_file(s) for s in load_all() if FAMILY_TAG not in s.tags} == {"qwen3_vl.py"}


def test_touched_family_files_are_the_changed_files_under_models_transformers():
    changed = {
        "verl/models/transformers/qwen3_5.py": "",
        "verl/models/transformers/monkey_patch.py": "",  # not a family file
        "verl/utils/experimental/torch_functional.py": "",
    }
    assert touched_family_files(changed) == {"qwen3_5.py"}


def _default_verify(arm: str) -> set[str]:
    scenarios, _ = verify_scenarios(load_all(), nightly=False)
    return {s.name for s in FamilyView(resolve_arm(arm), scenarios, chosen=False).scenarios}


def test_the_default_verify_adds_qwen3_5s_scenarios_only_for_a_patch_that_touches_qwen3_5_py():
    assert _default_verify(QWEN3_5_ONLY) >= QWEN3_5_SCENARIOS
    assert _default_verify("fsdp2-lmhead-forward-all") >= QWEN3_5_SCENARIOS
    others = QWEN2_5_VL_SCENARIOS | QWEN3_DENSE_SCENARIOS
    assert _default_verify("fsdp2-lmhead-forward-all") >= others  # it touches qwen2_vl.py and dense_common.py too
    assert not others & _default_verify(QWEN3_5_ONLY)
    for arm in ("upstream", "fsdp2-lmhead-forward"):  # Qwen3-VL's file only, or nothing
        assert not (QWEN3_5_SCENARIOS | others) & _default_verify(arm), arm
    # Qwen3-VL's scenarios stay in every default verify
    assert {"fsdp2-multigpu", "engine-update-3"} <= _default_verify(QWEN3_5_ONLY)


def test_scenarios_chosen_by_name_run_whatever_the_patch_touches():
    chosen = [s for s in load_all() if s.name == "engine-qwen3-5-multigpu"]
    assert [s.name for s in FamilyView(resolve_arm("upstream"), chosen, chosen=True).scenarios] == [
        "engine-qwen3-5-multigpu"
    ]
    assert family_scenarios(chosen, set()) == ([], chosen)


def _reads(arm: str) -> dict[str, str]:
    touched, reads = patch_family_view(resolve_arm(arm).patches)
    return {r.file: r.read for r in reads if r.defect}


def test_installed_verl_leaves_every_family_with_the_defect_and_the_candidates_fix_their_files():
    assert _reads("upstream") == {
        "qwen3_vl.py": "full_tensor()",
        "qwen3_5.py": "full_tensor()",
        "qwen2_vl.py": "as is (self.lm_head.weight)",
        "dense_common.py": "as is (self.lm_head.weight)",
        "glm4v.py": "as is (self.lm_head.weight)",
    }
    assert set(_reads("fsdp2-lmhead-forward")) == {"qwen3_5.py", "qwen2_vl.py", "dense_common.py", "glm4v.py"}
    assert set(_reads(QWEN3_5_ONLY)) == {"qwen3_vl.py", "qwen2_vl.py", "dense_common.py", "glm4v.py"}
    assert _reads("fsdp2-lmhead-forward-all") == {}


def test_a_fix_outside_the_family_files_that_puts_lm_head_in_the_root_unit_leaves_no_family_with_the_defect():
    assert _reads(str(FIXTURES / "alternative_fixes/lm-head-in-root-unit.diff")) == {}


def test_a_gather_with_its_own_gradient_placements_is_not_named_as_6659s_call():
    # the runs judge it (the sum over ranks: x W); the words are for #6659's own full_tensor()
    assert "qwen3_vl.py" not in _reads(str(FIXTURES / "alternative_fixes/full-tensor-partial-sum-cast.diff"))


def test_a_diff_that_does_not_apply_is_said_in_place_of_the_reads(tmp_path):
    bad = tmp_path / "bad.diff"
    bad.write_text(
        "--- a/verl/models/transformers/qwen3_5.py\n+++ b/verl/models/transformers/qwen3_5.py\n"
        "@@ -1,1 +1,1 @@\n-no such line\n+x\n"
    )
    touched, reads = patch_family_view((bad,))
    assert touched == set() and isinstance(reads, str) and reads.startswith("not read: ")
    assert family_lines(reads, {}, set()) == [f"families: {reads}"]


def _read(name: str, read: str) -> FamilyRead:
    return FamilyRead(name, read, f"models/transformers/{name}")


def test_the_closing_lines_name_each_family_left_with_the_defect_and_whether_it_ran():
    reads = [
        _read("qwen3_vl.py", "full_tensor()"),
        _read("qwen3_5.py", "does not read lm_head.weight"),
        _read("qwen2_vl.py", "as is (self.lm_head.weight)"),
        _read("dense_common.py", "as is (self.lm_head.weight)"),
    ]
    text = " ".join(line.strip() for line in family_lines(reads, {"qwen3_vl.py": 20, "qwen3_5.py": 4}, {"qwen3_5.py"}))
    assert text == (
        "families: qwen3_vl.py still gathers lm_head by hand (20 scenario(s) above); qwen3_5.py no longer reads"
        " lm_head.weight outside lm_head (4 scenario(s) above); qwen2_vl.py, dense_common.py still read the sharded"
        " lm_head weight (not run: the patch does not touch it)"
    )


def test_the_closing_line_for_a_qwen3_vl_only_fix_names_qwen3_5_py():
    reads = [_read("qwen3_vl.py", "does not read lm_head.weight"), _read("qwen3_5.py", "full_tensor()")]
    lines = family_lines(reads, {"qwen3_vl.py": 20}, {"qwen3_vl.py"})
    assert " ".join(line.strip() for line in lines) == (
        "families: qwen3_vl.py no longer reads lm_head.weight outside lm_head (20 scenario(s) above); qwen3_5.py"
        " still gathers lm_head by hand (not run: the patch does not touch it)"
    )
    assert all(len(line) <= 116 for line in lines)


def test_nothing_is_said_where_no_family_has_the_defect_and_only_qwen3_vls_ran():
    reads = [_read(n, "does not read lm_head.weight") for n in ("qwen3_vl.py", "qwen3_5.py")]
    assert family_lines(reads, {"qwen3_vl.py": 20}, set()) == []
    root = [FamilyRead("qwen3_5.py", "full_tensor()", "w", own_unit=False)]  # lm_head in the root unit
    assert family_lines(root, {}, set()) == []


def test_a_nightly_family_scenario_is_named_as_left_out_only_where_the_patch_would_run_it():
    _, left_out = verify_scenarios(load_all(), nightly=False)
    names = {s.name for s in FamilyView(resolve_arm("fsdp2-lmhead-forward"), [], chosen=False).kept(left_out)}
    assert "engine-qwen3-5-packed-samples" not in names and "engine-update-sgd" in names  # Qwen3-VL's stay
    names = {s.name for s in FamilyView(resolve_arm(QWEN3_5_ONLY), [], chosen=False).kept(left_out)}
    assert "engine-qwen3-5-packed-samples" in names


def test_files_that_share_a_count_of_scenarios_are_said_to_have_it_each():
    reads = [_read(n, "does not read lm_head.weight") for n in ("qwen3_5.py", "qwen2_vl.py")]
    lines = family_lines(reads, {"qwen3_5.py": 4, "qwen2_vl.py": 4}, {"qwen3_5.py", "qwen2_vl.py"})
    assert lines == [
        "families: qwen3_5.py, qwen2_vl.py no longer read lm_head.weight outside lm_head (4 scenario(s) above each)"
    ]


def test_for_the_installed_verl_itself_the_families_not_run_are_said_to_need_a_patch_that_touches_them():
    lines = family_lines([_read("qwen3_5.py", "full_tensor()")], {}, set(), patched=False)
    assert " ".join(line.strip() for line in lines) == (
        "families: qwen3_5.py still gathers lm_head by hand (not run: a verify of a patch that touches it runs its"
        " scenarios)"
    )


def test_a_text_only_models_engine_samples_have_one_row_of_positions_and_lengths_of_their_own():
    from harness.inputs.scenario import BatchSettings
    from harness.rank.oracle.batch import make_samples
    from harness.rank.oracle.model import build_model

    model = build_model("tiny-qwen3", 1234)
    samples = make_samples(model, BatchSettings(micro_batch_size=3), 1234, 0, 0)
    for s in samples:
        n = len(s.prompt_ids) + len(s.response_ids)
        assert s.position_ids.tolist() == [list(range(n))] and s.pixel_values is None and s.image_grid_thw is None
        assert 6 <= len(s.response_ids) <= 12  # half of response_len to all of it, as make_samples' own
    assert len({len(s.prompt_ids) + len(s.response_ids) for s in samples}) > 1  # never one length by chance
    again = make_samples(model, BatchSettings(micro_batch_size=3), 1234, 0, 0)
    assert all(
        a.prompt_ids.equal(b.prompt_ids) and a.response_ids.equal(b.response_ids) for a, b in zip(samples, again)
    )
