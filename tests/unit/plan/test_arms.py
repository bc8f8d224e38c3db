"""Arms: resolving names, reading and applying unified diffs, and the materialised-copy cache."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.paths import PATCHES_DIR, ROOT
from harness.plan import arms
from harness.plan.arms import Arm
from harness.plan.diffs import applied, read_patch

QWEN3_VL = "verl/models/transformers/qwen3_vl.py"
NONE_DIFF = arms.PATCHES_DIR / "none.diff"


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setattr(arms, "CACHE_DIR", cache)
    return cache


@pytest.fixture
def fake_verl(tmp_path, monkeypatch):
    """A three-file stand-in for the installed verl, for cases the real package cannot show."""
    root = tmp_path / "site" / "verl"
    (root / "pkg").mkdir(parents=True)
    (root / "__pycache__").mkdir()
    (root / "__init__.py").write_text("")
    (root / "__pycache__" / "stale.pyc").write_bytes(b"\0")
    (root / "pkg" / "a.py").write_text("one\ntwo\nthree")  # no final newline
    (root / "pkg" / "b.py").write_text("bye\n")
    monkeypatch.setattr(arms, "installed_verl_dir", lambda: root)
    return root


def write_diff(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def apply(*patches):
    return arms.materialise(Arm("test", tuple(patches)))


def usage_error(*patches) -> str:
    with pytest.raises(UsageError) as exc:
        apply(*patches)
    message = str(exc.value)
    assert "\n" not in message
    return message


def reverse(diff_text):
    """The diff that undoes diff_text: headers swapped, hunk ranges swapped, '+' and '-' swapped."""
    start = diff_text.index("\n--- ") + 1
    lines, out = diff_text[start:].splitlines(keepends=True), []
    for i, line in enumerate(lines):
        if line.startswith("--- "):
            out.append("--- " + lines[i + 1][4:])
        elif line.startswith("+++ "):
            out.append("+++ " + lines[i - 1][4:])
        elif line.startswith("@@"):
            out.append(re.sub(r"^@@ -(\S+) \+(\S+) @@", r"@@ -\2 +\1 @@", line))
        else:
            out.append({"+": "-", "-": "+"}.get(line[:1], line[:1]) + line[1:])
    return "".join(out)


# ---------------------------------------------------------------------------------------------- names


def test_known_arms_include_upstream_and_none():
    known = arms.known_arms()
    assert known["upstream"] == Arm("upstream", ())
    assert known["none"].patches == (NONE_DIFF,)


def test_unknown_arm_lists_known_ones():
    with pytest.raises(UsageError) as exc:
        arms.resolve_arm("nope")
    assert "'nope'" in str(exc.value) and "upstream" in str(exc.value) and "none" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_arm_from_a_diff_path_is_named_after_its_stem(tmp_path):
    path = write_diff(tmp_path, "my-fix.diff", NONE_DIFF.read_text())
    assert arms.resolve_arm(str(path)) == Arm("my-fix", (path.resolve(),))
    assert arms.resolve_arm(str(NONE_DIFF)) == arms.known_arms()["none"]


def test_diff_path_may_not_reuse_a_known_arm_name(tmp_path):
    path = write_diff(tmp_path, "none.diff", NONE_DIFF.read_text())
    with pytest.raises(UsageError, match="already taken"):
        arms.resolve_arm(str(path))


def test_missing_patch_file(tmp_path):
    missing = tmp_path / "missing.diff"
    with pytest.raises(UsageError, match=r"missing\.diff: no such patch file"):
        arms.resolve_arm(str(missing))
    assert "missing.diff: no such patch file" in usage_error(missing)


def test_directory_is_not_a_patch_file(tmp_path):
    (tmp_path / "dir.diff").mkdir()
    with pytest.raises(UsageError, match="not a patch file"):
        arms.resolve_arm(str(tmp_path / "dir.diff"))


def test_installed_verl_is_found_without_importing_it():
    code = "import sys; from harness.plan import arms; print(arms.installed_verl_dir()); print('verl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    where, imported = out.stdout.split()
    assert (arms.Path(where) / "models" / "transformers" / "qwen3_vl.py").is_file()
    assert imported == "False"


# ---------------------------------------------------------------------------------------------- the real diff


def test_upstream_needs_no_copy():
    assert arms.materialise(arms.known_arms()["upstream"]) is None


def test_none_diff_removes_the_full_tensor_gather(tmp_cache):
    installed = (arms.installed_verl_dir().parent / QWEN3_VL).read_text()
    d = arms.materialise(arms.resolve_arm("none"))
    assert d.parent == tmp_cache and d.name.startswith("none-")
    patched = (d / QWEN3_VL).read_text()
    assert "full_tensor()" in installed
    assert "full_tensor()" not in patched
    assert "vocab_weights=self.lm_head.weight," in patched
    assert (d / "verl" / "__init__.py").is_file()


def test_materialise_is_cached_and_rebuilt_when_the_diff_changes(tmp_path, monkeypatch):
    path = write_diff(tmp_path, "x.diff", NONE_DIFF.read_text())
    first = apply(path)
    stamp = (first / "arm.json").stat().st_mtime_ns

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt a cached arm")

    with monkeypatch.context() as m:
        m.setattr(arms.shutil, "copytree", no_rebuild)
        assert apply(path) == first
    assert (first / "arm.json").stat().st_mtime_ns == stamp

    path.write_text("A changed description.\n" + NONE_DIFF.read_text())
    second = apply(path)
    assert second != first and second.is_dir() and first.is_dir()


def test_losing_the_rename_race_keeps_the_winners_copy(tmp_path, tmp_cache, monkeypatch):
    real_rename = os.rename

    def rival_finishes_first(src, dst):
        real_rename(src, dst)  # the rival's identical build lands first...
        os.chmod(dst, 0o755)  # (sealed read-only: opened for the mark that tells the rival's copy apart)
        (arms.Path(dst) / "rival").touch()
        raise OSError(39, "Directory not empty")  # ...so ours cannot

    monkeypatch.setattr(arms.os, "rename", rival_finishes_first)
    d = apply(NONE_DIFF)
    assert (d / "rival").exists() and (d / QWEN3_VL).is_file()
    assert [p.name for p in tmp_cache.iterdir()] == [d.name]  # no temporary directory left behind


def test_diff_then_its_reverse_restores_the_file_byte_for_byte(tmp_path):
    back = write_diff(tmp_path, "back.diff", reverse(NONE_DIFF.read_text()))
    d = apply(NONE_DIFF, back)
    assert (d / QWEN3_VL).read_bytes() == (arms.installed_verl_dir().parent / QWEN3_VL).read_bytes()


def patched_text(*patches) -> str:
    """The fused file as the arm's diffs leave it, without a copy of verl (materialise writes these texts)."""
    return applied(arms.installed_verl_dir(), [(p, read_patch(p)) for p in patches]).files[QWEN3_VL]


