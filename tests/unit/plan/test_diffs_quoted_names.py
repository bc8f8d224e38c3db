"""Names git quotes in a diff's headers (`"a/verl/\\303\\251.py"`: a tab, a quote, a backslash, non-ASCII or a byte
that is not UTF-8 in the name) read whole: a pull request whose files are so named is judged like any other. Real
git, in a repository of this test's own; nothing here launches a rank or imports verl."""

from __future__ import annotations

import subprocess

import pytest

from harness.commands import pr
from harness.errors import UsageError
from harness.judge_change.patch_verdict import patch_changes
from harness.plan.diffs import applied, header_name, unquoted_name

pytestmark = pytest.mark.unit

# Each a name git quotes: non-ASCII (core.quotePath), a tab, a quote, a backslash, a Latin-1 byte (not UTF-8).
CHANGED = ("verl/\u00e9.py", "verl/a\tb.py", 'verl/q"uote.py', "verl/back\\slash.py", "verl/caf\udce9.py")
CREATED = "verl/n\u00e9w\ttab.py"


def _git(repo, *args):
    env_args = ("-c", "user.name=t", "-c", "user.email=t@example.com")
    return subprocess.run(["git", "-C", str(repo), *env_args, *args], check=True, capture_output=True).stdout


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "checkout"
    (repo / "verl").mkdir(parents=True)
    _git(repo, "init", "--quiet")
    (repo / "verl" / "__init__.py").write_text("")
    for name in CHANGED:
        (repo / name).write_text("a = 1\nb = 2\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD").decode().strip()
    for name in CHANGED:
        (repo / name).write_text("a = 1\nb = 3\n")
    (repo / CREATED).write_text("new = True\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "odd names")
    return repo, base, _git(repo, "rev-parse", "HEAD").decode().strip()


def test_a_diff_of_names_git_quotes_is_read_whole_and_applies(repo, tmp_path, monkeypatch):
    checkout, base, head = repo
    monkeypatch.setattr(pr, "PR_DIFFS_DIR", tmp_path / "prs")
    found = pr.pr_diff(checkout, base, head)
    assert sorted(found.judged) == sorted([*CHANGED, CREATED])
    assert b'"a/verl/\\303\\251.py"' in found.text and b'"b/verl/a\\tb.py"' in found.text  # git did quote them
    path = pr.write_diff(found.text, base, head)
    at_base = tmp_path / "at-base"
    (at_base / "verl").mkdir(parents=True)
    for name in CHANGED:
        (at_base / name).write_text("a = 1\nb = 2\n")
    done = applied(at_base / "verl", [(path, path.read_bytes())])
    assert done.files == {**dict.fromkeys(CHANGED, "a = 1\nb = 3\n"), CREATED: "new = True\n"}
    # What verify's closing block says the patch touches: the same names, whole.
    assert sorted(patch_changes([path])[1]) == sorted([*CHANGED, CREATED])


def test_git_quoting_is_decoded_letter_by_letter():
    assert header_name('"a/verl/\\303\\251.py"\n', "d") == "a/verl/\u00e9.py"
    assert header_name('"b/verl/q\\"u\\\\o\\tt\\n.py"\t2026-01-01 00:00\n', "d") == 'b/verl/q"u\\o\tt\n.py'
    assert header_name("a/verl/my notes.py\t\n", "d") == "a/verl/my notes.py"  # git's tab after a spaced name
    assert header_name('"a/verl/caf\\351.py"', "d").encode("utf-8", "surrogateescape") == b"a/verl/caf\xe9.py"


@pytest.mark.parametrize("field", ['"a/verl/x.py', '"a/verl/\\q.py"', '"a/verl/\\77"'])
def test_a_malformed_quoted_name_is_one_line_naming_the_diff(field):
    with pytest.raises(UsageError, match=r"^fix\.diff: line 3: ") as caught:
        unquoted_name(field, "fix.diff: line 3")
    assert "\n" not in str(caught.value)
