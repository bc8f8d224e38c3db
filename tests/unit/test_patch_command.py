"""`python -m harness patch start DIR` / `patch diff DIR` as a user runs them: a copy of the installed verl to edit,
and the diff of the edits that verify reads. Torch-free: nothing is launched."""

from __future__ import annotations

from harness.paths import PATCHES_DIR
from harness.plan.arms import installed_verl_dir
from harness.plan.diffs import ENCODING, patched_files

CANDIDATE = PATCHES_DIR / "fsdp2-lmhead-forward.diff"


def test_start_edit_diff_gives_a_patch_that_applies_as_the_edits(tmp_path, harness_cli):
    mine = tmp_path / "mine"
    done = harness_cli("patch", "start", mine)
    assert done.returncode == 0, done.stderr
    assert (mine / "verl/models/transformers/qwen3_vl.py").is_file()
    assert not list((mine / "verl").rglob("__pycache__"))
    # The user's edits: the candidate fix's files, and a file of their own.
    verl = installed_verl_dir()
    edits = patched_files(verl, [(CANDIDATE, CANDIDATE.read_bytes())])
    for rel, text in edits.items():
        (mine / rel).write_bytes(text.encode(*ENCODING))
    (mine / "verl/utils/mine.py").write_text("ANSWER = 42\n")
    diff = harness_cli("patch", "diff", mine)
    assert diff.returncode == 0, diff.stderr
    assert "--- a/verl/models/transformers/qwen3_vl.py\n+++ b/verl/models/transformers/qwen3_vl.py\n" in diff.stdout
    assert "--- /dev/null\n+++ b/verl/utils/mine.py\n" in diff.stdout
    fix = tmp_path / "fix.diff"
    fix.write_text(diff.stdout)
    applied = patched_files(verl, [(fix, fix.read_bytes())])
    assert applied == {**edits, "verl/utils/mine.py": "ANSWER = 42\n"}


def test_start_refuses_a_directory_that_exists(tmp_path, harness_cli):
    (tmp_path / "taken").mkdir()
    line = harness_cli.usage_error("patch", "start", tmp_path / "taken")
    assert "taken: exists" in line


def test_diff_refuses_a_directory_that_is_no_such_copy(tmp_path, harness_cli):
    (tmp_path / "other" / "verl").mkdir(parents=True)
    line = harness_cli.usage_error("patch", "diff", tmp_path / "other")
    assert "other: not a copy made by `python -m harness patch start" in line


def test_diff_of_an_unedited_copy_says_so(tmp_path, harness_cli):
    assert harness_cli("patch", "start", tmp_path / "clean").returncode == 0
    line = harness_cli.usage_error("patch", "diff", tmp_path / "clean")
    assert "no file differs from the installed verl" in line
