"""The client: the one place that decides, per launch, whether its processes are forked by a preloaded parent
(server.py) or start as fresh interpreters (starter -> Starter, all that launch.py sees), and the driver's handle on
that parent.

Which parent serves a launch (parent_for), by its key (key: an allowlist):
    lent     one the process that started this one lends it (LENT): make test's pytest controller to its workers
             (lend), a test to the CLI it starts (shared_with_children); the lender outlives the borrower;
    kept     one an earlier command of this checkout left up for the next (keep_s; kept.py finds it in the process
             list); a kept parent of this checkout with another key is told to go: one kept parent per checkout;
    its own  started here, in this process's group (a terminal's Ctrl-C ends it with the command); kept up after
             this process where keep_s > 0, else ended with it.

HARNESS_PRELOAD=0 turns it off: every process is a fresh interpreter. If the parent cannot start or refuses (a thread
it did not expect, see server.py), launches start fresh interpreters and the reason is kept in `refused`, which
records carry (`rank_start`).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from functools import cache
from pathlib import Path

from harness.paths import ROOT
from harness.processes import kept, server, tree, wire

_START_TIMEOUT_S = 180
LENT = wire.LENT
KEEP = wire.KEEP

# The parent's key reads these variables of an environment, and no other: those that change what its imports do, or
# what a child forked from it computes, because the child inherits what the parent set up while importing (thread
# pools, the hash seed, configuration torch and transformers read at import, the libraries loaded). A variable
# outside them (a terminal's, make's, pytest's, the harness's own) never starts a second parent: the denylist this
# replaces grew to 37 names, one per surprise. HARNESS_*: the rank reads its own at run time, none at import.
KEY_PREFIXES = (
    "PYTHON",
    "TORCH",
    "PYTORCH_",
    "CUDA_",
    "CUBLAS_",
    "NCCL_",
    "GLOO_",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "HF_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "MALLOC_",  # glibc's allocator settings (MALLOC_ARENA_MAX, MALLOC_PERTURB_): read once, at the process's start
)
KEY_NAMES = ("LD_PRELOAD", "LD_LIBRARY_PATH")
# Within those, what a launch sets per cell and a child reads for itself at run time:
NOT_KEY = (
    "PYTHONPATH",  # the arm's verl, then this checkout, then the user's: the user's part is in the key (_users_path)
    "CUDA_VISIBLE_DEVICES",  # each CUDA cell's own GPUs (plan/devices.py); the parent never initialises CUDA, so
    "CUDA_DEVICE_ORDER",  # a child reads them at its first CUDA call
    "TORCHINDUCTOR_CACHE_DIR",  # set by inductor's import in any process (a test's too); a rank sets its own
)


# The parent's own environment: what its imports may read and nothing that names a secret. Every process it forks
# inherits its memory, where the environment it started with stays (/proc/self/environ, posix.environ), a sandboxed
# cell's own parent and its ranks too (cell_parent.py): a token there would reach them. Its children take their
# clients' environments from the request, so they need nothing else of its own.
SERVER_NAMES = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "USER", "LOGNAME", "CI")
SERVER_PREFIXES = ("LC_", "XDG_", "HARNESS_")


def server_environment(env: dict) -> dict:
    """env cut to what the parent starts with: the key's variables and SERVER_NAMES/PREFIXES, less any secret by
    name (sandbox.names_a_secret) and the machinery's own sockets."""
    from harness.processes.sandbox import names_a_secret

    wanted = (*KEY_PREFIXES, *SERVER_PREFIXES)
    return {
        name: value
        for name, value in env.items()
        if (name in KEY_NAMES or name in SERVER_NAMES or name.startswith(wanted))
        and not names_a_secret(name)
        and name not in (LENT, wire.SOCKET)
    }


def key_variables(env: dict) -> dict:
    """The part of env a parent's key reads."""
    return {
        name: value
        for name, value in env.items()
        if (name in KEY_NAMES or name.startswith(KEY_PREFIXES)) and name not in NOT_KEY
    }


def _users_path(env: dict) -> list[str]:
    """PYTHONPATH's entries after this checkout's (launch.rank_environment puts the arm's verl and the checkout
    first), which the parent imports with."""
    entries = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    return entries[entries.index(str(ROOT)) + 1 :] if str(ROOT) in entries else entries


