"""Preloaded parents as the process list shows them (psutil): which are up, of which checkout, key, owner and age,
read from their command lines (server.command), so that no state file can be missing or stale. Ending them (`harness
stop`, or a command of the same checkout with another key), listing them (`harness status`), and the line a command
ends with when one stays up after it (announce)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import psutil

from harness.processes import server

_MB = 1 << 20


@dataclass
class Up:
    """One preloaded parent that is running."""

    pid: int
    python: str  # its interpreter, as started
    socket: str
    key: str
    checkout: str
    owner: int  # the process that started it
    keep_s: float  # 0: ends with its owner
    started: float  # time.time() of its start
    rss: int
    ppid: int

    @property
    def ready(self) -> bool:
        """Serving: its socket is bound once the preload is done, and removed when it stops taking requests."""
        return os.path.exists(self.socket)

    @property
    def owned(self) -> bool:
        """Its command still runs (it is still that process's child)."""
        return self.ppid == self.owner

    @property
    def checkout_gone(self) -> bool:
        return bool(self.checkout) and not os.path.isdir(self.checkout)

    def idle_s(self) -> float | None:
        """Seconds since its last fork or child's end (it touches its socket at each), None when not serving."""
        try:
            return time.time() - os.stat(self.socket).st_mtime
        except OSError:
            return None


def parents_up(checkout: str | None = None) -> list[Up]:
    """This user's preloaded parents (of one checkout), oldest first. A child the parent forked shares its command
    line until it runs something else; it is left out (its parent is in the list)."""
    uid, found = os.getuid(), {}
    for proc in psutil.process_iter(["pid", "ppid", "uids", "cmdline", "create_time", "memory_info"]):
        info = proc.info
        argv = info["cmdline"] or []
        if server.MODULE not in argv or info["uids"] is None or info["uids"].real != uid:
            continue
        try:
            args = server.parse(argv[argv.index(server.MODULE) + 1 :])
        except (ValueError, IndexError):
            continue
        rss = info["memory_info"].rss if info["memory_info"] else 0
        found[info["pid"]] = Up(
            info["pid"], argv[0], args.socket, args.key, args.checkout, args.owner, args.keep, info["create_time"],
            rss, info["ppid"],
        )  # fmt: skip
    ups = [up for up in found.values() if up.ppid not in found]
    return sorted((up for up in ups if checkout is None or up.checkout == checkout), key=lambda up: up.started)


def retire(ups: list[Up], wait_s: float = 15.0) -> list[Up]:
    """Each told to go (SIGTERM: no new request, out once its children have ended), then waited for: those still up
    after wait_s (children still running)."""
    for up in ups:
        try:
            os.kill(up.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + wait_s
    left = list(ups)
    while left and time.monotonic() < deadline:
        left = [up for up in left if psutil.pid_exists(up.pid) and _is(up)]
        time.sleep(0.05)
    return [up for up in left if psutil.pid_exists(up.pid) and _is(up)]


def _is(up: Up) -> bool:
    """Still that parent (not a pid the kernel has given to another process since, nor a zombie)."""
    try:
        proc = psutil.Process(up.pid)
        return proc.create_time() == up.started and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stoppable(checkout: str | None, python: str | None = None) -> list[Up]:
    """What `harness stop` ends: every parent of checkout (None: of any checkout of this user) kept up after its
    command, and any whose checkout is gone. A parent whose command still runs is that command's, and ends with it."""
    return [
        up
        for up in parents_up()
        if (up.keep_s and not up.owned and (checkout is None or up.checkout == checkout) or up.checkout_gone)
        and (python is None or os.path.abspath(up.python) == os.path.abspath(python))
    ]


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def announce(pid: int, keep_s: float, earlier: bool) -> str:
    """The line a command ends with when a parent stays up after it."""
    try:
        size = f", {psutil.Process(pid).memory_info().rss // _MB} MB"
    except psutil.Error:
        size = ""
    whose = "an earlier command's preloaded parent" if earlier else "its preloaded parent"
    return (
        f"harness: {whose} (pid {pid}{size}) stays up until {_minutes(keep_s)} idle, for the next command; "
        "make stop ends it, make status lists it"
    )


def describe(up: Up) -> str:
    """One line of `harness status`."""
    if not up.owner:
        state = f"started by pid {up.ppid}"  # by a harness that did not name its command
    elif not up.ready and up.owned:
        state = f"preloading, for command pid {up.owner}"
    elif up.owned:
        state = f"serving command pid {up.owner}" + (f", kept {_minutes(up.keep_s)} idle after it" if up.keep_s else "")
    elif not up.ready:
        state = "ending (its children first)"
    else:
        state = f"kept, idle {_minutes(up.idle_s() or 0)} of {_minutes(up.keep_s)}"
    checkout = up.checkout + (" (gone)" if up.checkout_gone else "")
    age = _minutes(time.time() - up.started)
    return f"pid {up.pid}  {state}  checkout {checkout}  up {age}  RSS {up.rss // _MB} MB"
