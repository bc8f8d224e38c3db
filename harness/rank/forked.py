"""What torchrun starts for each rank when a preloaded parent is up (rank/preload.py): a stand-in, stdlib only, that
has the parent fork the real rank with this process's stdio, environment and directory, relays torchrun's signals
to it, and exits as it did (same code, or killed by the same signal), so torchrun sees the rank it started.

`python -m harness.rank.forked SPEC.json`, with HARNESS_PRELOAD_SOCKET naming the parent's socket.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys


def main(argv: list[str]):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ["HARNESS_PRELOAD_SOCKET"])
    request = json.dumps({"argv": ["harness.rank.worker", *argv], "env": dict(os.environ),
                          "cwd": os.getcwd()}).encode()
    socket.send_fds(conn, [struct.pack("!Q", len(request))], [0, 1, 2])
    conn.sendall(request)

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
        if "pid" not in message:
            ended = message
            break
    if ended is None:
        print("harness: the preloaded parent went away before the rank ended", file=sys.stderr, flush=True)
        os._exit(1)
    if "signal" in ended:
        if ended["signal"] not in (signal.SIGKILL, signal.SIGSTOP):  # the two no handler can be set for
            signal.signal(ended["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), ended["signal"])
    os._exit(ended["exit"])


if __name__ == "__main__":
    main(sys.argv[1:])