def key(env: dict) -> str:
    """What a parent for env must have been started with to serve it: this interpreter, the preload list, the code
    (code_stamp) and env's key variables."""
    variables = sorted(key_variables(env).items())
    parts = (os.path.abspath(sys.executable), server.PRELOAD, code_stamp(), _users_path(env), variables)
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def package_dirs() -> list[str]:
    """The installed packages' folders on this interpreter's path (site-packages), whose mtimes code_stamp reads."""
    return [entry for entry in sys.path if entry.endswith("-packages") and os.path.isdir(entry)]


def _code_stamp(root: Path = ROOT) -> str:
    """What a parent's imports depend on besides its environment: the harness's modules (the server imports the
    rank's), the model configs it reads (models/), and the installed packages (an install changes its site-packages
    folder). A parent of other code is never borrowed: its children would run the code it imported."""
    stamp = hashlib.sha256()
    for path in sorted((root / "harness").rglob("*.py")) + sorted((root / "models").glob("*.json")):
        stat = path.stat()
        stamp.update(f"{path.relative_to(root)} {stat.st_mtime_ns} {stat.st_size}\n".encode())
    for entry in package_dirs():
        stamp.update(f"{entry} {os.stat(entry).st_mtime_ns}\n".encode())
    return stamp.hexdigest()[:16]


@cache
def code_stamp() -> str:
    """This checkout's, read once per process (~200 stats)."""
    return _code_stamp()


# A Unix socket's path is at most 107 bytes. A parent's socket is <base>/harness-preload-<8>/s: under tempfile's
# directory where that is short, else under /tmp. A longer base (macOS's per-user TMPDIR is ~49 bytes, a batch
# job's can be longer) made every parent fail to bind, and every cell start as a fresh interpreter, 10 s slower.
_SOCKET_BASE_MAX = 35


def _socket_base() -> str:
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) <= _SOCKET_BASE_MAX or not os.access("/tmp", os.W_OK | os.X_OK):
        return base
    return "/tmp"


class Parent:
    """A parent this process started (and owns: it ends when this process closes its stdin, unless kept)."""

    def __init__(self, env: dict, *, wait: bool = True, keep_s: float = 0.0):
        self.key, self.keep_s = key(env), keep_s
        self.dir = tempfile.mkdtemp(prefix=server.DIRECTORY_PREFIX, dir=_socket_base())  # 0700: this user's only
        self.socket = os.path.join(self.dir, "s")
        self.refused: str | None = None
        self.log = Path(self.dir) / "parent.log"  # server._remove_own_directory removes it
        users = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
        with open(self.log, "wb") as log:
            # In this process's group, not a session of its own: a terminal's Ctrl-C reaches it with the command.
            self.proc = subprocess.Popen(
                server.command(self.socket, self.key, str(ROOT), os.getpid(), keep_s),
                cwd=ROOT,
                env=dict(server_environment(env), PYTHONPATH=os.pathsep.join([str(ROOT), *users])),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self.pid = self.proc.pid
        if wait:
            self.await_ready()

    def await_ready(self):
        """Until the server's first line: ready, or why it refused."""
        answer = _read_line(self.proc, _START_TIMEOUT_S)
        if answer != "ready":
            log = self.log.read_text(errors="replace")[-300:] if self.log.exists() else ""
            self.refused = answer.removeprefix("refused: ") or f"the preloaded parent did not start: {log}"
            self.close()

    def alive(self) -> bool:
        return self.refused is None and self.proc.poll() is None and os.path.exists(self.socket)

    def close(self):
        """Ended, or (kept) left to serve the next command: it ends itself after keep_s idle."""
        if self.keep_s and self.alive():
            self.proc.stdin.close()
            return
        try:
            self.proc.stdin.close()  # the parent's signal to end
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError, ValueError):
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def parent_checkout(parent: Parent | Borrowed) -> str:
    """The checkout whose code a parent imported (its `--checkout`): this one's for a parent started here, the process
    list's for one lent or kept (a test lends its checkout's parent to a user's copy of it)."""
    if isinstance(parent, Borrowed):
        for up in kept.parents_up():
            if up.pid == parent.pid and up.checkout:
                return up.checkout
    return str(ROOT)


