"""The client: the driver's handle on the server (server.py), started on the first launch, reused by every later
launch of this process, restarted when the environment it was started with changes, closed at exit; and the one
place that decides, per launch, whether its processes are forked by the server or start as fresh interpreters
(starter).

HARNESS_PRELOAD=0 turns it off: every rank is then a fresh interpreter, as before. If the server cannot start or
refuses (a thread it did not expect, see server.py), launches fall back to fresh interpreters and the reason is kept
in `refused`, which records carry (`rank_start`).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness.paths import ROOT
from harness.processes import wire

_START_TIMEOUT_S = 180
SHARED = wire.SHARED  # a server another process owns, for this one's launches (shared_with_children)
SHARED_WROTE = wire.SHARED_WROTE  # what that server's imports wrote into its environment
LENT = wire.LENT  # a server the pytest controller started for its workers (lend, expect_lent)
KEEP = wire.KEEP  # how long a server a command started stays up for the next command (keep_s)
# Set per launch (arm, run), or per test by pytest: not part of the parent's key (each child gets the launch's
# whole environment anyway). With PYTEST_CURRENT_TEST in the key, every test item restarted the parent: 126
# parents in one CI run, each paying the imports the parent exists to save. A test's CLI process differs from the
# test's own process by HARNESS_RESULTS_DIR and SHARED only, and may then borrow its parent.
# CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER) name each CUDA cell's own GPUs (plan/devices.py): in the key, cells
# on different GPUs would restart the parent under each other. The parent never initialises CUDA, so a child reads
# its own on its first CUDA call.
_PER_LAUNCH = (
    "PYTHONPATH",
    wire.SOCKET,
    "PYTEST_CURRENT_TEST",
    "HARNESS_RESULTS_DIR",
    SHARED,
    SHARED_WROTE,
    LENT,
    KEEP,
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    # What pytest-xdist sets in each worker, and not in the controller that lends them its parent (lend): the
    # worker's id and count, the run's id, and the controller's terminal size (read for output widths only).
    "PYTEST_XDIST_WORKER",
    "PYTEST_XDIST_WORKER_COUNT",
    "PYTEST_XDIST_TESTRUNUID",
    "COLUMNS",
    "LINES",
    # What a shell and make set for their own bookkeeping, which differ between `make repro` and `python -m harness
    # repro` from the same shell (the command's path in `_`, make's flags and depth): with them in the key, a parent
    # kept by one (keep_s) was not the next one's.
    "_",
    "OLDPWD",
    "SHLVL",
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
    "MAKEOVERRIDES",
    "MAKE_TERMOUT",
    "MAKE_TERMERR",
    # Which terminal, pane or login a command was typed in, which nothing a parent imports reads: with them in the
    # key, a parent kept by a command in one tmux pane or ssh session was not the next one's in another.
    "TMUX_PANE",
    "STY",
    "WINDOW",
    "WINDOWID",
    "TERM_SESSION_ID",
    "ITERM_SESSION_ID",
    "KITTY_WINDOW_ID",
    "WEZTERM_PANE",
    "SSH_TTY",
    "SSH_CLIENT",
    "SSH_CONNECTION",
    "GPG_TTY",
    "XDG_SESSION_ID",
)

UNFROZEN = wire.UNFROZEN  # the server's flags, and a fresh torchrun's (wire.py says why)


class Parent:
    def __init__(self, env: dict, *, wait: bool = True, keep_s: float = 0.0):
        self.key = _key(env)
        self.keep_s = keep_s
        self.dir = tempfile.mkdtemp(prefix="harness-preload-", dir=_kept_root() if keep_s else _socket_base())
        self.socket = os.path.join(self.dir, _SOCKET)
        self.refused: str | None = None
        self.log = Path(self.dir) / "parent.log"
        parent_env = dict(
            env,
            PYTHONPATH=os.pathsep.join(
                [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
            ),
        )
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, *UNFROZEN, "-m", "harness.processes.server", self.socket]
                + (["--keep", str(keep_s)] if keep_s else []),
                cwd=ROOT,
                env=parent_env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        self.wrote: dict = {}
        if wait:
            self.await_ready()

    def await_ready(self):
        """Until the server's first line: ready (what its imports wrote), or why it refused."""
        answer = _read_line(self.proc, _START_TIMEOUT_S)
        word, _, wrote = answer.partition(" ")
        if word == "ready":
            self.wrote = json.loads(wrote or "{}")
            if self.keep_s:
                _write_state(
                    self.dir,
                    {
                        "wrote": self.wrote,
                        "digest": _digest(self.key),
                        "pid": self.proc.pid,
                        "keep_s": self.keep_s,
                        "code": _code_stamp(),
                        "python": os.path.abspath(sys.executable),
                    },
                )
        else:
            self.refused = (
                answer.removeprefix("refused: ")
                if answer
                else (f"the preloaded parent did not start: {self.log.read_text(errors='replace')[-300:]}")
            )
            self.close()

    def alive(self) -> bool:
        return self.refused is None and self.proc.poll() is None

    def close(self):
        if self.keep_s and self.refused is None:
            self.proc.stdin.close()  # a kept parent serves on, then removes its directory itself
            return
        try:
            self.proc.stdin.close()  # the parent's signal to end
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError, ValueError):
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Borrowed:
    """A parent that another process started and owns, named in SHARED: used while its socket is there, never
    closed from here."""

    refused = None

    def __init__(self, key: tuple, socket: str, wrote: dict | None = None):
        self.key, self.socket, self.wrote = key, socket, wrote or {}

    def alive(self) -> bool:
        return os.path.exists(self.socket)

    def close(self):
        pass


