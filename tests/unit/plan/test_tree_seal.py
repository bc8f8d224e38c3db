"""plan/tree_seal.py: a cached tree (an arm's copy, a verl tree's environment) is sealed when built (a manifest of
every file's sha256, MAC'd with the driver's key, and chmod a-w) and reused only while every file is as sealed; a tree
a cell's code modified is set aside and built again, never used (issue 71: the base's cached tree poisoned)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from harness.plan import arms, tree_seal, verl_trees
from harness.plan.arms import Arm
from harness.records.results import VerlTree

pytestmark = pytest.mark.unit


def _writable(path: Path) -> None:
    # The tree is read-only as sealed; an attacker with the same uid (or root, as on this project's host) undoes it.
    path.chmod(stat.S_IMODE(path.lstat().st_mode) | stat.S_IWUSR)


def _edit(path: Path, data: bytes) -> None:
    """Rewrite a file of a sealed tree as an attacker would: same size, its mtime put back (a stat check sees
    nothing)."""
    before = path.stat()
    _writable(path.parent)
    _writable(path)
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.fixture
def sealed(tmp_path):
    tree = tmp_path / "arm-1"
    (tree / "verl" / "pkg").mkdir(parents=True)
    (tree / "verl" / "__init__.py").write_text("X = 1\n")
    (tree / "verl" / "pkg" / "a.py").write_text("def f():\n    return 2\n")
    (tree / "verl" / "lib64").symlink_to("pkg")
    tree_seal.seal(tree, tree.name, tree / "verl")
    return tree


def test_a_sealed_tree_is_compiled_read_only_and_as_built(sealed):
    assert tree_seal.modified(sealed, sealed.name) is None
    assert (sealed / "verl" / "pkg" / "__pycache__").is_dir()  # compiled: no rank writes bytecode into it later
    for path in [sealed, *sealed.rglob("*")]:
        if not path.is_symlink():
            assert not stat.S_IMODE(path.stat().st_mode) & 0o222, path
    files = json.loads((sealed / tree_seal.SEAL_NAME).read_text())["files"]
    assert files["verl/lib64"] == "link:pkg" and any(p.endswith(".pyc") for p in files)


@pytest.mark.parametrize(
    "attack, words",
    [
        (lambda t: _edit(t / "verl" / "__init__.py", b"X = 2\n"), "changed verl/__init__.py"),
        (lambda t: _edit(next((t / "verl" / "__pycache__").iterdir()), b"\0" * 16), "changed verl/__pycache__/"),
        (lambda t: (_writable(t / "verl" / "pkg"), (t / "verl" / "pkg" / "evil.py").write_text("")), "added"),
        (lambda t: (_writable(t / "verl" / "pkg"), (t / "verl" / "pkg" / "a.py").unlink()), "removed"),
    ],
)
def test_any_file_changed_added_or_removed_is_found(sealed, attack, words):
    attack(sealed)
    why = tree_seal.modified(sealed, sealed.name)
    assert why is not None and words in why


def test_a_seal_rewritten_or_taken_from_another_tree_does_not_verify(sealed, tmp_path):
    seal_file = sealed / tree_seal.SEAL_NAME
    record = json.loads(seal_file.read_text())
    assert "not made by this harness for it" in tree_seal.modified(sealed, "arm-2")  # another tree's name
    _edit(sealed / "verl" / "__init__.py", b"X = 2\n")
    record["files"]["verl/__init__.py"] = tree_seal.manifest(sealed)["verl/__init__.py"]
    _edit(seal_file, json.dumps(record).encode())  # the manifest made to match, without the key
    assert tree_seal.modified(sealed, sealed.name) == "its seal's manifest was edited"
    record["digest"] = tree_seal._digest(record["files"])
    _edit(seal_file, json.dumps(record).encode())
    assert tree_seal.modified(sealed, sealed.name) == "its seal was not made by this harness for it"
    _writable(sealed)
    seal_file.unlink()
    assert tree_seal.modified(sealed, sealed.name) == tree_seal.NO_SEAL
    assert tree_seal.rebuilt_line(sealed, tree_seal.NO_SEAL) == f"cached tree arm-1: {tree_seal.NO_SEAL}: rebuilt"


def test_a_modified_arm_copy_is_rebuilt_never_used(tmp_path, monkeypatch, capsys):
    root = tmp_path / "site" / "verl"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "mod.py").write_text("X = 1\n")
    monkeypatch.setattr(arms, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(arms, "installed_verl_dir", lambda: root)
    diff = tmp_path / "mod.diff"
    diff.write_text("--- a/verl/mod.py\n+++ b/verl/mod.py\n@@ -1 +1 @@\n-X = 1\n+X = 3\n")
    arm = Arm("mod", (diff,))
    built = arms.materialise(arm)
    assert arms.materialise(arm) == built and capsys.readouterr().err == ""  # reused as is
    _edit(built / "verl" / "__init__.py", b"import os\n")  # the payload a PR's cell appends to the base's tree
    assert arms.materialise(arm) == built
    assert (built / "verl" / "__init__.py").read_text() == ""
    assert f"cached tree {built.name} was modified since it was built (changed verl/__init__.py): rebuilt" in (
        capsys.readouterr().err
    )
    assert not [p for p in built.parent.iterdir() if p.name.startswith(".")]  # the modified one is gone


def test_a_modified_verl_tree_environment_is_rebuilt_never_used(tmp_path, monkeypatch, capsys):
    """.complete was trusted forever: now the environment's files (its .pth, the tree's verl) are checked too."""
    monkeypatch.setattr(verl_trees, "TREES_DIR", tmp_path / "trees")
    tree = VerlTree(path=str(tmp_path), version="0.0.1", key="0.0.1-tree-abc")
    files = {"verl/__init__.py": b"X = 1\n", "verl/version/version": b"0.0.1\n"}
    python = verl_trees.ensure_env(tree, files)
    env = python.parent.parent
    assert tree_seal.modified(env, env.name) is None and verl_trees.ensure_env(tree, files) == python
    pth = verl_trees._site_packages(env) / "fsdp2_harness_venv.pth"
    _edit(pth, pth.read_bytes().replace(b"import site", b"import evil"))
    assert verl_trees.ensure_env(tree, files) == python
    assert b"import site" in pth.read_bytes()
    assert "cached tree 0.0.1-tree-abc was modified since it was built" in capsys.readouterr().err
