"""What the server, its clients and the stand-ins agree on: the environment variables that name the machinery, and
the one request a stand-in sends (a length header, then a JSON body, with its stdio passed as file descriptors).
Standard library only: the stand-in imports this in a fresh interpreter that torchrun starts per rank."""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import asdict, dataclass

# "0" turns the machinery off: every rank is a fresh interpreter.
ENABLED = "HARNESS_PRELOAD"
# The server's socket, for a stand-in: set by the client in the launch environment (torchrun passes it on).
SOCKET = "HARNESS_PRELOAD_SOCKET"
# "<key> <pid> <socket>": a parent another process started and lends to this one (client.py lend,
# shared_with_children): make test's pytest controller to its workers, a test to the CLI it starts.
LENT = "HARNESS_PRELOAD_LENT"
# Seconds a parent started by a command stays up, idle, once that command has ended, for the next command of the
# same checkout and key (client.py keep_s, kept.py); 0: neither kept nor borrowed from an earlier command.
KEEP = "HARNESS_PRELOAD_KEEP_S"

HEADER = struct.Struct("!Q")  # the request body's length
STDIO = [0, 1, 2]


@dataclass(frozen=True)
class Request:
    """What a stand-in asks the server to run: MODULE as __main__ with argv, in its environment and directory."""

    module: str
    argv: list[str]
    env: dict[str, str]
    cwd: str


def send_request(conn: socket.socket, request: Request):
    """The stand-in's side: its stdio with the header, then the body."""
    body = json.dumps(asdict(request)).encode()
    socket.send_fds(conn, [HEADER.pack(len(body))], STDIO)
    conn.sendall(body)


def receive_request(conn: socket.socket) -> tuple[Request, list[int]]:
    """The server's side: (the request, the stand-in's stdio as this process's file descriptors)."""
    head, fds, _, _ = socket.recv_fds(conn, HEADER.size, len(STDIO))
    (size,) = HEADER.unpack(head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the rank's client left before its request was read")
        body += chunk
    return Request(**json.loads(body)), fds


def send_message(conn: socket.socket, message: dict):
    """The server's answers, one JSON line each: {"pid": ...} once forked, then {"exit": code} or {"signal": n}."""
    conn.sendall(json.dumps(message).encode() + b"\n")