class Borrowed:
    """A parent another process started: used while its socket is there, never closed from here."""

    refused = None

    def __init__(self, key: str, socket: str, pid: int, keep_s: float = 0.0):
        self.key, self.socket, self.pid, self.keep_s = key, socket, pid, keep_s

    def alive(self) -> bool:
        return os.path.exists(self.socket)

    def close(self):
        pass


def _await_socket(socket: str, pid: int) -> bool:
    """Whether the parent at pid serves at socket, waiting while it preloads."""
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not os.path.exists(socket):
        if not _running(pid) or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _running(pid: int) -> bool:
    """Not ended: a parent that has exited stays a zombie until the process that started it reaps it (the pytest
    controller's lent parent, say), and a borrower that took it for running waited out _START_TIMEOUT_S."""
    return not tree.gone(pid)


_lent: str | None = None


def _lent_parent(env: dict, wanted: str) -> Borrowed | None:
    """The parent lent to this process (expect_lent, or LENT in env), where its key is env's, once it serves."""
    global _lent
    token = env.get(LENT) or _lent
    try:
        lent_key, pid, socket = token.split(" ", 2)
    except (AttributeError, ValueError):
        return None
    if lent_key != wanted:
        return None
    if not _await_socket(socket, int(pid)):
        _lent = None  # refused, or gone: this process starts its own from now on
        return None
    return Borrowed(lent_key, socket, int(pid))


# A borrower leaves alone a kept parent this close to its end of idleness: one that ended between the borrower's
# check and its stand-in's connect would fail a cell. Each launch a borrower makes resets the parent's idle time.
_KEPT_MARGIN_S = 60.0


def _kept_parent(wanted: str) -> tuple[Borrowed | None, bool]:
    """(the parent an earlier command of this checkout kept up for this key, if any; whether a parent started here
    may be kept). Another key's kept parent is told to go, unless its command still runs: then one started here is
    not kept, so that one checkout never keeps two."""
    mine, may_keep = None, True
    for up in kept.parents_up(str(ROOT)):
        if not up.keep_s:
            continue
        idle_s = up.idle_s()
        near_end = idle_s is not None and not up.owned and idle_s > up.keep_s - min(_KEPT_MARGIN_S, up.keep_s / 2)
        if up.key == wanted and mine is None and not near_end and _await_socket(up.socket, up.pid):
            mine = Borrowed(up.key, up.socket, up.pid, up.keep_s)
        elif up.owned:
            may_keep = False
        else:
            kept.retire([up], wait_s=0)
    return mine, may_keep and mine is None


_KEPT_S = "600"  # a command's parent stays up this long, idle, for the next command: not in CI, whose job ends


def keep_default() -> str:
    """KEEP where it is unset, for a command (cli.py) and make venv's last step (bytecode.py): 0 in CI."""
    return "0" if os.environ.get("CI") else _KEPT_S


def keep_s() -> float:
    """How long a parent this process starts stays up after it, for the next command (KEEP, seconds; the CLI sets
    600 unless CI is set, pytest 0). 0: no parent is kept, and none is borrowed from an earlier command. ValueError
    where it is not a number of seconds (the CLI checks it before anything runs)."""
    value = float(os.environ.get(KEEP, "0"))
    if not value >= 0:  # negative, or nan
        raise ValueError(value)
    return value


def enabled() -> bool:
    return os.environ.get(wire.ENABLED, "1") != "0"


_lock = threading.Lock()
_parent: Parent | Borrowed | None = None
_lending: Parent | None = None


def parent_for(env: dict) -> Parent | Borrowed | None:
    """The running parent for env's key: lent, kept or started here (this module's docstring); None when off."""
    global _parent
    if not enabled():
        return None
    wanted = key(env)
    with _lock:
        # A refusal stands for the key it was given; a parent that died or was told to go is replaced.
        if _parent is not None and (_parent.key != wanted or (_parent.refused is None and not _parent.alive())):
            if _parent.refused is None:
                _parent.close()
            _parent = None
        if _parent is None:
            _parent = _lent_parent(env, wanted)
        if _parent is None:
            borrowed, may_keep = _kept_parent(wanted) if keep_s() else (None, False)
            _parent = borrowed or Parent(env, keep_s=keep_s() if may_keep else 0.0)
        return _parent


