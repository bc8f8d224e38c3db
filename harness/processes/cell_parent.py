"""A sandboxed cell's own preloaded parent: the preloaded parent (server.py) forks it like any child, it enters the
cell's sandbox (confine.py), and its first process inside serves the cell's fork requests (server.serve) on a socket
of the cell's: torchrun and each rank fork from it, inside the sandbox, with the imports done (the 10-14 s per rank
a fresh interpreter pays). Nothing inside reaches the preloaded parent: its socket is not in the cell's root, and
the cell's environment does not name it.

    driver --Popen--> stand-in --request--> parent --fork--> cell parent (this module, as __main__)
                                                              '-- enter: namespaces' maker --fork--> pid 1: serve
    driver --Popen--> stand-in --torchrun --request--> pid 1 --fork--> torchrun --> stand-ins --> pid 1 --> ranks

It ends with the cell: the driver closes its stdin after torchrun (server.serve returns), or kills it (launch.py
kill_run); the end of pid 1 ends every process of the cell's PID namespace, a double-forked daemon included.

    python -m harness.processes.stand_in --module harness.processes.cell_parent POLICY.json SOCKET

Standard library only (the driver imports CellParent; the module runs in a child of the preloaded parent).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading

from harness.processes import sandbox, wire

MODULE = "harness.processes.cell_parent"
_READY_TIMEOUT_S = 60
PID_FILE = "pid"


class CellParent:
    """The driver's handle: started for a cell's policy through the preloaded parent at parent_socket."""

    def __init__(self, policy: sandbox.Policy, parent_socket: str, log_path: str):
        # A short directory of its own (a unix socket's path is at most 107 bytes; a run directory's can be longer),
        # given to the cell (writable in its policy) and nothing else.
        self.dir = tempfile.mkdtemp(prefix="harness-cell-")
        sandbox.give_to_cell(self.dir)
        self.socket = os.path.join(self.dir, "s")
        policy.writable.append(self.dir)
        policy_file = policy.write()
        from harness.processes.client import STAND_IN

        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", STAND_IN, "--module", MODULE, str(policy_file), self.socket],
                # The cell's environment, not the driver's: what this process is given stays in its memory, which
                # the cell's processes inherit.
                env=dict(policy.env, **{wire.SOCKET: parent_socket}),
                cwd=policy.cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self.pid = self.proc.pid
        self.ready = self._await_ready()
        # Read once, before the cell runs anything: the directory is the cell's to write.
        self.outer_pid = self._read_pid() if self.ready else None

    def _await_ready(self) -> bool:
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(_READY_TIMEOUT_S)
        return bool(line) and line[0].strip() == b"ready"

    def forked_pid(self) -> int | None:
        """The preloaded parent's child this is (it wrote its pid before it entered the sandbox)."""
        return self.outer_pid

    def _read_pid(self) -> int | None:
        try:
            return int(open(os.path.join(self.dir, PID_FILE)).read())
        except (OSError, ValueError):
            return None

    def close(self):
        """Its stdin closed (pid 1 stops serving and ends, and the cell with it), then waited for; killed where it
        does not end."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError, ValueError):
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def main(argv: list[str]):
    from harness.processes import server
    from harness.processes.sandbox_exec import enter_or_exit

    policy_file, socket_path = argv
    with open(os.path.join(os.path.dirname(socket_path), PID_FILE), "w") as f:
        f.write(str(os.getpid()))  # as the driver sees it: outside the cell's PID namespace
    enter_or_exit(sandbox.Policy.read(policy_file))  # from here on, pid 1 of the cell
    server.serve(socket_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
