"""The OS sandbox a cell whose code is not the installed verl runs in (harness/processes/sandbox.py, confine.py,
sandbox_exec.py; docs/SANDBOX.md): its environment allowlist, its policy, the refusal where it cannot be made, and
each attack of issue 71 tried from inside one (tests/fixtures/sandbox_attacks.py) in a small interpreter, no
torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_checks import FIXTURE, SECRETS, assert_contained, attack_params, outside_world  # tests/ on sys.path

from harness.errors import EXIT_NOT_JUDGED, UsageError
from harness.launch import sandboxing
from harness.paths import ROOT
from harness.processes import client, sandbox, tree

pytestmark = pytest.mark.unit


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
    with outside_world(tmp_path) as world:
        yield world


@needs_sandbox
def test_each_attack_of_a_malicious_pr_is_contained(tmp_path, outside):
    run_dir = tmp_path / "batch" / "run"
    run_dir.mkdir(parents=True)
    run_dir.parent.chmod(0o755)  # a batch of cells as launch makes it: bound read-only (the shared oracle is there)
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


def test_the_links_a_cell_left_are_removed_before_the_driver_reads(tmp_path):
    """A sandboxed cell's run directory is read by the driver (rank files, logs): a link there to the caller's
    secrets would carry them into the record (launch/run_dir.py unlink_links)."""
    from harness.launch.run_dir import unlink_links

    (tmp_path / "rank-logs").mkdir()
    (tmp_path / "rank0.json").write_text("{}")
    (tmp_path / "torchrun.log").symlink_to("/etc/hostname")
    (tmp_path / "rank-logs" / "escape").symlink_to("/etc", target_is_directory=True)
    unlink_links(tmp_path)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["rank-logs", "rank0.json"]