def lend(launch_env: dict) -> str:
    """Start a parent for launch_env for the processes this one starts next (make test's pytest workers), without
    waiting for its preload: the token they borrow it by (LENT). Each worker had started one of its own at its first
    launch, after collecting: two preloads of the same imports at once on a 2-core host (12.8 + 13.2 s of CPU in one
    make test -> 14.9 s). Refused, it ends: a borrower then starts its own."""
    global _lending
    parent = _lending = Parent(launch_env, wait=False)
    threading.Thread(target=parent.await_ready, daemon=True).start()
    return f"{parent.key} {parent.pid} {parent.socket}"


def expect_lent(token: str):
    """This process (a pytest worker) borrows the parent `token` names (lend) for every launch of the lender's key."""
    global _lent
    _lent = token


def shared_with_children(launch_env: dict) -> dict:
    """What to add to a child process's environment (a CLI a test starts) so that its launches are forked by this
    process's parent for launch_env (started here if need be) instead of one of its own, which would import torch,
    transformers and verl's dependencies again (8-13 s; fresh-clone CI 750 -> 680 s). The child borrows it where its
    own launches have the same key. {} when there is no parent to share."""
    parent = parent_for(launch_env)
    if parent is None or parent.refused is not None:
        return {}
    return {LENT: f"{parent.key} {parent.pid} {parent.socket}"}


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return line[0].decode().strip() if line else ""


class Starter:
    """How one launch starts its processes, decided once (starter): forked by the parent through a stand-in, or as
    fresh interpreters. `rank_start` is what the record says of it."""

    def __init__(self, forked: bool, rank_start: str):
        self.forked, self.rank_start = forked, rank_start

    def module(self, name: str, *args: str) -> list[str]:
        """The command that runs module `name` as __main__ with args."""
        if self.forked:
            return [sys.executable, "-m", STAND_IN, "--module", name, *args]
        return [sys.executable, "-m", name, *args]

    def torchrun(self, pid_file: str, *args: str) -> list[str]:
        """The command that runs torchrun's wrapper (harness/rank/torchrun.py) with args; forked, its pid goes to
        pid_file (for the driver's kill path)."""
        if self.forked:
            return [sys.executable, "-m", STAND_IN, "--torchrun", pid_file, *args]
        return [sys.executable, "-m", TORCHRUN, *args]

    @staticmethod
    def sandbox_exec(policy_file: str) -> list[str]:
        """The command before another that runs it in a cell's sandbox (sandbox_exec.py), as a fresh interpreter."""
        return [sys.executable, "-m", SANDBOX_EXEC, policy_file, "--"]

    @property
    def rank_entry(self) -> str:
        """The module torchrun starts for each rank."""
        return STAND_IN if self.forked else WORKER


STAND_IN, TORCHRUN, WORKER = "harness.processes.stand_in", "harness.rank.torchrun", "harness.rank.worker"
SANDBOX_EXEC = "harness.processes.sandbox_exec"


def starter(env: dict) -> Starter:
    """Fork or fresh, for processes started with env: forked where a parent is up for env (its socket then goes
    into env, for the stand-ins), else fresh, and why."""
    parent = parent_for(env)
    if parent is None:
        return Starter(False, "fresh interpreter")
    if parent.refused is not None:
        return Starter(False, f"fresh interpreter ({parent.refused})")
    env[wire.SOCKET] = parent.socket
    return Starter(True, "fork")


def retire_kept(python: str | None = None, timeout_s: float = 15.0) -> list[int]:
    """Every parent of this checkout kept up after its command (of one interpreter: a release environment's, once
    `harness releases` is done with it) told to go and waited for: their pids."""
    ups = kept.stoppable(str(ROOT), python)
    kept.retire(ups, timeout_s)
    return [up.pid for up in ups]


def _stays_up() -> str | None:
    """The line this process ends with where a parent stays up after it."""
    if isinstance(_parent, Parent) and _parent.keep_s and _parent.alive():
        return kept.announce(_parent.pid, _parent.keep_s, earlier=False)
    if isinstance(_parent, Borrowed) and _parent.keep_s and _parent.alive():
        return kept.announce(_parent.pid, _parent.keep_s, earlier=True)
    return None


@atexit.register
def _close():
    line = _stays_up()
    for parent in (_parent, _lending):
        if parent is not None and parent.refused is None:
            parent.close()
    if line:
        print(line, file=sys.stderr, flush=True)
