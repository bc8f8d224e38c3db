"""A cached tree sealed when built and checked before every reuse: an arm's copy of verl (plan/arms.py) and a verl
tree's environment (plan/verl_trees.py).

A pull request's code runs in cells that import from these trees, as the same user as the driver: what it appends
to a tree would run in every later cell on it (the base's, another PR's). So a tree, once built, gets a manifest of
every file in it (path -> sha256; a symlink: its target) and a digest of that manifest, MAC'd with the driver's key
(records/signing.py) together with the tree's name, in `.seal.json` inside the tree; then every file and directory
of it is made read-only (chmod a-w: a second layer, which a sandboxed cell cannot undo). Before a tree is reused its
files are hashed again and compared: any file changed, added or removed, or a seal that does not verify, and the
tree is set aside and built again, never used.

Every file is hashed, bytecode included (a .pyc is code Python runs instead of its source); the tree is compiled
when sealed, so that no process has to write bytecode into it later. Cost: an arm's copy of verl 0.9.1 is 785 files
(13 MB, 366 of them .py); hashing it all took 0.03 s on this project's 2-core host (tools/host_speed.py: loop
0.26 s, a page 2.4 us), 0.016 s of CPU since manifest walks with os.scandir (loop 0.19 s); sealing a new copy
(compiled first) 0.28 s.
"""

from __future__ import annotations

import compileall
import hashlib
import json
import os
import shutil
import stat
import sys
from pathlib import Path

from pydantic import BaseModel

from harness.records.signing import canonical, mac, verifies

SEAL_NAME = ".seal.json"


class _Seal(BaseModel):
    """A seal as read back (seal writes it): the tree's name and MAC may be missing from one not made here."""

    files: dict[str, str]
    digest: str
    tree: str | None = None
    mac: str | None = None


NO_SEAL = "it has no seal (built before trees were sealed, or its seal was removed)"
_FORMAT = "tree-seal-1"
_READ_ONLY = ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)


def manifest(tree: Path) -> dict[str, str]:
    """relative path -> sha256 of each regular file of the tree ("link:" + target for a symlink, never followed),
    the seal itself left out.

    Every patched cell reads it three times (its arm's copy checked when materialised, before the launch and after:
    changed_under_run), about three quarters of the driver's own CPU time for the cell (cProfile). Walked with
    os.scandir and plain strings: each entry's type comes with the directory listing, no stat of its own, and no
    Path built per file (the module docstring's figures; what is left is the hashing)."""
    files: dict[str, str] = {}

    def walk(directory: str, prefix: str):
        try:
            listing = os.scandir(directory)
        except OSError:  # a directory that cannot be listed is left out, as os.walk leaves it: its files "removed"
            return
        with listing as entries:
            for entry in entries:
                rel = prefix + entry.name
                if entry.is_symlink():  # a symlinked directory (a venv's lib64) is a link, not walked
                    files[rel] = "link:" + os.readlink(entry.path)
                elif entry.is_dir():
                    walk(entry.path, rel + "/")
                elif rel != SEAL_NAME:
                    files[rel] = _sha256(entry.path)

    walk(os.fspath(tree), "")
    return files


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest(files: dict[str, str]) -> str:
    return hashlib.sha256(canonical({"format": _FORMAT, "files": files})).hexdigest()


def _message(name: str, digest: str) -> bytes:
    # The tree's name is part of what is MAC'd: a seal copied from another tree does not verify here.
    return canonical({"format": _FORMAT, "tree": name, "digest": digest})


def seal(tree: Path, name: str, python_files: Path | None = None) -> None:
    """Compile the tree's Python files (python_files: the folder holding them, default the tree), write its seal
    (named `name`, the name it will have in the cache) and make it read-only. Called on a complete build before it
    is renamed into place."""
    compileall.compile_dir(str(python_files or tree), quiet=2, workers=1)
    files = manifest(tree)
    digest = _digest(files)
    record = {"format": _FORMAT, "tree": name, "files": files, "digest": digest, "mac": mac(_message(name, digest))}
    (tree / SEAL_NAME).write_text(json.dumps(record, sort_keys=True, indent=0) + "\n")
    make_read_only(tree)


