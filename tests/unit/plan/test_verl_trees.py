"""A verl source tree as the verl a command runs on (plan/verl_trees.py) and a pull request's range (commands/pr.py):
what is read from a checkout, before anything runs. The tree is a git repository of our own made from the installed
verl's files (tests/verl_tree.py); nothing here imports verl or launches a rank."""

from __future__ import annotations

import json

import pytest
from verl_tree import git, make_verl_repo  # tests/verl_tree.py

from harness.cli import without_verl_flag
from harness.commands.pr import parse_range, pr_diff
from harness.errors import UsageError
from harness.inputs.expectations import not_applied_lines
from harness.paths import VERL_TREE_ENV
from harness.plan import verl_trees
from harness.plan.arms import installed_verl_dir
from harness.records.results import VerlTree
from harness.render.tables import tree_words

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_verl_repo(tmp_path_factory.mktemp("tree"))


def test_a_ref_resolves_to_its_commit_and_keys_the_environment(repo):
    tree, files = verl_trees.resolve(f"{repo.path}@fsdp2-lmhead-forward")
    assert tree.commit == repo.fix and tree.ref == "fsdp2-lmhead-forward" and not tree.dirty
    assert tree.version == (installed_verl_dir() / "version" / "version").read_text().strip()
    assert tree.key == f"{tree.version}-{repo.fix[:12]}"
    # At the fix, qwen3_vl.py is the candidate's; at base, the installed verl's, byte for byte.
    assert not verl_trees.same_as_installed(files, installed_verl_dir())
    _, base_files = verl_trees.resolve(f"{repo.path}@base")
    assert verl_trees.same_as_installed(base_files, installed_verl_dir())
    assert b"register_fsdp_forward_method" in files["verl/models/transformers/qwen3_vl.py"]


def test_a_tree_on_disk_is_keyed_by_its_files_and_says_it_is_dirty(repo, tmp_path):
    tree, files = verl_trees.resolve(str(repo.path))
    assert tree.commit == repo.fix and tree.ref is None and not tree.dirty
    target = repo.path / "verl" / "version" / "version"
    kept = target.read_bytes()
    try:
        target.write_bytes(b"0.10.0.dev0\n")
        edited, edited_files = verl_trees.resolve(str(repo.path))
    finally:
        target.write_bytes(kept)
    assert edited.dirty and edited.version == "0.10.0.dev0"
    assert edited.key != tree.key and edited.key.startswith("0.10.0.dev0-tree-")
    assert verl_trees.files_digest(edited_files) != verl_trees.files_digest(files)


@pytest.mark.parametrize(
    "spec, words",
    [
        ("{tmp}/nowhere", "no such directory"),
        ("{tmp}", "is not a verl checkout's root (no verl/__init__.py there)"),
        ("{repo}@no-such-branch", "no-such-branch: no such commit, branch or tag there"),
        ("{repo}@", "nothing after '@'"),
    ],
)
def test_a_bad_tree_is_one_line_naming_it(repo, tmp_path, spec, words):
    spec = spec.format(tmp=tmp_path, repo=repo.path)
    with pytest.raises(UsageError) as caught:
        verl_trees.resolve(spec)
    assert str(caught.value).startswith(f"VERL={spec}") and words in str(caught.value)


def test_the_verl_flag_is_dropped_from_the_command_run_again():
    argv = ["verify", "--verl", "/x@main", "--patch", "f.diff", "--verl=/y", "--scenario", "s"]
    assert without_verl_flag(argv) == ["verify", "--patch", "f.diff", "--scenario", "s"]


def test_a_pull_request_range_and_its_diff(repo):
    assert parse_range(repo.path, "base..fsdp2-lmhead-forward") == (repo.base, repo.fix)
    # Three dots: from the merge base, which here is base itself.
    assert parse_range(repo.path, "base...fsdp2-lmhead-forward") == (repo.base, repo.fix)
    found = pr_diff(repo.path, repo.base, repo.fix)
    assert found.outside == ["tests/test_lm_head.py"] and found.judged == ["verl/models/transformers/qwen3_vl.py"]
    text = found.text.decode()
    assert "a/verl/models/transformers/qwen3_vl.py" in text and "tests/test_lm_head.py" not in text
    assert text.startswith(f"Pull request {repo.base[:12]}..{repo.fix[:12]} of {repo.path}: run the fused head")


@pytest.mark.parametrize("bad", ["base", "base..", "..fsdp2-lmhead-forward", "base..nope"])
def test_a_bad_range_is_one_line(repo, bad):
    with pytest.raises(UsageError) as caught:
        parse_range(repo.path, bad)
    assert str(caught.value).startswith("pr: ")


def test_a_range_that_changes_nothing_under_verl_is_refused(repo):
    git(repo.path, "checkout", "--quiet", "-b", "docs-only", repo.fix)
    (repo.path / "README.md").write_text("docs\n")
    git(repo.path, "add", "README.md")
    git(repo.path, "commit", "--quiet", "-m", "docs")
    head = git(repo.path, "rev-parse", "HEAD")
    git(repo.path, "checkout", "--quiet", "fsdp2-lmhead-forward")
    with pytest.raises(UsageError, match="changes nothing under verl/: nothing to judge"):
        pr_diff(repo.path, repo.fix, head)


def test_the_tree_as_lines_name_it(record):
    tree = {"path": "/src/verl", "ref": "main", "commit": "a" * 40, "dirty": False}
    assert tree_words(VerlTree(**tree)) == f"/src/verl@main ({'a' * 12})"
    assert tree_words(VerlTree(**{**tree, "ref": "a" * 40, "dirty": True})) == f"/src/verl ({'a' * 12}-dirty)"
    skipped = record(arm="none", outcome="skipped")
    skipped.verdict.not_applied = {
        "patch": "patches/none.diff",
        "file": "verl/models/transformers/qwen3_vl.py",
        "hunk": "hunk #1 (@@ -19,7 +19,6 @@)",
        "why": "its context was not found",
        "already_there": True,
    }
    [line] = not_applied_lines([skipped, record(arm="upstream")])
    assert line == (
        "  not run: none (1 cell(s)): patches/none.diff does not apply to this verl: hunk #1 (@@ -19,7 +19,6 @@) of "
        "verl/models/transformers/qwen3_vl.py; its change is already in this verl"
    )


def test_a_patch_that_does_not_apply_says_how_to_make_one_for_this_verl(record, monkeypatch):
    from harness.plan.diffs import DoesNotApply
    from harness.run.executors import not_applied_record

    tree = {"path": "/src/verl", "ref": "main", "commit": "a" * 40, "dirty": False}
    monkeypatch.setenv(VERL_TREE_ENV, json.dumps(tree))
    refused = DoesNotApply("fix.diff", "verl/x.py", "hunk #1 (@@ -1 +1 @@)", "its context was not found")
    skipped = record(arm="fix", outcome="skipped")
    skipped.verdict.not_applied = not_applied_record(refused)
    port = f"python -m harness patch start --verl /src/verl@{'a' * 40} DIR, edit DIR/verl, python -m harness patch diff"
    assert not_applied_lines([skipped])[1] == f"    a patch for this verl: {port} DIR > fix.diff"
    # Its change already there: nothing to port.
    there = DoesNotApply("none.diff", "verl/x.py", "hunk #1 (@@ -1 +1 @@)", "its context was not found", True)
    assert not_applied_record(there).port is None
    # On a tree with edits, the tree's files on disk (no commit names them).
    assert verl_trees.port_words(VerlTree(**{**tree, "dirty": True})).startswith(
        "python -m harness patch start --verl /src/verl DIR"
    )
