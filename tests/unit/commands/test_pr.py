"""A pull request's range and diff (commands/pr.py) as a busy maintainer's machine meets them: two ranges of one head
at once, a range given backwards, files that are not UTF-8, binary, or named with a space. The checkout is the
tests' own (tests/verl_tree.py); nothing here launches a rank or imports verl."""

from __future__ import annotations

import threading

import pytest
from verl_tree import add_odd_commit, make_verl_repo  # tests/verl_tree.py

from harness.commands import pr
from harness.errors import UsageError
from harness.judge_change.patch_verdict import patch_changes
from harness.plan.diffs import applied
from harness.plan.patch_base import declared

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_verl_repo(tmp_path_factory.mktemp("tree"))


@pytest.fixture(scope="module")
def odd(repo):
    return add_odd_commit(repo)


def test_a_reversed_two_dot_range_is_refused_in_one_line(repo):
    with pytest.raises(UsageError) as caught:
        pr.parse_range(repo.path, "fsdp2-lmhead-forward..base")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("pr: range 'fsdp2-lmhead-forward..base': ")
    assert "fsdp2-lmhead-forward is not an ancestor of base" in message and "a revert" in message
    assert message.endswith("the range backwards? base..fsdp2-lmhead-forward")
    # Three dots judge base from their merge base, base itself: nothing of fix's undone (and nothing to judge).
    assert pr.parse_range(repo.path, "fsdp2-lmhead-forward...base") == (repo.base, repo.base)


def test_a_range_of_two_branches_apart_points_to_their_merge_base(repo, odd):
    from verl_tree import git

    git(repo.path, "checkout", "--quiet", "-b", "apart", repo.base)
    (repo.path / "verl" / "apart.py").write_text("# on another branch\n")
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "--quiet", "-m", "apart")
    git(repo.path, "checkout", "--quiet", "fsdp2-lmhead-forward")
    with pytest.raises(UsageError, match=r"a revert\); apart...odd judges odd from their merge base$"):
        pr.parse_range(repo.path, "apart..odd")
    assert pr.parse_range(repo.path, "apart...odd") == (repo.base, odd.commit)


def test_every_file_of_the_diff_is_named_and_kept_whole(repo, odd, tmp_path):
    found = pr.pr_diff(repo.path, repo.fix, odd.commit)
    assert found.judged == [odd.latin1, odd.spaced]  # a name with a space stays one name
    assert found.not_utf8 == [odd.latin1] and found.binary == [odd.binary] and found.outside == []
    # The Latin-1 file's bytes are in the diff as they are, and the diff applies to the verl at the range's base.
    assert "+# caf\u00e9 au lait\n".encode("latin-1") in found.text
    assert declared(found.text.decode("utf-8", "surrogateescape")) == f"{repo.path}@{repo.fix}"
    path = pr.write_diff(found.text, repo.fix, odd.commit)
    tree = tmp_path / "at-fix"
    (tree / "verl").mkdir(parents=True)
    done = applied(tree / "verl", [(path, path.read_bytes())])
    assert done.merges == {} and set(done.files) == {odd.latin1, odd.spaced}
    assert done.files[odd.latin1].encode("utf-8", "surrogateescape") == "# caf\u00e9 au lait\n".encode("latin-1")
    # What verify's closing block says the patch touches: both names whole.
    assert patch_changes([path])[1] == [odd.latin1, odd.spaced]


def test_a_range_of_binary_files_only_is_refused_naming_them(repo, tmp_path):
    from verl_tree import git

    git(repo.path, "checkout", "--quiet", "-b", "binary-only", repo.fix)
    (repo.path / "verl" / "blob.bin").write_bytes(b"\x00\xff")
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "--quiet", "-m", "a blob")
    head = git(repo.path, "rev-parse", "HEAD")
    git(repo.path, "checkout", "--quiet", "fsdp2-lmhead-forward")
    with pytest.raises(
        UsageError,
        match=r"changes nothing under verl/ but 1 binary file\(s\) \(verl/blob.bin\), which no text diff carries",
    ):
        pr.pr_diff(repo.path, repo.fix, head)


def test_two_bases_of_one_head_keep_two_diffs_each_written_whole(repo, odd, tmp_path, monkeypatch):
    monkeypatch.setattr(pr, "PR_DIFFS_DIR", tmp_path / "prs")
    on_base = pr.pr_diff(repo.path, repo.base, odd.commit).text
    on_fix = pr.pr_diff(repo.path, repo.fix, odd.commit).text
    assert on_base != on_fix
    paths, seen = {}, []

    def write(base, text):
        for _ in range(50):  # at once, over and over: a reader never sees the other's or half of one
            paths[base] = pr.write_diff(text, base, odd.commit)
            seen.append(paths[base].read_bytes() == text)

    threads = [threading.Thread(target=write, args=args) for args in ((repo.base, on_base), (repo.fix, on_fix))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(seen) and len(seen) == 100
    assert paths[repo.base] != paths[repo.fix] and paths[repo.base].name == paths[repo.fix].name
    assert paths[repo.base].read_bytes() == on_base and paths[repo.fix].read_bytes() == on_fix
    assert not list((tmp_path / "prs").rglob(".*"))  # no temporary file left behind
