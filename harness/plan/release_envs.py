"""One isolated environment per verl release, for `harness releases`: its own constraints file under constraints/
(uv pip compile of requirements.txt with verl pinned to the release, plus the plan's shared pins: the tooling of the
main constraints.txt), and a venv under .cache/releases/ built from it with uv and reused until either file changes.

uv hard-links packages from its cache, so a release's environment costs little disk beyond the first one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.errors import UsageError
from harness.paths import CACHE_DIR, CONSTRAINTS_DIR, ROOT
from harness.processes.bytecode import seed_bytecode

ENVS_DIR = CACHE_DIR / "releases"
REQUIREMENTS = ROOT / "requirements.txt"
# Where this machine keeps the CPU build of torch (the Makefile's WHEELS); used when it exists.
LOCAL_WHEELS = Path(os.environ.get("HARNESS_WHEELS", "/opt/wheels"))


def constraints_file(version: str) -> Path:
    return CONSTRAINTS_DIR / f"verl-{version}.txt"


def _uv() -> list[str]:
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    if shutil.which("uv"):
        return [shutil.which("uv")]
    raise UsageError("uv is needed to build the release environments: `make venv` installs it (requirements.txt)")


def _find_links() -> list[str]:
    return ["--find-links", str(LOCAL_WHEELS)] if LOCAL_WHEELS.is_dir() else []


def _call(cmd: list, what: str, log: Path):
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(map(str, cmd))}\n".encode())
        out.flush()
        done = subprocess.run(
            [str(c) for c in cmd], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise UsageError(f"{what} failed (exit {done.returncode}): {tail[0][:300]} (log: {log})")


def compile_constraints(version: str, pins: tuple[str, ...], log: Path) -> Path:
    """constraints/verl-<version>.txt: requirements.txt resolved with verl==version and the shared pins."""
    target = constraints_file(version)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as overrides:
        overrides.write("\n".join([f"verl=={version}", *pins]) + "\n")
    try:
        _call(
            [
                *_uv(),
                "pip",
                "compile",
                REQUIREMENTS,
                "--quiet",
                "--python-version",
                "3.11",
                "--no-header",
                "--no-annotate",
                "--override",
                overrides.name,
                "-o",
                target,
                *_find_links(),
            ],
            f"resolving verl {version}'s environment",
            log,
        )
    finally:
        os.unlink(overrides.name)
    body = target.read_text()
    target.write_text(
        f"# verl {version} for `make releases`: requirements.txt resolved by uv pip compile with "
        f"verl=={version} {' '.join(pins)}\n# (scenarios/releases.yaml). Regenerate: "
        f"python -m harness releases --release {version} --compile\n" + body
    )
    return target


def ensure_env(version: str, pins: tuple[str, ...], *, recompile: bool = False) -> Path:
    """The python of verl <version>'s environment, built (or rebuilt after a constraints change) as needed."""
    env = ENVS_DIR / f"verl-{version}"
    log = ENVS_DIR / f"verl-{version}.log"
    constraints = constraints_file(version)
    if recompile or not constraints.is_file():
        compile_constraints(version, pins, log)
    key = hashlib.sha256(REQUIREMENTS.read_bytes() + b"\0" + constraints.read_bytes()).hexdigest()[:16]
    python, stamp = env / "bin" / "python", env / f".installed-{key}"
    if stamp.is_file() and python.exists():
        return python
    for old in env.glob(".installed-*"):
        old.unlink()
    _call(
        [*_uv(), "venv", "--quiet", "--allow-existing", "--python", sys.executable, env],
        f"creating verl {version}'s environment",
        log,
    )
    _call(
        [
            *_uv(),
            "pip",
            "install",
            "--quiet",  # no --compile-bytecode: see harness/processes/bytecode.py
            "--python",
            python,
            "-r",
            REQUIREMENTS,
            "-c",
            constraints,
            *_find_links(),
        ],
        f"installing verl {version}'s environment",
        log,
    )
    try:
        seed_bytecode(env)
    except OSError:
        pass  # a speed-up only: without it the release's processes compile what they import, as they always could
    stamp.touch()
    return python


def installed_verl(python: Path) -> Path:
    """The verl package directory of an environment, found without importing verl."""
    done = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('verl').submodule_search_locations[0])"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise UsageError(f"{python}: verl is not installed there: {done.stderr.strip()[-200:]}")
    return Path(done.stdout.strip())
