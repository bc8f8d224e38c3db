"""The OS sandbox a cell runs in when its code is not the installed verl (a patch, a pull request, a verl tree):
what it is allowed (Policy, written as JSON into the cell's run directory), whether it can be made on this host
(available), and the environment it gets (allowed_environment). confine.py enters it; sandbox_exec.py (a fresh
torchrun) and cell_parent.py (a preloaded parent's fork) are the two ways a cell starts in it. docs/SANDBOX.md says
what it blocks and what it cannot.

Standard library only: the driver imports it without torch (tests/unit/test_layout.py).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

from harness.paths import ROOT
from harness.rank.environment import SANDBOXED

POLICY_FILE = "sandbox.json"
# What the checkout holds that a rank reads: its code and the model configurations. Not .git, .cache (other cells,
# the arms' and trees' copies other than this cell's), results/ (the records reuse trusts), patches/, tests/.
CHECKOUT_PARTS = ("harness", "models", "scenarios")
# The host's system directories a Python process (and torch's libraries) read, where they exist.
SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/sys", "/dev")
TMPFS = ("/tmp", "/dev/shm")

# The environment a cell gets: these names and prefixes of the driver's, no other (a GITHUB_TOKEN, an
# AWS_SECRET_ACCESS_KEY, RUNNER_TEMP, the preloaded parent's socket never reach it). Then, whatever the prefix,
# nothing whose name says it is a secret.
ENV_NAMES = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "OMP_NUM_THREADS", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
             "CUDA_DEVICE_ORDER", "HARNESS_COMPILE_CACHE", "HARNESS_PRELOAD")  # fmt: skip
ENV_PREFIXES = ("LC_", "PYTHON", "TORCH", "PYTORCH_", "GLOO_", "NCCL_", "CUBLAS_", "MKL_", "KMP_", "OPENBLAS_",
                "TRANSFORMERS_", "TOKENIZERS_", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")  # fmt: skip
ENV_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH", "_KEY")


def names_a_secret(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret: never handed to a cell or a parent."""
    return any(word in name.upper() for word in ENV_SECRET_WORDS)


_GIB = 1 << 30
# A process's address space: torch on CPU maps 2-3 GiB of it before any tensor (measured: docs/SANDBOX.md); a cell's
# process may use the host's memory divided among its ranks, never less than this floor nor more than the ceiling.
AS_FLOOR, AS_CEILING = 8 * _GIB, 64 * _GIB
NPROC = 512  # processes and threads of the cell (the kernel counts them per user namespace)
FSIZE = 4 * _GIB  # the largest file a cell writes (a profiler trace is a few MB)
NOFILE = 65536
# Where the driver is root: the cell's uid and gid outside its user namespace (confine.py). Root is exempt from
# RLIMIT_NPROC and owns most of the host's files; nobody is neither, so a fork bomb stops at the limit, and a
# root-owned file is no more the cell's to write than Landlock allows. The run directory is then given to nobody.
NOBODY = 65534


@dataclass
class Policy:
    """What one sandboxed cell may touch."""

    run_dir: str  # writable, the cell's only writable place on disk (besides its own fresh /tmp and /dev/shm)
    cwd: str
    read_only: list[str]  # bound read-only into the cell's root, at the same path
    env: dict[str, str]
    limits: dict[str, list[int]]  # RLIMIT_* name -> [soft, hard]
    writable: list[str] = field(default_factory=list)
    tmpfs: list[str] = field(default_factory=lambda: list(TMPFS))
    hostname: str = "localhost"

    def write(self) -> Path:
        path = Path(self.run_dir) / POLICY_FILE
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def read(cls, path: str | os.PathLike) -> Policy:
        return cls(**json.loads(Path(path).read_text()))


def allowed_environment(env: dict, home: str) -> dict:
    """env cut to ENV_NAMES and ENV_PREFIXES (without secrets by name); HOME and TMPDIR inside the sandbox."""
    kept = {
        name: value
        for name, value in env.items()
        if (name in ENV_NAMES or name.startswith(ENV_PREFIXES)) and not names_a_secret(name)
    }
    return dict(kept, HOME=home, TMPDIR="/tmp", **{SANDBOXED: "1"})