def test_description_before_the_first_header_is_ignored(tmp_path):
    text = NONE_DIFF.read_text()
    body = text[text.index("\n--- ") + 1 :]
    noisy = "+ not an added line\n- nor a removed one\n context? no\n\\ nothing\n" + body
    bare = patched_text(write_diff(tmp_path, "bare.diff", body))
    described = patched_text(write_diff(tmp_path, "noisy.diff", noisy))
    assert bare == described and "full_tensor()" not in bare


def test_hunks_whose_line_numbers_are_off_still_apply(tmp_path):
    text = NONE_DIFF.read_text()
    shifted = text.replace("@@ -19,7 +19,6 @@", "@@ -23,7 +23,6 @@").replace(
        "@@ -366,14 +365,10 @@", "@@ -360,14 +359,10 @@"
    )
    assert shifted != text
    assert patched_text(write_diff(tmp_path, "shifted.diff", shifted)) == patched_text(NONE_DIFF)


def test_context_mismatch_names_diff_file_and_hunk(tmp_path, tmp_cache):
    text = NONE_DIFF.read_text().replace(" import torch\n", " import torch as th\n")
    message = usage_error(write_diff(tmp_path, "stale.diff", text))
    assert "stale.diff" in message and QWEN3_VL in message
    assert "hunk #1 (@@ -19,7 +19,6 @@)" in message and "context was not found" in message
    assert not tmp_cache.exists()  # a failing arm leaves no cache entry


