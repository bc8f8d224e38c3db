"""The stand-in: what the driver and torchrun start when the server is up (server.py); standard library only, it
has the parent fork the real process with this process's stdio, environment and directory, relays signals to it, and
exits as it did (same code, or killed by the same signal), so whoever started the stand-in sees the process it
started.

    python -m harness.processes.stand_in SPEC.json
        a rank (torchrun starts it; the worker runs)
    python -m harness.processes.stand_in --torchrun PIDFILE ARGS...
        torchrun itself (the driver starts it); the forked torchrun's pid goes to PIDFILE, for the driver's kill path
    python -m harness.processes.stand_in --module NAME ARGS...
        module NAME as __main__, a fresh interpreter with the server's imports done (a test that imports verl in a
        process of its own)

HARNESS_PRELOAD_SOCKET (wire.SOCKET) names the server's socket. A forked torchrun is the same wrapper of torchrun's
own code that a fresh interpreter would run (harness/rank/torchrun.py, given ARGS, run as __main__), without the 2-4 s
its imports cost one.

A rank's stand-in ends with its torchrun, killed or not (die_with_parent).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

from harness.processes import wire
from harness.rank.environment import TORCHRUN_PID

# Linux's prctl option that sends the caller a signal when its parent ends (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def die_with_parent():
    """This process is SIGKILLed when the one that started it ends (a rank's stand-in: when its torchrun does).

    torchrun kills its ranks when it is asked to stop, but not when it is killed outright: the driver's kill path
    (launch.kill_run) SIGKILLs the forked torchrun and the rank stand-ins it knows of, and a Ctrl-C just after the
    server forked torchrun knows of none yet. The stand-ins torchrun started in that moment were left behind, in
    sessions of their own, and so were the ranks the server forked for them, waiting for peers that would never come:
    one was still up 30 s after its command ended, in a fresh-clone CI (tests/distributed/test_forked_cells.py).
    With this, the stand-in ends with its torchrun, its connection closes, and the server's child ends with it
    (server.py watch_client). Elsewhere than Linux nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    # The parent to end with: the torchrun that started this stand-in (it names itself), else the parent it has now.
    parent = int(os.environ.get(TORCHRUN_PID) or os.getppid())
    try:
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the call took (this stand-in was reparented): no signal will come
        os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]):
    pid_file = None
    module = "harness.rank.worker"
    if argv[:1] == ["--torchrun"]:
        pid_file, module, argv = argv[1], "harness.rank.torchrun", argv[2:]
    elif argv[:1] == ["--module"]:
        module, argv = argv[1], argv[2:]
    else:  # a rank, started by torchrun
        die_with_parent()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ[wire.SOCKET])
    wire.send_request(conn, wire.Request(module, [module, *argv], dict(os.environ), os.getcwd()))

    def relay(signum, _frame):
        try:
            conn.send(bytes([signum]))
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, relay)
    ended = None
    for line in conn.makefile("rb"):
        message = json.loads(line)
        if "pid" in message:
            if pid_file:
                with open(pid_file, "w") as f:
                    f.write(str(message["pid"]))
            continue
        ended = message
        break
    if ended is None:
        print("harness: the preloaded parent went away before its child ended", file=sys.stderr, flush=True)
        os._exit(1)
    if "signal" in ended:
        if ended["signal"] not in (signal.SIGKILL, signal.SIGSTOP):  # the two no handler can be set for
            signal.signal(ended["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), ended["signal"])
    os._exit(ended["exit"])


if __name__ == "__main__":
    main(sys.argv[1:])