def make_read_only(tree: Path) -> None:
    """chmod a-w on every file and directory of the tree (symlinks left alone: chmod would follow them)."""
    for directory, dirnames, filenames in os.walk(tree, topdown=False):
        for name in [*filenames, *dirnames]:
            path = Path(directory) / name
            if not path.is_symlink():
                path.chmod(stat.S_IMODE(path.lstat().st_mode) & _READ_ONLY)
    tree.chmod(stat.S_IMODE(tree.stat().st_mode) & _READ_ONLY)


def modified(tree: Path, name: str) -> str | None:
    """None where the tree is as it was sealed; otherwise why not (no seal, a seal that does not verify, the first
    files that differ)."""
    try:
        record = _Seal.model_validate_json((tree / SEAL_NAME).read_text())
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return NO_SEAL
    files, digest = record.files, record.digest
    if record.tree != name or not verifies(_message(name, digest), record.mac):
        return "its seal was not made by this harness for it"
    if _digest(files) != digest:
        return "its seal's manifest was edited"
    now = manifest(tree)
    if now == files:
        return None
    changed = sorted(p for p in now.keys() & files.keys() if now[p] != files[p])
    added, removed = sorted(now.keys() - files.keys()), sorted(files.keys() - now.keys())
    parts = [
        f"{words} {', '.join(paths[:3])}{' ...' if len(paths) > 3 else ''}"
        for words, paths in (("changed", changed), ("added", added), ("removed", removed))
        if paths
    ]
    return "; ".join(parts)


def set_aside(tree: Path) -> None:
    """Remove a tree that is not as it was built: renamed out of the cache first (a command starting now finds no
    tree there, and builds its own), then deleted, its directories made writable again so that it can be."""
    aside = tree.with_name(f".{tree.name}.modified.{os.getpid()}")
    try:
        os.rename(tree, aside)
    except FileNotFoundError:
        return  # another command set it aside first
    remove(aside)


def remove(tree: Path) -> None:
    """Delete a (read-only) tree."""
    make_writable(tree, files=False)
    shutil.rmtree(tree, ignore_errors=True)


def make_writable(tree: Path, files: bool = True) -> None:
    """u+w on the tree's directories (and files): a copy of a sealed tree (an arm made from a verl tree's
    environment: copytree keeps the modes) is filled before it is sealed in its turn."""
    for directory, dirnames, filenames in os.walk(tree):
        names = [*dirnames, *(filenames if files else ())]
        for path in [Path(directory), *(Path(directory) / name for name in names)]:
            if not path.is_symlink():
                path.chmod(stat.S_IMODE(path.lstat().st_mode) | stat.S_IWUSR)


def rebuilt_line(tree: Path, why: str) -> str:
    if why == NO_SEAL:  # a tree of an older harness, not necessarily touched: said as what it is
        return f"cached tree {tree.name}: {why}: rebuilt"
    return f"cached tree {tree.name} was modified since it was built ({why}): rebuilt"


def say_rebuilt(tree: Path, why: str) -> None:
    print(rebuilt_line(tree, why), file=sys.stderr, flush=True)


def watched(trees: list[Path | None]) -> list[tuple[Path, bool]]:
    """The cached trees a cell is about to run on, each with whether it is sealed now (what changed_under_run
    compares with after the cell)."""
    return [(tree, (tree / SEAL_NAME).is_file()) for tree in trees if tree is not None]


def changed_under_run(trees: list[tuple[Path, bool]]) -> str | None:
    """Why a cell's outcome says nothing of the code it ran (its cached tree was deleted, or a sealed one modified,
    while it ran: `rm -rf .cache` mid-run, say), or None. The command then stops as the harness's own failure
    (errors.py HarnessFailure, exit 3), never as a finding."""
    for tree, sealed in trees:
        if not tree.is_dir():
            return f"cached tree {tree.name} was removed while the command ran"
        why = modified(tree, tree.name) if sealed else None
        if why is not None:
            return f"cached tree {tree.name} was changed while the command ran ({why})"
    return None