def test_applying_a_diff_twice_hints_that_it_is_already_applied():
    message = usage_error(NONE_DIFF, NONE_DIFF)
    assert "hunk #1" in message and "already" in message


def test_a_diff_whose_whole_change_is_there_says_so_and_one_with_a_hunk_there_does_not(tmp_path):
    from harness.plan.diffs import DoesNotApply

    with pytest.raises(DoesNotApply) as twice:
        arms.materialise(arms.Arm("twice", (NONE_DIFF, NONE_DIFF)))
    assert twice.value.already_there and twice.value.hunk.startswith("hunk #1 ")
    # Its first hunk applied by itself: the second application finds that hunk's result, and fails on the next.
    first = NONE_DIFF.read_text().split("\n@@ ", 2)
    one_hunk = write_diff(tmp_path, "first-hunk.diff", first[0] + "\n@@ " + first[1] + "\n")
    with pytest.raises(DoesNotApply) as partly:
        arms.materialise(arms.Arm("partly", (one_hunk, NONE_DIFF)))
    assert partly.value.hunk.startswith("hunk #1 ") and "already there" in partly.value.why
    assert not partly.value.already_there


def test_diff_for_a_file_verl_does_not_have(tmp_path):
    text = NONE_DIFF.read_text().replace("transformers/qwen3_vl.py", "transformers/qwen9_vl.py")
    message = usage_error(write_diff(tmp_path, "ghost.diff", text))
    assert "ghost.diff: verl/models/transformers/qwen9_vl.py: no such file in this verl" in message


def test_malformed_hunk_header_names_the_line(tmp_path):
    text = NONE_DIFF.read_text().replace("@@ -366,14 +365,10 @@", "@@ -366,14 +365 10 @@")
    line = text.splitlines().index("@@ -366,14 +365 10 @@") + 1
    message = usage_error(write_diff(tmp_path, "bad.diff", text))
    assert f"bad.diff: line {line}: malformed hunk header" in message


def test_hunk_without_file_headers(tmp_path):
    text = "\n".join(line for line in NONE_DIFF.read_text().splitlines() if not line.startswith(("--- ", "+++ ")))
    text += "\n"
    assert "line " in usage_error(write_diff(tmp_path, "headless.diff", text))


def test_description_only_diff_contains_no_changes(tmp_path):
    assert "contains no changes" in usage_error(write_diff(tmp_path, "empty.diff", "Just words.\n"))


def test_paths_outside_verl_are_refused(tmp_path):
    for bad in ("a/setup.py", "a/verl/../setup.py", "/etc/passwd"):
        text = f"--- {bad}\n+++ {bad}\n@@ -1 +1 @@\n-x\n+y\n"
        assert "not a path inside verl/" in usage_error(write_diff(tmp_path, "out.diff", text))


@pytest.mark.parametrize(
    "header, hint",
    [
        ("verl.orig/models/transformers/qwen3_vl.py", "did you mean 'verl/models/transformers/qwen3_vl.py'?"),
        ("/tmp/mine/verl/models/transformers/qwen3_vl.py", "did you mean 'verl/models/transformers/qwen3_vl.py'?"),
        ("a/setup.py", ""),
    ],
)
def test_a_wrong_path_prefix_names_the_accepted_forms(tmp_path, header, hint):
    text = f"--- {header}\n+++ {header}\n@@ -1 +1 @@\n-x\n+y\n"
    message = usage_error(write_diff(tmp_path, "prefix.diff", text))
    assert "accepted: 'verl/...', 'a/verl/...', 'b/verl/...'" in message
    assert (hint in message) if hint else "did you mean" not in message


