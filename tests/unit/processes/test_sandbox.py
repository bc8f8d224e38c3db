"""The OS sandbox a cell whose code is not the installed verl runs in (harness/processes/sandbox.py, confine.py,
sandbox_exec.py; docs/SANDBOX.md): its environment allowlist, its policy, the refusal where it cannot be made, and
each attack of issue 71 tried from inside one (tests/fixtures/sandbox_attacks.py) in a small interpreter, no
torchrun."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

from harness.errors import EXIT_NOT_JUDGED, UsageError
from harness.launch import sandboxing
from harness.paths import CACHE_DIR, ROOT
from harness.processes import client, sandbox, tree

pytestmark = pytest.mark.unit

FIXTURE = ROOT / "tests" / "fixtures" / "sandbox_attacks.py"
SECRETS = {
    "GITHUB_TOKEN": "ghp_x",
    "AWS_SECRET_ACCESS_KEY": "x",
    "ACTIONS_RUNTIME_TOKEN": "x",
    "RUNNER_TEMP": "/home/runner/work/_temp",
    "HF_TOKEN": "x",
    "HARNESS_PRELOAD_SOCKET": "/tmp/harness-preload-x/s",
    "HARNESS_PRELOAD_LENT": "k 1 /tmp/harness-preload-x/s",
}


def test_the_environment_is_an_allowlist():
    env = dict(SECRETS, PYTHONPATH="/a:/b", OMP_NUM_THREADS="1", HOME="/root", TORCH_LOGS="x", LC_ALL="C")
    allowed = sandbox.allowed_environment(env, "/run/home")
    assert not set(SECRETS) & set(allowed)
    assert allowed["PYTHONPATH"] == "/a:/b" and allowed["OMP_NUM_THREADS"] == "1" and allowed["LC_ALL"] == "C"
    assert allowed["HOME"] == "/run/home" and allowed["TMPDIR"] == "/tmp"


def test_a_policy_reads_the_code_never_the_checkout(tmp_path):
    policy = sandbox.policy_for(tmp_path, None, dict(os.environ), 60, 2)
    again = sandbox.Policy.read(policy.write())
    assert again == policy
    root = os.path.realpath(ROOT)
    for path in policy.read_only:
        real = os.path.realpath(path)
        assert real != root and not root.startswith(real.rstrip("/") + "/"), path
    assert str(ROOT / "harness") in policy.read_only and policy.writable == [str(tmp_path)]
    assert policy.limits["RLIMIT_AS"][0] <= sandbox.AS_CEILING and policy.limits["RLIMIT_NPROC"][0] == sandbox.NPROC


def test_code_from_outside_needs_the_sandbox_or_the_flag(monkeypatch):
    monkeypatch.setattr(sandbox, "available", lambda: "no user namespaces here")
    monkeypatch.delenv(sandboxing.UNSANDBOXED_ENV, raising=False)
    monkeypatch.delenv("HARNESS_VERL_TREE", raising=False)
    sandboxing.require([None])  # the installed verl: no sandbox needed
    with pytest.raises(UsageError) as refused:
        sandboxing.require([None, Path("/cache/arms/x")])
    assert refused.value.exit_code == EXIT_NOT_JUDGED and "no user namespaces here" in str(refused.value)
    assert "\n" not in str(refused.value)
    monkeypatch.setenv(sandboxing.UNSANDBOXED_ENV, "1")
    sandboxing.require([Path("/cache/arms/x")])
    assert sandboxing.mode(Path("/cache/arms/x")) == "none (--unsandboxed)"
    monkeypatch.delenv(sandboxing.UNSANDBOXED_ENV)
    monkeypatch.setenv("HARNESS_VERL_TREE", "{}")
    assert sandboxing.mode(None) == sandboxing.SANDBOXED


needs_sandbox = pytest.mark.skipif(bool(sandbox.available()), reason=f"no sandbox here: {sandbox.available()}")


@pytest.fixture
def outside(tmp_path):
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
               Path(os.path.expanduser("~")) / "evil-sandbox"]  # fmt: skip
    return {
        "secret_names": sorted(SECRETS),
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
        assert found["secrets"] == []
        assert found["read_secret_file"].startswith("refused")
        assert found["wrote"] == []
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
            if target.endswith(("evil", "evil.jsonl", "evil-sandbox", "evil.py", "evil-sandbox.pth")):
                Path(target).unlink(missing_ok=True)


@needs_sandbox
def test_each_attack_of_a_malicious_pr_is_contained(tmp_path, outside):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = dict(os.environ, **SECRETS, HARNESS_RESULTS_DIR=str(tmp_path / "results"))
    policy = sandbox.policy_for(run_dir, None, env, 30, 1)
    policy.read_only.append(str(FIXTURE))
    params = attack_params(outside, run_dir, tmp_path / "results")
    out = run_dir / "found.json"
    command = [sys.executable, str(FIXTURE), json.dumps(params), str(out)]
    done = subprocess.run(
        [sys.executable, "-m", client.SANDBOX_EXEC, str(policy.write()), "--", *command],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert_contained(json.loads(out.read_text()), params, outside)


@needs_sandbox
def test_the_cell_ends_as_its_command_did(tmp_path):
    policy = sandbox.policy_for(tmp_path, None, dict(os.environ), 30, 1)
    run = [sys.executable, "-m", client.SANDBOX_EXEC, str(policy.write()), "--", sys.executable, "-c"]
    assert subprocess.run([*run, "raise SystemExit(7)"], cwd=ROOT, timeout=60).returncode == 7


@needs_sandbox
def test_nothing_of_the_cell_outlives_its_first_process_killed(tmp_path):
    """The driver's kill path SIGKILLs the process it started (sandbox_exec): every process of the cell ends with
    it, one in a session of its own included (each waits for its parent's end: PR_SET_PDEATHSIG, then the PID
    namespace)."""
    policy = sandbox.policy_for(tmp_path, None, dict(os.environ), 30, 1)
    spawn = "import os, time\nif os.fork() == 0:\n    os.setsid()\nelse:\n    print('up', flush=True)\ntime.sleep(60)"
    run = [sys.executable, "-m", client.SANDBOX_EXEC, str(policy.write()), "--", sys.executable, "-c", spawn]
    proc = subprocess.Popen(run, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    time.sleep(0.2)
    cell = tree.children(proc.pid, recursive=True)
    assert len(cell) >= 3  # the namespaces' maker, pid 1, its child
    proc.kill()
    proc.wait()
    tree.wait_gone(cell)
    assert all(tree.gone(pid) for pid in cell)
