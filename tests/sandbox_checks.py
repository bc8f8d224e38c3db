"""What the sandbox's tests share (tests/unit/processes/test_sandbox.py, tests/distributed/test_sandboxed_cell.py):
the host a malicious pull request's payload (tests/fixtures/sandbox_attacks.py) attacks, its params, and the check
that each attack was contained. tests/ is on sys.path (its conftest)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from harness.paths import CACHE_DIR, ROOT
from harness.processes import client, sandbox

FIXTURE = ROOT / "tests" / "fixtures" / "sandbox_attacks.py"
SECRETS = {  # distinctive values: the payload looks for them in its memory's environment block too
    name: f"sandbox-test-secret-{name.lower()}"
    for name in ("GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "ACTIONS_RUNTIME_TOKEN", "RUNNER_TEMP", "HF_TOKEN")
}
SECRETS |= {
    "HARNESS_PRELOAD_SOCKET": "/tmp/harness-preload-x/s",
    "HARNESS_PRELOAD_LENT": "k 1 /tmp/harness-preload-x/s",
}


@contextlib.contextmanager
def outside_world(tmp_path: Path):
    """What lies outside a cell: a secret file, a unix socket where the preloaded parents' are, a TCP port on the
    host's loopback, a process to kill; removed after."""
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    (tmp_path / "home" / ".ssh" / "id").write_text("PRIVATE KEY")
    socket_dir = tempfile.mkdtemp(prefix="harness-preload-", dir=client._socket_base())
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(os.path.join(socket_dir, "s"))
    unix.listen(1)
    tcp = socket.create_server(("127.0.0.1", 0))
    victim = subprocess.Popen(["sleep", "60"])
    try:
        yield types.SimpleNamespace(home=tmp_path / "home", socket=unix.getsockname(), port=tcp.getsockname()[1],
                                    victim=victim)  # fmt: skip
    finally:
        victim.kill()
        victim.wait()
        unix.close()
        tcp.close()
        os.unlink(os.path.join(socket_dir, "s"))
        os.rmdir(socket_dir)


def attack_params(outside, run_dir: Path, results: Path) -> dict:
    """The fixture's params: everything a PR's code reached in issue 71, as paths of this host."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    targets = [outside.home / "evil", results / "evil.jsonl", ROOT / "evil-sandbox", ROOT / "harness" / "evil.py",
               Path(site) / "evil-sandbox.pth", CACHE_DIR / "arms" / "evil", CACHE_DIR / "verl-trees" / "evil",
               Path(os.path.expanduser("~")) / "evil-sandbox",
               run_dir.parent / "oracle-0123456789abcdef.pt"]  # fmt: skip  # the command's shared oracle
    return {
        "secret_names": sorted(SECRETS),
        "secret_values": sorted(SECRETS.values()),
        "secret_file": str(outside.home / ".ssh" / "id"),
        "write_targets": [str(t) for t in targets],
        "socket": outside.socket,
        "outside_host": "127.0.0.1",
        "outside_port": outside.port,
        "victim_pid": outside.victim.pid,
        "forks": sandbox.NPROC * 2,
        "alloc_gib": sandbox.AS_CEILING // (1 << 30) * 2,
        "daemon_file": str(run_dir / "daemon.txt"),
        "daemon_delay_s": 0.3,
    }


def assert_contained(found: dict, params: dict, outside):
    """Each attack of issue 71 contained."""
    try:
        # The cell's own parent's socket may be named (harness-cell-*: inside the cell); no secret, and never the
        # preloaded parent's (harness-preload-*).
        leaked = {n: v for n, v in found["secrets"].items() if v == SECRETS.get(n) or "harness-preload-" in v}
        assert not leaked, leaked
        assert found["environ_in_memory"] == []
        assert found["read_secret_file"].startswith("refused")
        # On the host, where it matters: a checkout in /tmp has the cell's writes land in the cell's own /tmp.
        assert not [target for target in params["write_targets"] if os.path.exists(target)], found["wrote"]
        assert not [target for target in found["wrote"] if not target.startswith(("/tmp/", "/dev/shm/"))]
        assert found["outer_socket"].startswith("refused")
        assert found["outside_network"].startswith("refused")
        assert not found["victim_environ"] or found["victim_environ"].startswith("refused")
        assert found["signal_victim"].startswith("refused") and outside.victim.poll() is None
        assert 0 < found["forks"] < params["forks"]
        assert found["memory"] == "refused: MemoryError"
        time.sleep(params["daemon_delay_s"] + 0.5)
        assert not os.path.exists(params["daemon_file"]), "the daemon outlived its cell"
    finally:
        for target in params["write_targets"]:
            if target.endswith(("evil", "evil.jsonl", "evil-sandbox", "evil.py", "evil-sandbox.pth", "cdef.pt")):
                Path(target).unlink(missing_ok=True)