def _key(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k not in _PER_LAUNCH))


_UNSET = object()


def _key_served(env: dict, wrote: dict) -> tuple:
    """env's key as a parent whose own imports wrote `wrote` into its environment sees it: a variable env has with
    the value the parent's preload gave it is the parent's own, not a difference (its preload ran to the same state
    either way). Importing torch's inductor (transformers' model classes, compile_fx) sets TORCHINDUCTOR_CACHE_DIR to
    torch's default in the importing process: in a test process, the first in-process import of one made every later
    launch's key differ, and the parent was closed and started again (~6-7 s of CPU each, two of make test's nine)."""
    return _key({k: v for k, v in env.items() if wrote.get(k, _UNSET) != v})


def _serves(parent, env: dict) -> bool:
    return _key_served(env, parent.wrote) == parent.key


def _digest(key: tuple) -> str:
    """The key and this interpreter (another environment's python must never borrow this one's parent)."""
    return hashlib.sha256(repr((sys.executable, key)).encode()).hexdigest()[:16]


def _borrowed(env: dict) -> Borrowed | None:
    digest, _, socket = env.get(SHARED, "").partition(" ")
    if not socket:
        return None
    return _borrow(env, digest, socket, json.loads(env.get(SHARED_WROTE) or "{}"))


def _borrow(env: dict, digest: str, socket: str, wrote: dict) -> Borrowed | None:
    """The parent at socket, whose key has this digest and whose imports wrote `wrote`, for env's launches: where
    env's key, as that parent sees it, is the same, with this python, and its socket is there."""
    key = _key_served(env, wrote)
    if digest == _digest(key) and os.path.exists(socket):
        return Borrowed(key, socket, wrote)
    return None


_SOCKET = "s"  # the server's socket, in its parent's directory (Parent), as borrowers find it there
_STATE = "state.json"  # in a lent or kept parent's directory once it is ready (lend, keep_s)


def _write_state(directory: str, state: dict):
    temporary = os.path.join(directory, _STATE + ".tmp")
    Path(temporary).write_text(json.dumps(state))
    os.replace(temporary, os.path.join(directory, _STATE))


# A command's preloaded parent stays up this long after it, for the next command (keep_s): make repro's second run
# starts its first cell without the 5-13 s of imports. Not in CI, whose job ends.
_KEPT_S = "600"


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


# A Unix socket's path is at most 107 bytes. A parent's socket is <base>/harness-preload-kept-<uid>-<tag>/harness-
# preload-<8>/s (at most 72 bytes after the base, a 10-digit uid): under tempfile's directory where that is short,
# else under /tmp. A longer base (macOS's per-user TMPDIR is ~49 bytes, a batch job's can be longer) made every
# parent fail to bind, and every cell start as a fresh interpreter, 10 s and more slower.
_SOCKET_BASE_MAX = 35


def _socket_base() -> str:
    """The directory a parent's own directory goes in (see _SOCKET_BASE_MAX)."""
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) <= _SOCKET_BASE_MAX or not os.access("/tmp", os.W_OK | os.X_OK):
        return base
    return "/tmp"


def _kept_root() -> Path:
    """Where this checkout's kept parents live, this user's only (0700): one per checkout, so that no other
    checkout's code is ever forked here."""
    tag = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    root = Path(_socket_base()) / f"harness-preload-kept-{os.getuid()}-{tag}"
    root.mkdir(mode=0o700, exist_ok=True)
    if root.stat().st_uid != os.getuid():
        raise PermissionError(f"{root} belongs to another user")
    return root


