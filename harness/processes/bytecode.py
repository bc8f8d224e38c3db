"""Bytecode, where PYTHONDONTWRITEBYTECODE is set (CI's and this project's hosts): without it every fresh interpreter
compiled torch's, transformers' and verl's sources again (67 s of a 140 s engine rank on a loaded host).

The main venv's processes write their own (a .pth file make venv writes, see the Makefile), and make venv compiles
what a run imports first of all by importing it (`python -m harness.processes.bytecode`, compile_by_importing). A
release environment (plan/release_envs.py) has its processes write what they compile to the environment's own
.pycache (run_environment), seeded with the main interpreter's bytecode for every file the two share
(seed_bytecode).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def run_environment(python: Path) -> dict[str, str]:
    """This process's environment for a process of a release's python: the bytecode it compiles is written to the
    environment's own directory (PYTHONPYCACHEPREFIX, even where PYTHONDONTWRITEBYTECODE is set), so only a release's
    first run compiles what it imports, and only what seed_bytecode did not find compiled already. Building with
    --compile-bytecode, as `make venv` does, compiled all of torch for a run that imports a part of it: 46 s build +
    17 s run, against 5.5 s + 34 s for a first run without any .pyc (verl 0.8.0, direct-1gpu, this project's 2-core
    host)."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(python.parent.parent / ".pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def seed_bytecode(env: Path) -> int:
    """Give a release's environment the bytecode this interpreter already has for the source files the two share,
    where the release's processes look for it (PYTHONPYCACHEPREFIX, see run_environment): the standard library, and
    every package file uv hard-linked into both environments from its cache (the same file, so the same .pyc; a
    file of another version is another file, compiled on first use as before). Linked, not copied. A first run of
    verl 0.8.0 x direct-1gpu: 35 s without, 12 s with (seeding: 1.5 s). Returns how many .pyc files it placed."""
    import sysconfig

    tag = f".{sys.implementation.cache_tag}.pyc"
    stdlib, purelib = sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]
    theirs_site = str(env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages")
    prefix = str(env / ".pycache")
    placed = 0
    # (our tree, the same tree as the release's processes see it, top-level directories not to enter: the base
    # interpreter's own packages and the standard library's tests)
    for ours, theirs, skip in ((stdlib, stdlib, {"site-packages", "test"}), (purelib, theirs_site, set())):
        for directory, subdirs, _ in os.walk(ours):
            if directory == ours:
                subdirs[:] = [d for d in subdirs if d not in skip]
            if os.path.basename(directory) != "__pycache__":
                continue
            source_dir = os.path.dirname(directory)
            their_dir = theirs + source_dir[len(ours) :]
            target_dir = os.path.join(prefix, their_dir.lstrip(os.sep))
            made = False
            for pyc in os.listdir(directory):
                if not pyc.endswith(tag):
                    continue
                source = pyc[: -len(tag)] + ".py"
                try:
                    if not os.path.samefile(os.path.join(source_dir, source), os.path.join(their_dir, source)):
                        continue
                except OSError:  # no such source on one side
                    continue
                if not made:
                    os.makedirs(target_dir, exist_ok=True)
                    made = True
                try:
                    os.link(os.path.join(directory, pyc), os.path.join(target_dir, pyc))
                except FileExistsError:
                    continue
                except OSError:  # another file system
                    shutil.copy2(os.path.join(directory, pyc), os.path.join(target_dir, pyc))
                placed += 1
    return placed


# What an engine rank imports of verl (harness/rank/verl_side/): imported here for the modules of other packages they
# import beyond the server's preload (verl's own files are all compiled below, whether imported or not).
VERL_MODULES = (
    "verl.workers.engine_workers",
    "verl.workers.engine.fsdp.transformer_impl",
    "verl.models.transformers.monkey_patch",
    "verl.workers.utils.losses",
    "verl.workers.utils.padding",
    "verl.utils.fsdp_utils",
)


def compile_by_importing() -> str:
    """Import what the server preloads (server.PRELOAD, the rank's modules) and verl's engine, writing their
    bytecode: make venv's last step. Compiling the whole venv instead (uv's --compile-bytecode) took 49-56 s for
    18k files, of which a run imports about a third (89 of 250 MB of source); without either, the first run's
    processes compiled them, each its own copy at once where two started together (make test's workers). The part
    that needs no torch is compiled at the same time by a second process (compile_without_torch), on the host's
    other core.

    Where a command would keep its parent up for the next one (client.keep_s: not in CI), the preload is the
    parent's own: the parent the first command would start is started here (its imports write the bytecode) and
    left up, so that command forks its first cell at once instead of importing the same modules again (12-14 s on
    a slow host). verl's engine is then not imported here (the parent must never import verl): its own files are
    compiled below, the dozen other modules it imports by the first rank that does. What it did, in a line."""
    import importlib
    import importlib.util
    import subprocess

    from harness.paths import ROOT

    sys.dont_write_bytecode = False  # as the venv's .pth does; also when run by an interpreter without it
    _make_top_level_pycache()
    helper = subprocess.Popen(
        [sys.executable, "-m", "harness.processes.bytecode", WITHOUT_TORCH],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    left_up = _parent_left_up()
    if left_up is None:
        from harness.processes import server

        server.preload()
        for name in VERL_MODULES:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a verl without it: its ranks compile what they import
                pass
        done = f"{len(sys.modules)} modules imported, their bytecode written"
    else:
        done = f"written by the preload of the parent left up for the next command ({left_up}; make stop ends it)"
    # All of the installed verl (366 files, ~1 s): an arm's copy is copied from it (plan/arms.py) while other
    # processes may run, and a module of it first compiled by one of them would be written there mid-copy.
    spec = importlib.util.find_spec("verl")
    if spec is not None and spec.origin:
        import compileall

        compileall.compile_dir(os.path.dirname(spec.origin), quiet=1)
    try:
        helper.wait(timeout=300)
    except subprocess.TimeoutExpired:  # what it has not compiled, a first import compiles
        helper.kill()
        helper.wait()
    return done


def _parent_left_up() -> str | None:
    """The parent a command's first launch would start (client.parent_for of rank_environment(None)), started and
    ready, where one is kept up after its starter (KEEP as a command sets it where unset, client.keep_default), or the
    one an earlier command left up for the same code and packages (its preload wrote the same bytecode): which, in
    words.
    None where none is kept, preloading is off, or it refused (this process imports, then)."""
    from harness.processes import client
    from harness.rank.environment import rank_environment

    os.environ.setdefault(client.KEEP, client.keep_default())
    try:
        if not client.enabled() or not client.keep_s():
            return None
    except ValueError:
        return None
    parent = client.parent_for(rank_environment(None))
    if parent is None or parent.refused is not None or not parent.keep_s:
        return None
    if isinstance(parent, client.Parent):
        return f"pid {parent.pid}, up until {parent.keep_s:.0f} s idle"
    return f"pid {parent.pid}, which an earlier command left up"


def _make_top_level_pycache():
    """site-packages' own __pycache__ (where typing_extensions.py's and six.py's bytecode go) made before any import
    here: making it later changes site-packages' mtime, which is part of a kept parent's code stamp
    (client.code_stamp), and the parent left up would not be the next command's."""
    from harness.processes import client

    for entry in client.package_dirs():
        try:
            os.makedirs(os.path.join(entry, "__pycache__"), exist_ok=True)
        except OSError:
            pass


WITHOUT_TORCH = "--without-torch"


class _NoTorch:
    """A finder first on sys.meta_path that has every import of torch fail, as on a host without it."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"{name}: left to the other process (bytecode.py)", name=name)
        return None


def compile_without_torch():
    """Import the modules of server.PRELOAD that import without torch, writing their bytecode, while
    compile_by_importing's own process imports torch and what needs it: about 40% of what a run imports (sympy,
    pandas, pyarrow, datasets, ray, pydantic, fastapi and what they import) is compiled on a second core. Every
    import of torch fails here, so a module that needs it is left, at once, to the other process. sympy first:
    torch imports it early, and this process, with nothing to import before it, stays ahead of the other through it
    (the other then finds its files compiled). Then PRELOAD last to first, as the other goes first to last, so the
    two meet in the middle rather than compile the same files at the same time (where they do, each writes its
    file atomically, and either copy is the same bytecode). The import step on a fresh clone's venv, alternating
    with the one-process step: 20.0/22.5 s against 29.6/25.1 s (user time 24.6/26.9 s against 23.4/19.9 s)."""
    import importlib

    from harness.processes import server

    sys.dont_write_bytecode = False
    sys.meta_path.insert(0, _NoTorch())
    for name in ("sympy", *reversed(server.PRELOAD)):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - it needs torch (or is absent): the other process imports it
            pass


if __name__ == "__main__":
    if sys.argv[1:] == [WITHOUT_TORCH]:
        compile_without_torch()
    else:
        print(f"bytecode: {compile_by_importing()}")
