"""What the server, its clients and the stand-ins agree on: the environment variables that name the machinery, and
the one request a stand-in sends (a length header, then a JSON body, with its stdio passed as file descriptors).
Standard library only: the stand-in imports this in a fresh interpreter that torchrun starts per rank."""

from __future__ import annotations

import json
import socket
import struct

# "0" turns the machinery off: every rank is a fresh interpreter.
ENABLED = "HARNESS_PRELOAD"
# The server's socket, for a stand-in: set by the client in the launch environment (torchrun passes it on).
SOCKET = "HARNESS_PRELOAD_SOCKET"
# "<digest of the key> <socket>": a server another process owns, lent to this one's launches (client.py).
SHARED = "HARNESS_PRELOAD_SHARED"
# Beside it, as JSON: the variables that server's imports wrote into its own environment (its ready line).
SHARED_WROTE = "HARNESS_PRELOAD_SHARED_WROTE"
# "<digest of the key> <directory>": a server the pytest controller started for its workers before they collected,
# ready once the directory has its state file (client.py lend, expect_lent).
LENT = "HARNESS_PRELOAD_LENT"
# Seconds a server started by a command stays up, idle, once that command has ended, for the next command of the same
# checkout, python and environment to borrow (client.py keep_s); 0: neither kept nor borrowed.
KEEP = "HARNESS_PRELOAD_KEEP_S"

# Frames run by `python -m` (runpy's, and each forked child's own runpy.run_module) are named "<frozen runpy>" in
# Python 3.11+, a name no module's __file__ matches, so inspect.getmodule() scans all of sys.modules for each such
# frame, every time. torchrun's rendezvous names each event after its caller with inspect.stack(): ~270 such scans
# a run, over the ~5000 modules of a preloaded process, took 1.5 s of every forked torchrun (measured, cProfile).
# With runpy read from its source file, its frames resolve from inspect's cache. Given to the server and to a fresh
# torchrun.
UNFROZEN = ("-X", "frozen_modules=off")

HEADER = struct.Struct("!Q")  # the request body's length
STDIO = [0, 1, 2]


def send_request(conn: socket.socket, request: dict):
    """The stand-in's side: its stdio with the header, then the body."""
    body = json.dumps(request).encode()
    socket.send_fds(conn, [HEADER.pack(len(body))], STDIO)
    conn.sendall(body)


def receive_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """The server's side: (the request, the stand-in's stdio as this process's file descriptors)."""
    head, fds, _, _ = socket.recv_fds(conn, HEADER.size, len(STDIO))
    (size,) = HEADER.unpack(head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the rank's client left before its request was read")
        body += chunk
    return json.loads(body), fds


def send_message(conn: socket.socket, message: dict):
    """The server's answers, one JSON line each: {"pid": ...} once forked, then {"exit": code} or {"signal": n}."""
    conn.sendall(json.dumps(message).encode() + b"\n")