def test_hunk_cut_short_is_reported(tmp_path):
    text = NONE_DIFF.read_text().rsplit("\n", 4)[0] + "\n"  # drop the last three lines of the last hunk
    message = usage_error(write_diff(tmp_path, "short.diff", text))
    assert "short.diff: line " in message and "hunk #2" in message and "cut short" in message


def test_fingerprint_records_each_diff():
    fingerprint = arms.arm_fingerprint(arms.known_arms()["none"])
    assert fingerprint.name == "none"
    assert [p.written() for p in fingerprint.patches] == [
        {
            "file": "patches/none.diff",
            "sha256": arms.hashlib.sha256(NONE_DIFF.read_bytes()).hexdigest(),
            "text": NONE_DIFF.read_text(),
        }
    ]
    assert arms.arm_fingerprint(arms.known_arms()["upstream"]).written() == {"name": "upstream", "patches": []}


# ---------------------------------------------------------------------------------------------- diff details


def test_create_modify_delete_and_missing_final_newlines(tmp_path, fake_verl):
    text = (
        "diff --git a/verl/pkg/a.py b/verl/pkg/a.py\n"
        "--- a/verl/pkg/a.py\t2024-01-01 00:00:00.000000000 +0000\n"
        "+++ b/verl/pkg/a.py\t2024-01-01 00:00:00.000000000 +0000\n"
        "@@ -1 +1 @@\n"  # counts omitted mean 1
        "-one\n"
        "+ONE\n"
        "@@ -3 +3,2 @@\n"
        "-three\n"
        "\\ No newline at end of file\n"
        "+three\n"
        "+four\n"
        "--- /dev/null\n"
        "+++ b/verl/pkg/new.py\n"
        "@@ -0,0 +1,2 @@\n"
        "+-- looks like a header\n"
        "+x\n"
        "\\ No newline at end of file\n"
        "--- a/verl/pkg/b.py\n"
        "+++ /dev/null\n"
        "@@ -1 +0,0 @@\n"
        "-bye\n"
    )
    d = apply(write_diff(tmp_path, "mixed.diff", text))
    assert (d / "verl/pkg/a.py").read_text() == "ONE\ntwo\nthree\nfour\n"
    assert (d / "verl/pkg/new.py").read_text() == "-- looks like a header\nx"
    assert not (d / "verl/pkg/b.py").exists()
    assert (fake_verl / "pkg/a.py").read_text() == "one\ntwo\nthree"  # the installed package is untouched
    assert (fake_verl / "pkg/b.py").exists()


def test_creating_a_file_that_exists_is_refused(tmp_path, fake_verl):
    text = "--- /dev/null\n+++ b/verl/pkg/a.py\n@@ -0,0 +1 @@\n+x\n"
    assert "already exists" in usage_error(write_diff(tmp_path, "dup.diff", text))


def test_hunk_with_more_lines_than_counted_is_refused(tmp_path, fake_verl):
    text = "--- a/verl/pkg/b.py\n+++ b/verl/pkg/b.py\n@@ -1 +1 @@\n-bye\n+hi\n+extra\n"
    # The extra line falls outside the hunk and is ignored, like patch(1) does with trailing text.
    assert (apply(write_diff(tmp_path, "long.diff", text)) / "verl/pkg/b.py").read_text() == "hi\n"
    text = "--- a/verl/pkg/b.py\n+++ b/verl/pkg/b.py\n@@ -1 +1 @@\n+hi\n+extra\n-bye\n"
    assert "more lines than its header counts" in usage_error(write_diff(tmp_path, "long2.diff", text))


