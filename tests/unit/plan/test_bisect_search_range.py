"""plan/bisect_search.py's range on a small git repository of our own: only the commits that touch verl/ are searched
(the others counted as left out), BAD is always the last, and a range that is no history (GOOD not an ancestor of
BAD, an unknown ref, no '..') is a one-line usage error."""

from __future__ import annotations

import subprocess

import pytest

from harness.errors import UsageError
from harness.plan.bisect_search import commits_touching_verl, parse_range


def git(repo, *args) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """c0 (GOOD) .. c5: c1, c3 change verl/; c2, c4 docs only; c5 verl/ again."""
    path = tmp_path_factory.mktemp("history")
    git(path, "init", "-q", "-b", "main")
    commits = []
    for i, where in enumerate(["verl", "verl", "docs", "verl", "docs", "verl"]):
        (path / where).mkdir(exist_ok=True)
        (path / where / "f.py").write_text(f"x = {i}\n")
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"c{i}")
        commits.append(git(path, "rev-parse", "HEAD"))
    return path, commits


def test_only_commits_that_touch_verl_are_searched(repo):
    path, c = repo
    good, bad = parse_range(path, f"{c[0][:8]}..main")
    assert (good, bad) == (c[0], c[5])
    assert commits_touching_verl(path, good, bad) == ([c[1], c[3], c[5]], 2)


def test_bad_is_last_even_when_it_touches_nothing_under_verl(repo):
    path, c = repo
    assert commits_touching_verl(path, c[0], c[4]) == ([c[1], c[3], c[4]], 1)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("main..HEAD~5", "is not an ancestor"),
        ("nosuch..main", "'nosuch' is no commit"),
        ("main", "give GOOD..BAD"),
        ("main..HEAD", "the same commit"),
    ],
)
def test_a_range_that_is_no_history_is_refused_in_one_line(repo, text, words):
    path, _ = repo
    with pytest.raises(UsageError, match=words):
        parse_range(path, text)
