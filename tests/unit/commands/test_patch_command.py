"""`python -m harness patch start DIR` / `patch diff DIR` as a user runs them: a copy of the installed verl to edit,
and the diff of the edits that verify reads. Torch-free: nothing is launched. Through harness.cli.main in this
process (`cli_in_process`), but on a verl tree (--verl), which runs the command again in the tree's environment."""

from __future__ import annotations

from harness.paths import PATCHES_DIR
from harness.plan.arms import installed_verl_dir
from harness.plan.diffs import ENCODING, applied, patched_files

CANDIDATE = PATCHES_DIR / "fsdp2-lmhead-forward.diff"


def test_start_edit_diff_gives_a_patch_that_applies_as_the_edits(tmp_path, cli_in_process):
    mine = tmp_path / "mine"
    done = cli_in_process("patch", "start", mine)
    assert done.returncode == 0, done.stderr
    assert (mine / "verl/models/transformers/qwen3_vl.py").is_file()
    assert not list((mine / "verl").rglob("__pycache__"))
    # The user's edits: the candidate fix's files, and a file of their own.
    verl = installed_verl_dir()
    edits = patched_files(verl, [(CANDIDATE, CANDIDATE.read_bytes())])
    for rel, text in edits.items():
        (mine / rel).write_bytes(text.encode(*ENCODING))
    (mine / "verl/utils/mine.py").write_text("ANSWER = 42\n")
    diff = cli_in_process("patch", "diff", mine)
    assert diff.returncode == 0, diff.stderr
    assert "--- a/verl/models/transformers/qwen3_vl.py\n+++ b/verl/models/transformers/qwen3_vl.py\n" in diff.stdout
    assert "--- /dev/null\n+++ b/verl/utils/mine.py\n" in diff.stdout
    fix = tmp_path / "fix.diff"
    fix.write_text(diff.stdout)
    applied = patched_files(verl, [(fix, fix.read_bytes())])
    assert applied == {**edits, "verl/utils/mine.py": "ANSWER = 42\n"}


def test_start_refuses_a_directory_that_exists(tmp_path, cli_in_process):
    (tmp_path / "taken").mkdir()
    line = cli_in_process.usage_error("patch", "start", tmp_path / "taken")
    assert "taken: exists" in line


def test_diff_refuses_a_directory_that_is_no_such_copy(tmp_path, cli_in_process):
    (tmp_path / "other" / "verl").mkdir(parents=True)
    line = cli_in_process.usage_error("patch", "diff", tmp_path / "other")
    assert "other: not a copy made by `python -m harness patch start" in line


def test_diff_of_an_unedited_copy_says_so(tmp_path, cli_in_process):
    assert cli_in_process("patch", "start", tmp_path / "clean").returncode == 0
    line = cli_in_process.usage_error("patch", "diff", tmp_path / "clean")
    assert "no file differs from the installed verl" in line


def test_a_patch_made_on_a_tree_says_so_and_merges_onto_another_verl(tmp_path, harness_cli):
    """`patch start --verl PATH@REF`: a copy of that tree's verl; `patch diff` writes `Written against: PATH@COMMIT`
    above the diff, and on the installed verl (where its context is not) it is merged with that commit's files."""
    from verl_tree import make_verl_repo  # tests/verl_tree.py

    repo = make_verl_repo(tmp_path)
    mine = tmp_path / "mine"
    done = harness_cli("patch", "start", "--verl", f"{repo.path}@fsdp2-lmhead-forward", mine)
    assert done.returncode == 0, done.stderr
    assert f"a copy of verl 0.9.1 from {repo.path}@{repo.fix}" in done.stdout
    qwen3_vl = mine / "verl/models/transformers/qwen3_vl.py"
    assert "register_fsdp_forward_method" in qwen3_vl.read_text()  # the tree's file, not the installed one
    # Edited beside a line only the tree has (the candidate's `import types`).
    qwen3_vl.write_text(
        qwen3_vl.read_text().replace("import os\nimport types\n", "import os  # edited\nimport types\n")
    )
    diff = harness_cli("patch", "diff", mine)
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.startswith(f"A patch of verl 0.9.1 from {repo.path}@{repo.fix}.\n")
    assert f"\nWritten against: {repo.path}@{repo.fix}\n" in diff.stdout
    fix = tmp_path / "edited.diff"
    fix.write_text(diff.stdout)
    done = applied(installed_verl_dir(), [(fix, fix.read_bytes())])
    assert done.merges[str(fix)].against == f"verl 0.9.1 at {repo.path}@{repo.fix[:12]}"
    installed = (installed_verl_dir() / "models/transformers/qwen3_vl.py").read_text()
    assert done.files["verl/models/transformers/qwen3_vl.py"] == installed.replace(
        "import os\n", "import os  # edited\n"
    )