def test_two_processes_materialising_the_same_arm_at_once_leave_one_good_copy(tmp_path):
    """Two harness commands started together on one checkout build the same arm at the same moment."""
    import uuid

    diff = tmp_path / "race.diff"
    # A description line of its own makes the cache key new, so both processes really build.
    diff.write_text(f"race {uuid.uuid4().hex}\n" + (PATCHES_DIR / "none.diff").read_text())
    code = (
        "import sys\nfrom harness.plan.arms import materialise, resolve_arm\n"
        f"print(materialise(resolve_arm({str(diff)!r})))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    dirs = {out.strip() for out, _ in outs}
    assert len(dirs) == 1, dirs
    built = Path(dirs.pop())
    again = arms.materialise(arms.resolve_arm(str(diff)))
    assert (built / QWEN3_VL).read_text() == again.joinpath(QWEN3_VL).read_text()
    leftovers = [p for p in built.parent.iterdir() if p.name.startswith(f".{built.name}.")]
    assert not leftovers, leftovers
    from harness.plan import tree_seal

    tree_seal.remove(built)  # read-only as sealed


def test_the_copy_keeps_valid_bytecode_and_a_patched_module_is_compiled_afresh(tmp_path, monkeypatch):
    """The copy carries the installed verl's __pycache__ (make venv compiles it): an unchanged module's .pyc stays
    valid in the copy, and a patched module runs its patched source, never the installed bytecode."""
    import importlib.util
    import py_compile

    root = tmp_path / "site" / "verl"
    root.mkdir(parents=True)
    for name, text in (("__init__.py", ""), ("mod.py", "X = 1\n"), ("same.py", "Y = 2\n")):
        (root / name).write_text(text)
        os.utime(root / name, (1_000_000_000, 1_000_000_000))  # installed long ago
        py_compile.compile(str(root / name), doraise=True)
    monkeypatch.setattr(arms, "installed_verl_dir", lambda: root)
    diff = "--- a/verl/mod.py\n+++ b/verl/mod.py\n@@ -1 +1 @@\n-X = 1\n+X = 3\n"
    d = apply(write_diff(tmp_path, "mod.diff", diff))

    def loaded(path):
        spec = importlib.util.spec_from_file_location(f"copy_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    same = d / "verl" / "same.py"
    pyc = Path(importlib.util.cache_from_source(str(same)))
    # A timestamp .pyc records its source's mtime and size (bytes 8-16); the copy kept both, so it is used as is.
    assert int.from_bytes(pyc.read_bytes()[8:12], "little") == int(same.stat().st_mtime)
    assert loaded(same).Y == 2
    assert loaded(d / "verl" / "mod.py").X == 3


def test_the_copy_leaves_out_bytecode_still_being_written(tmp_path, monkeypatch):
    """A process of the venv writes a module's bytecode as <name>.pyc.<number> and renames it into place: a copy
    made meanwhile takes the finished .pyc files and not the one in flight (which may be gone mid-copy)."""
    root = tmp_path / "site" / "verl"
    (root / "__pycache__").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "mod.py").write_text("X = 1\n")
    (root / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"finished")
    (root / "__pycache__" / "other.cpython-311.pyc.140213").write_bytes(b"half")
    monkeypatch.setattr(arms, "installed_verl_dir", lambda: root)
    diff = "--- a/verl/mod.py\n+++ b/verl/mod.py\n@@ -1 +1 @@\n-X = 1\n+X = 3\n"
    copied = apply(write_diff(tmp_path, "mod.diff", diff)) / "verl" / "__pycache__"
    # Sealing compiles every module of the copy (plan/tree_seal.py): no rank has bytecode left to write into it.
    assert sorted(p.name for p in copied.iterdir()) == ["__init__.cpython-311.pyc", "mod.cpython-311.pyc"]
