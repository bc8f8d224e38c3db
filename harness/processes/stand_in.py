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
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

from harness.processes import wire


def main(argv: list[str]):
    pid_file = None
    module = "harness.rank.worker"
    if argv[:1] == ["--torchrun"]:
        pid_file, module, argv = argv[1], "harness.rank.torchrun", argv[2:]
    elif argv[:1] == ["--module"]:
        module, argv = argv[1], argv[2:]
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