def package_dirs() -> list[str]:
    """The installed packages' folders on this interpreter's path (site-packages), whose mtimes _code_stamp reads."""
    return [entry for entry in sys.path if entry.endswith("-packages") and os.path.isdir(entry)]


def _code_stamp(root: Path = ROOT) -> str:
    """What a parent's imports depend on besides its environment: the harness's modules (the server imports the
    rank's), the model configs it reads (models/), and the installed packages (an install changes its site-packages
    folder). A kept parent whose stamp differs is never borrowed: its children would run the code it imported."""
    stamp = hashlib.sha256()
    for path in sorted((root / "harness").rglob("*.py")) + sorted((root / "models").glob("*.json")):
        stat = path.stat()
        stamp.update(f"{path.relative_to(root)} {stat.st_mtime_ns} {stat.st_size}\n".encode())
    for entry in package_dirs():
        stamp.update(f"{entry} {os.stat(entry).st_mtime_ns}\n".encode())
    return stamp.hexdigest()[:16]


# A borrower leaves alone a kept parent this close to its end of idleness: one that ended between the borrower's
# check and its stand-in's connect would fail a cell. Each launch a borrower makes resets the parent's idle time.
_KEPT_MARGIN_S = 60.0


def _kept_parent(env: dict) -> Borrowed | None:
    """A parent an earlier command of this checkout started and left up (keep_s) that serves env: same key, python
    and code. One whose code is not the checkout's now is told to go (SIGTERM: it takes no new request and ends
    once its children have)."""
    if not keep_s():
        return None
    code, python = _code_stamp(), os.path.abspath(sys.executable)
    for state_file in sorted(_kept_root().glob(f"*/{_STATE}")):
        try:
            state = json.loads(state_file.read_text())
            socket = state_file.parent / _SOCKET
            idle_s = time.time() - socket.stat().st_mtime
        except (OSError, ValueError):
            continue  # ending, or gone
        if not _is_parent_at(state.get("pid"), str(socket)):
            shutil.rmtree(state_file.parent, ignore_errors=True)  # killed: it could not remove its directory
            continue
        if state.get("python") != python:
            continue  # another interpreter's (a release environment's): its code stamp is not this one's to judge
        if state.get("code") != code:
            _retire(state.get("pid"))
            continue
        kept_s = state.get("keep_s", 0)
        if idle_s < kept_s - min(_KEPT_MARGIN_S, kept_s / 2):
            borrowed = _borrow(env, state.get("digest", ""), str(socket), state.get("wrote", {}))
            if borrowed is not None:
                return borrowed
    return None