def read_only_paths(arm_dir: str | None, env: dict) -> list[str]:
    """What a cell reads: the system's directories, this interpreter (its venv, the base it was made from, the
    directories its path holds: a verl tree's environment reaches the project's venv through a .pth), the checkout's
    code, the arm's copy, and the user's PYTHONPATH. Never the checkout itself, nor any directory above it."""
    paths = [p for p in SYSTEM_DIRS if os.path.lexists(p)]
    paths += [sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))]
    paths += [entry for entry in sys.path if entry and os.path.isdir(entry)]
    paths += [str(ROOT / part) for part in CHECKOUT_PARTS]
    paths += [arm_dir] if arm_dir else []
    paths += [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    root = os.path.realpath(ROOT)
    unique = []
    for path in paths:
        real = os.path.realpath(path)
        # The checkout or a directory above it would show the records, the cache and .git: never bound whole.
        if real == "/" or root == real or root.startswith(real.rstrip("/") + "/"):
            continue
        if path not in unique and os.path.exists(path):
            unique.append(path)
    return unique


def limits(timeout_s: float, ranks: int, device: str = "cpu") -> dict[str, list[int]]:
    """Per process: its share of the host's memory as address space (within AS_FLOOR..AS_CEILING), CPU seconds
    of twice the cell's timeout (the driver kills it at the timeout anyway), processes, file size, open files. On
    CUDA no address-space limit: the CUDA driver reserves far more address space than it uses (unified addressing),
    and fails to initialise under one."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    address_space = max(AS_FLOOR, min(AS_CEILING, memory // max(ranks, 1)))
    if device == "cuda":
        address_space = resource.RLIM_INFINITY
    cpu = int(timeout_s * 2) + 10
    return {
        "RLIMIT_AS": [address_space, address_space],
        "RLIMIT_CPU": [cpu, cpu + 5],
        "RLIMIT_NPROC": [NPROC, NPROC],
        "RLIMIT_FSIZE": [FSIZE, FSIZE],
        "RLIMIT_NOFILE": [NOFILE, NOFILE],
        "RLIMIT_CORE": [0, 0],
    }


def give_to_cell(*directories: str | os.PathLike):
    """The cell's own directories made writable by it: by nobody, where the driver is root (NOBODY)."""
    if os.getuid() == 0:
        for directory in directories:
            os.chown(directory, NOBODY, NOBODY)


def policy_for(
    run_dir: Path, arm_dir: Path | None, env: dict, timeout_s: float, ranks: int, device: str = "cpu"
) -> Policy:
    """A cell's policy: env (the launch environment, made before) cut to the allowlist, its HOME in the run dir."""
    home = run_dir / "home"
    home.mkdir(exist_ok=True)
    give_to_cell(run_dir, home)
    # The command's batch of cells, read-only: what the cells outside the sandbox computed once for every arm (an
    # engine cell's oracle, rank/verl_side/engine_path.py), which a sandboxed cell reads and never writes.
    # Where the cell runs as nobody (a root driver), only where others may read and enter it (a test's 0700 tmp
    # directory is not: there the cell computes its own).
    readable = os.getuid() != 0 or run_dir.parent.stat().st_mode & 0o005 == 0o005
    batch = [str(run_dir.parent)] if readable else []
    return Policy(
        run_dir=str(run_dir),
        cwd=str(ROOT),
        read_only=read_only_paths(str(arm_dir) if arm_dir else None, env) + batch,
        env=allowed_environment(env, str(home)),
        limits=limits(timeout_s, ranks, device),
        writable=[str(run_dir)],
    )


PROBE = "--probe"


@cache
def available() -> str | None:
    """None where a sandbox can be made here, else one line saying why not; found once per process by entering
    one in a child process (sandbox_exec --probe), which is what a cell does."""
    if not sys.platform.startswith("linux"):
        return f"no sandbox on {sys.platform}: it needs Linux's user namespaces and Landlock"
    with tempfile.TemporaryDirectory(prefix="harness-sandbox-probe-") as run_dir:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "harness.processes.sandbox_exec", PROBE, run_dir],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the sandbox's probe did not run: {exc}"
    if done.returncode == 0 and done.stdout.strip() == "ok":
        return None
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[-1] if lines else f"the sandbox's probe failed (exit {done.returncode})"


def probe_policy(run_dir: str) -> Policy:
    """The least policy (sandbox_exec --probe): this interpreter's files and an empty run directory."""
    give_to_cell(run_dir)
    return Policy(
        run_dir=run_dir,
        cwd=run_dir,
        read_only=read_only_paths(None, {}),
        env=allowed_environment(dict(os.environ), run_dir),
        limits=limits(60, 1),
        writable=[run_dir],
    )
