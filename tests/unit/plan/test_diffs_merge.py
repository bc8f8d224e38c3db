"""A diff that does not apply as is to the verl a command runs on is merged three-way with the verl it was written
against (plan/diffs.py, plan/merge.py, plan/patch_base.py): the installed verl for the project's patches, or the
one its `Written against:` line names. The verl here is a copy of the installed verl's file with one line as verl
main has it (0.9.1's `FusedLinearForPPO(impl_backend=...)` is `FusedLinearForPPO()` there); nothing imports verl."""

from __future__ import annotations

import shutil

import pytest
from verl_tree import git  # tests/verl_tree.py

from harness.errors import UsageError
from harness.paths import INSTALLED_VERL_ENV, PATCHES_DIR, ROOT
from harness.plan import arms
from harness.plan.arms import Arm, installed_verl_dir, merge_lines, merged_into
from harness.plan.diffs import DoesNotApply, applied, read_patch

pytestmark = pytest.mark.unit

QWEN3_VL = "verl/models/transformers/qwen3_vl.py"
THEN = 'FusedLinearForPPO(impl_backend=getattr(self, "_verl_fused_kernels_backend", "torch"))'
NOW = "FusedLinearForPPO()"
UNFUSED = ROOT / "tests" / "fixtures" / "wrong_patches" / "unfused-lm-head.diff"


@pytest.fixture
def main_like(tmp_path, monkeypatch):
    """A verl whose qwen3_vl.py differs from the installed one in the line verl main changed, with the installed
    verl named as the patches' base, as a tree's environment names it (plan/verl_trees.py enter)."""
    root = tmp_path / "tree" / "verl"
    (root / "models" / "transformers").mkdir(parents=True)
    installed = (installed_verl_dir().parent / QWEN3_VL).read_text()
    assert installed.count(THEN) == 1
    (root.parent / QWEN3_VL).write_text(installed.replace(THEN, NOW))
    monkeypatch.setenv(INSTALLED_VERL_ENV, str(installed_verl_dir()))
    return root


def diff(name: str):
    path = PATCHES_DIR / f"{name}.diff"
    return [(path, read_patch(path))]


def test_none_is_merged_where_only_its_context_differs(main_like):
    done = applied(main_like, diff("none"))
    text = done.files[QWEN3_VL]
    # #6659 undone, the tree's own line kept: main's file as it was before #6659.
    assert "full_tensor()" not in text and "from torch.distributed.tensor import DTensor" not in text
    assert f"fused_linear_for_ppo = {NOW}\n" in text and "vocab_weights=self.lm_head.weight," in text
    expected = (main_like.parent / QWEN3_VL).read_text()
    for gone in (
        "from torch.distributed.tensor import DTensor\n",
        "    vocab_weights = self.lm_head.weight\n    if isinstance(vocab_weights, DTensor):\n"
        "        vocab_weights = vocab_weights.full_tensor().to(hidden_states.device)\n\n",
    ):
        expected = expected.replace(gone, "", 1)
    assert text == expected.replace("vocab_weights=vocab_weights,", "vocab_weights=self.lm_head.weight,")
    [(label, merge)] = done.merges.items()
    assert label == "patches/none.diff" and merge.files == (QWEN3_VL,)
    version = (installed_verl_dir() / "version" / "version").read_text().strip()
    assert merge.against == f"verl {version}, the installed verl"


def test_a_diff_that_replaces_the_line_the_tree_changed_conflicts(main_like):
    """wrong_patches/unfused-lm-head.diff replaces 0.9.1's FusedLinearForPPO line, which main changed: a real
    conflict, named by hunk and by the tree's line."""
    with pytest.raises(DoesNotApply) as caught:
        applied(main_like, [(UNFUSED, read_patch(UNFUSED))])
    refused = caught.value
    assert refused.file == QWEN3_VL and refused.hunk.startswith("hunk #1 (@@ -366,17 ")
    line = (main_like.parent / QWEN3_VL).read_text().splitlines().index(f"    fused_linear_for_ppo = {NOW}") + 1
    assert refused.why.startswith(f"it conflicts with this verl's line {line} (`fused_linear_for_ppo = {NOW}`)")
    assert refused.why.endswith("in a three-way merge against verl 0.9.1, the installed verl")
    assert not refused.already_there


def test_the_candidate_applies_to_the_installed_verl_and_merges_onto_main(main_like):
    """The candidate leaves verl's own FusedLinearForPPO line alone and hands the module it builds to lm_head's
    FSDP forward method: the line is a neighbour of its changes, not one of them."""
    assert applied(installed_verl_dir(), diff("fsdp2-lmhead-forward")).merges == {}
    done = applied(main_like, diff("fsdp2-lmhead-forward"))
    text = done.files[QWEN3_VL]
    [merge] = done.merges.values()
    assert merge.files == (QWEN3_VL,)
    assert (
        f"    fused_linear_for_ppo = {NOW}\n    fused_head = _lm_head_fused_ppo_forward(self.lm_head)\n"
        "    log_probs, entropy = fused_head(fused_linear_for_ppo, hidden_states, rolled_labels, temperature)\n"
    ) in text
    assert "full_tensor()" not in text and "impl_backend" not in text