def retire_kept(python: str | None = None, timeout_s: float = 15.0) -> list[int]:
    """Every parent this checkout's commands left up (or those of one interpreter: a release environment's, once
    `harness releases` is done with it) told to go (SIGTERM), and waited for (each ends once its children have,
    then removes its directory): their pids (`harness stop`)."""
    told = []
    for state_file in sorted(_kept_root().glob(f"*/{_STATE}")):
        try:
            state = json.loads(state_file.read_text())
            pid = int(state["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if python is not None and state.get("python") != os.path.abspath(python):
            continue
        if _is_parent_at(pid, str(state_file.parent / _SOCKET)):
            _retire(pid)
            told.append((pid, state_file.parent))
        else:
            shutil.rmtree(state_file.parent, ignore_errors=True)
    deadline = time.monotonic() + timeout_s
    while any(directory.exists() for _, directory in told) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid, _ in told]


def _is_parent_at(pid, socket: str) -> bool:
    """Whether pid is still the kept parent serving at socket: running, and started with that socket's path (its
    argv, as the kernel lists it). A parent killed outright leaves its state file behind, and the kernel may since
    have given its pid to another process, which must never be sent SIGTERM nor borrowed. Where the kernel lists no
    argv (no /proc), running is all there is to go by."""
    if not _running(pid):
        return False
    try:
        argv = Path(f"/proc/{int(pid)}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return not Path("/proc/self/cmdline").exists()  # ended since, or a kernel without /proc
    except OSError:
        return False  # not this user's to read: not one of this user's parents
    return os.fsencode(socket) in argv


def _running(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except PermissionError:
        return True
    except (ProcessLookupError, TypeError, ValueError):
        return False
    return True


def _retire(pid):
    try:
        os.kill(int(pid), signal.SIGTERM)
    except (ProcessLookupError, PermissionError, TypeError, ValueError):
        pass


_lending: Parent | None = None
_lent: str | None = None


def lend(launch_env: dict) -> str:
    """Start a parent for launch_env for processes this one starts next (make test's pytest workers), without
    waiting for its preload: "<digest> <directory>" (LENT). A thread writes the directory's state file once the
    parent is ready (what its imports wrote) or has refused. Each worker started a parent of its own at its first
    launch, after collecting: two preloads of the same imports (12.8 and 13.2 s of CPU in one make test), at the
    same moment, on a 2-core host. One, started before the workers collect, runs while they do."""
    global _lending
    parent = Parent(launch_env, wait=False)
    _lending = parent

    def ready():
        parent.await_ready()  # a refusal closes it: its directory is gone, which a borrower takes as the answer
        if parent.refused is None:
            _write_state(parent.dir, {"wrote": parent.wrote})

    threading.Thread(target=ready, daemon=True).start()
    return f"{_digest(parent.key)} {parent.dir}"


def expect_lent(token: str):
    """This process (a pytest worker) borrows the parent `token` names (lend) for every launch whose key is the
    lender's, once it is ready; others, or all where it refused, get a parent of their own as before."""
    global _lent
    _lent = token


def _lent_parent(env: dict) -> Borrowed | None:
    global _lent
    if not _lent:
        return None
    digest, _, directory = _lent.partition(" ")
    state, deadline = os.path.join(directory, _STATE), time.monotonic() + _START_TIMEOUT_S
    while not os.path.exists(state):
        if not os.path.isdir(directory) or time.monotonic() > deadline:
            _lent = None  # refused, or never ready: this process starts its own from now on
            return None
        time.sleep(0.05)
    return _borrow(env, digest, os.path.join(directory, _SOCKET), json.loads(Path(state).read_text())["wrote"])


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return line[0].decode().strip() if line else ""


_lock = threading.Lock()
_parent: Parent | Borrowed | None = None


def enabled() -> bool:
    return os.environ.get(wire.ENABLED, "1") != "0"


def parent_for(env: dict) -> Parent | Borrowed | None:
    """The running parent for this environment (started or restarted as needed, or borrowed from the process that
    started this one, see shared_with_children); None when turned off."""
    global _parent
    if not enabled():
        return None
    with _lock:
        # A refusal stands for the environment it was given; a parent that died is replaced.
        if _parent is not None and (not _serves(_parent, env) or (_parent.refused is None and not _parent.alive())):
            if _parent.refused is None:
                _parent.close()
            _parent = None
        if _parent is None:
            _parent = _borrowed(env) or _lent_parent(env) or _kept_parent(env) or Parent(env, keep_s=keep_s())
        return _parent


def shared_with_children(launch_env: dict) -> dict:
    """What to add to a child process's environment (a CLI a test starts) so that its launches are forked by this
    process's parent for launch_env (started here if need be) instead of one of its own, which would import torch,
    transformers and verl's dependencies again (8-13 s). The child borrows it only where its own launch environment
    has the same key and it runs this same python; else it starts its own. {} when there is no parent to share."""
    parent = parent_for(launch_env)
    if parent is None or parent.refused is not None:
        return {}
    return {SHARED: f"{_digest(parent.key)} {parent.socket}", SHARED_WROTE: json.dumps(parent.wrote, sort_keys=True)}


class Starter:
    """How one launch starts its processes, decided once (starter): forked by the server through a stand-in, or as
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
        # UNFROZEN: torchrun's rendezvous inspects its stack (wire.py says what that costs).
        return [sys.executable, *UNFROZEN, "-m", TORCHRUN, *args]

    @property
    def rank_entry(self) -> str:
        """The module torchrun starts for each rank."""
        return STAND_IN if self.forked else WORKER


STAND_IN, TORCHRUN, WORKER = "harness.processes.stand_in", "harness.rank.torchrun", "harness.rank.worker"


def starter(env: dict) -> Starter:
    """Fork or fresh, for processes started with env: forked where a server is up for env (its socket then goes into
    env, for the stand-ins), else fresh, and why."""
    parent = parent_for(env)
    if parent is None:
        return Starter(False, "fresh interpreter")
    if parent.refused is not None:
        return Starter(False, f"fresh interpreter ({parent.refused})")
    env[wire.SOCKET] = parent.socket
    return Starter(True, "fork")


@atexit.register
def _close():
    for parent in (_parent, _lending):
        if parent is not None and parent.refused is None:
            parent.close()