def test_the_candidate_in_every_family_file_merges_onto_main_the_same_way(main_like):
    """patches/fsdp2-lmhead-forward-all.diff keeps each file's FusedLinearForPPO line too: on the tree whose
    qwen3_vl.py has main's line, that file is merged and its call hands main's module to the helper."""
    assert applied(installed_verl_dir(), diff("fsdp2-lmhead-forward-all")).merges == {}
    (main_like / "utils" / "experimental").mkdir(parents=True)
    for rel in ("utils/experimental/torch_functional.py",) + tuple(
        f"models/transformers/{name}.py" for name in ("dense_common", "glm4v", "qwen2_vl", "qwen3_5")
    ):
        shutil.copy(installed_verl_dir() / rel, main_like / rel)
    done = applied(main_like, diff("fsdp2-lmhead-forward-all"))
    [merge] = done.merges.values()
    assert merge.files == (QWEN3_VL,)
    text = done.files[QWEN3_VL]
    assert (
        f"    fused_linear_for_ppo = {NOW}\n    log_probs, entropy = fused_linear_for_ppo_through_lm_head(\n"
        "        self.lm_head, fused_linear_for_ppo, hidden_states, rolled_labels, temperature\n"
    ) in text
    assert "full_tensor()" not in text and "impl_backend" not in text


def test_a_diff_that_applies_as_is_is_no_merge(main_like):
    assert applied(installed_verl_dir(), diff("none")).merges == {}


def test_the_arms_copy_and_its_records_say_merged(main_like, tmp_path, monkeypatch):
    monkeypatch.setattr(arms, "CACHE_DIR", tmp_path / "arms")
    monkeypatch.setattr(arms, "installed_verl_dir", lambda: main_like)
    arm = Arm("none", (PATCHES_DIR / "none.diff",))
    copy = arms.materialise(arm)
    assert f"fused_linear_for_ppo = {NOW}\n" in (copy / QWEN3_VL).read_text()
    fingerprint = merged_into(arms.arm_fingerprint(arm), copy)
    [patch] = fingerprint.patches
    assert patch.merged_against.endswith("the installed verl") and patch.merged_files == [QWEN3_VL]
    assert merge_lines(fingerprint) == [
        f"none: patches/none.diff merged onto this verl ({QWEN3_VL}), three-way against {patch.merged_against}"
    ]


def test_a_diff_written_against_a_tree_merges_with_that_trees_files(main_like, tmp_path):
    """A patch made on a checkout's commit (`harness patch diff` writes its `Written against:` line) carried onto
    another verl: the base is read from that commit, not from the installed verl."""
    repo = tmp_path / "checkout"
    (repo / "verl" / "models" / "transformers").mkdir(parents=True)
    shutil.copy(main_like.parent / QWEN3_VL, repo / QWEN3_VL)
    git(repo, "init", "--quiet")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "main-like")
    commit = git(repo, "rev-parse", "HEAD")
    # Edited there, beside the line it has as verl main has it; carried onto the installed verl, whose line differs.
    lines = (repo / QWEN3_VL).read_text().splitlines(keepends=True)
    at = lines.index(f"    fused_linear_for_ppo = {NOW}\n")
    patch = tmp_path / "mine.diff"
    patch.write_text(
        f"Mine.\nWritten against: {repo}@{commit}\n\n--- a/{QWEN3_VL}\n+++ b/{QWEN3_VL}\n"
        f"@@ -{at + 1},2 +{at + 1},3 @@\n {lines[at]}+    # checked\n {lines[at + 1]}"
    )
    done = applied(installed_verl_dir(), [(patch, patch.read_bytes())])
    assert done.merges[str(patch)].against == f"verl unknown at {repo}@{commit[:12]}"  # it has no version file
    assert f"    fused_linear_for_ppo = {THEN}\n    # checked\n{lines[at + 1]}" in done.files[QWEN3_VL]
    # Without the line, its base would be the installed verl, the very verl it is applied to: nothing to merge with.
    patch.write_text(patch.read_text().replace(f"Written against: {repo}@{commit}\n", ""))
    with pytest.raises(DoesNotApply, match=r"hunk #1 \(@@ .* its context was not found$"):
        applied(installed_verl_dir(), [(patch, patch.read_bytes())])


def test_a_declared_base_that_is_not_there_is_one_line(main_like, tmp_path):
    patch = tmp_path / "lost.diff"
    body = (PATCHES_DIR / "fsdp2-lmhead-forward.diff").read_text()
    patch.write_text(f"Written against: {tmp_path}/nowhere@main\n" + body)
    with pytest.raises(UsageError) as caught:
        applied(main_like, [(patch, patch.read_bytes())])
    nowhere = tmp_path / "nowhere"
    assert str(caught.value) == f"{patch}: 'Written against: {nowhere}@main': no such directory {nowhere}"
