"""`--ray` for real: a local Ray cluster (a head of 2 CPUs this module starts in a temp dir, its own worker
processes) runs cells through `python -m harness verify --ray ...` as a user runs it. The table and every computed
number equal the local runner's; a worker killed mid-cell is an `error` record naming it, and what it left is killed;
Ctrl-C cancels every task, exits 130 and leaves no process of the run. Marked `ray` (`-m "not ray"` deselects):
the cluster alone takes about 10 s to start. Without --ray the CLI never imports ray (last test, no cluster)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from harness.paths import ROOT
from harness.records.results import Record

# The head: ray.init with 2 CPUs, its session under a short temp dir (Ray's socket paths must stay short); it
# prints its address, and shuts down (every Ray process it started, by pid) when its stdin closes.
_HEAD = """
import sys, ray
ray.init(num_cpus=2, _temp_dir=sys.argv[1], include_dashboard=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
ray.shutdown()
"""
_RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


class Cluster:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="hr-", dir="/tmp"))
        self.node_cache = self.dir / "node-cache"
        self.head = subprocess.Popen(
            [sys.executable, "-c", _HEAD, str(self.dir / "ray")],
            cwd=self.dir,
            env={**os.environ, **_RAY_ENV},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.address = self.head.stdout.readline().strip()
        assert self.address, "the Ray head did not start"
        self.raylet = next(p for p in psutil.Process(self.head.pid).children(recursive=True) if "raylet" in p.name())

    def env(self, **more) -> dict:
        return {**_RAY_ENV, "HARNESS_RAY_NODE_CACHE": str(self.node_cache), **more}

    def run_processes(self) -> list[psutil.Process]:
        """This cluster's processes of a run, wherever they are on this host: every harness process whose command
        line names this cluster's directory (its node cache: torchrun's and the ranks' stand-ins, a sandboxed cell's
        own parent; its Ray session, where the workers' preloaded parents run from: those parents and every process
        they fork). A sandboxed cell's processes are in PID namespaces of their own (docs/SANDBOX.md), which this
        host's /proc still lists; found by name, not below the raylet, so one that left that tree still counts."""
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            line = " ".join(proc.info["cmdline"] or [])
            if "harness" in line and str(self.dir) in line and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        return found

    def cells_in_flight(self, processes: list[psutil.Process]) -> list[psutil.Process]:
        """Of processes, the torchrun stand-ins of this cluster's cells (the Ray worker starts one per cell, forked
        or sandboxed, and it lives as long as the cell's torchrun does)."""
        found = []
        for proc in processes:
            try:
                line = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            if "torchrun" in line and str(self.node_cache) in line:
                found.append(proc)
        return found

    def close(self):
        self.head.stdin.close()
        self.head.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    started = Cluster()
    yield started
    started.close()
    assert not started.raylet.is_running(), "the Ray head left its raylet behind"


def _alive(procs) -> list[int]:
    return [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _ray_workers(procs) -> list[psutil.Process]:
    """The Ray workers among procs' parents (those that ran the cells' tasks)."""
    workers = {}
    for proc in procs:
        try:
            parent = proc.parent()
            if parent is not None and "ray" in " ".join(parent.cmdline()):
                workers[parent.pid] = parent
        except psutil.Error:
            pass
    return list(workers.values())


def _wait_gone(procs, timeout=20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while _alive(procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alive(procs)


def _comparable(record: dict, node_cache: Path | None = None) -> dict:
    """A record without what differs between two honest runs: timings and the ranks' peak resident memory
    (measured, not computed: it moves by a few hundred KiB between two runs of one host), where the files are (the
    run directory, and any path inside it: the seeded model rank 0 writes there under a fresh temporary name, which
    verl's config objects name), the node's name (a node's cache read as this checkout's), the reuse key, which
    only a record of this host's runs carries (run/ray_executor.py: the inputs digest is this host's environment,
    not the node's), and the MAC its writer signed it with (records/signing.py: a key of each checkout's own)."""
    text = json.dumps(record)
    if node_cache is not None:
        text = text.replace(str(node_cache), str(ROOT / ".cache"))
    data = json.loads(text)
    run_dir = f"{ROOT / data['run_dir']}/"  # a local record's is shown relative to the checkout

    def strip(value):
        if isinstance(value, dict):
            return {
                k: strip(v)
                for k, v in value.items()
                if not (k.endswith(("_s", "_ms")) or k in ("traceback_tail", "run_dir", "rank_logs", "node"))
                and k not in ("finished_at", "step_time", "reuse_key", "mac", "peak_rss_bytes")
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        if isinstance(value, str) and value.startswith(run_dir):
            return "a path in the run directory"
        return value

    return strip(data)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _table(stdout: str) -> list[str]:
    """verify's output less the lines that name this run's files (its picture's too, in its results dir)."""
    named = ("records:", "rank logs:", "whole", "picture:")
    return [line for line in stdout.splitlines() if not line.lstrip().startswith(named)]


@pytest.mark.ray
def test_verify_on_ray_gives_the_local_table_and_numbers(cluster, launching_cli, tmp_path):
    scenarios = ["--scenario", "fsdp2-multigpu", "--scenario", "fsdp2-1gpu"]
    local = launching_cli("verify", *scenarios)
    ray_cli = type(launching_cli)(tmp_path / "ray-results")  # a results dir of its own
    on_ray = ray_cli("verify", "--ray", "auto", *scenarios, env=cluster.env(RAY_ADDRESS=cluster.address))
    assert on_ray.returncode == local.returncode == 1, on_ray.stderr  # upstream leaves fsdp2-multigpu broken
    assert _table(on_ray.stdout) == _table(local.stdout)
    [local_file] = launching_cli.results_files("verify")
    [ray_file] = ray_cli.results_files("verify")
    local_records, ray_records = _records(local_file), _records(ray_file)
    assert len(ray_records) == len(local_records) == 4
    by_cell = {(r["scenario"], r["arm"]): r for r in local_records}
    for record in ray_records:
        assert record["node"] and record["run_dir"].startswith(str(cluster.node_cache)), record["run_dir"]
        here = by_cell[(record["scenario"], record["arm"])]
        assert "node" not in here
        assert record["measures"]["peak_rss_bytes"] > 0 and here["measures"]["peak_rss_bytes"] > 0  # measured
        # every number bit for bit: CPU runs are deterministic here
        assert _comparable(record, cluster.node_cache) == _comparable(here)
        assert Path(record["run_dir"], "torchrun.log").is_file()  # the rank logs, on the node (this host)
    progress = [line for line in on_ray.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 4 and all(f" on {ray_records[0]['node']}" in line for line in progress), on_ray.stderr


@pytest.mark.ray
def test_a_worker_killed_mid_cell_is_an_error_record_naming_it(cluster, harness_cli):
    proc = harness_cli.start("verify", "--ray", cluster.address, "--scenario", "fsdp2-multigpu", env=cluster.env())
    # Its two cells take both CPUs each, so they run one after the other: the second is killed once the first is
    # recorded.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        written = harness_cli.results_files("verify")
        if written and written[0].read_text().count("\n") >= 1:
            break
        time.sleep(0.2)
    [results] = harness_cli.results_files("verify")
    first = results.read_text()
    worker = None
    while worker is None and time.monotonic() < deadline and proc.poll() is None:
        for p in cluster.run_processes():
            try:
                line = " ".join(p.cmdline())
                if "torchrun" in line and str(cluster.node_cache) in line:
                    worker = p.parent()  # the Ray worker whose task launched it
                    break
            except psutil.Error:
                pass
        time.sleep(0.1)
    assert worker is not None, "no cell started on the cluster"
    left = [p for p in cluster.run_processes() if p.pid != worker.pid]
    worker.kill()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err  # verify: an error counts against the arm
    records = [Record.model_validate(r) for r in _records(results)]
    assert len(records) == 2 and results.read_text().startswith(first)  # the finished cell's record is kept
    assert records[0].outcome in ("mismatch", "error") and records[0].node  # as expected for upstream / none
    lost = records[1]
    assert lost.verdict.error and lost.verdict.error.type == "RayTaskLost", lost
    assert lost.outcome == "error" and lost.node
    assert f"on node {lost.node} (Ray worker pid {worker.pid})" in lost.verdict.error.message, (
        lost.verdict.error.message
    )
    assert "WorkerCrashedError" in lost.verdict.error.message
    assert not _wait_gone([p for p in left if p.is_running()]), "the killed worker's torchrun or ranks live on"


@pytest.mark.ray
def test_ctrl_c_cancels_every_task_exits_130_and_leaves_no_process(cluster, harness_cli):
    proc = harness_cli.start(
        "verify",
        "--ray",
        cluster.address,
        "--scenario",
        "fsdp2-multigpu",
        "--scenario",
        "fsdp2-1gpu",
        env=cluster.env(),
        start_new_session=True,
    )
    # Ctrl-C once a cell is recorded and another's torchrun runs, while one more is still to finish (a signal
    # that came after the last cell ended would find nothing to cancel). Not "once any run process is up": the
    # workers' preloaded parents stay up between cells, and a sandboxed cell's own parent outlives its torchrun.
    deadline, in_flight, cells = time.monotonic() + 300, [], []
    while time.monotonic() < deadline and proc.poll() is None:
        written = harness_cli.results_files("verify")
        recorded = written[0].read_text().count("\n") if written else 0
        if recorded >= 3:
            break
        if recorded:
            in_flight = cluster.run_processes()
            cells = cluster.cells_in_flight(in_flight)
            if cells:
                break
        time.sleep(0.05)
    assert cells, "expected a cell in flight"
    in_flight += psutil.Process(proc.pid).children(recursive=True)
    workers = _ray_workers(in_flight)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the CLI's group (the Ray workers are not in it)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=120)
    took = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    [results] = harness_cli.results_files("verify")
    records = [Record.model_validate_json(line) for line in results.read_text().splitlines()]  # every line whole
    assert f"interrupted: {len(records)} of 4 runs recorded in {results}" in err, err
    assert 1 <= len(records) < 4
    assert took < 60, f"took {took:.1f}s to stop"
    assert not _wait_gone(in_flight + workers), "processes of the run left behind"
    assert not cluster.run_processes()


def test_an_address_where_no_cluster_answers_is_one_line(harness_cli):
    done = harness_cli("verify", "--ray", "127.0.0.1:1", "--scenario", "fsdp2-1gpu", timeout=120, env=_RAY_ENV)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    [line] = lines
    assert line.startswith("error: --ray 127.0.0.1:1: cannot join a Ray cluster there: nothing answers at "), line
    assert not harness_cli.results_files("verify")


def test_without_ray_the_cli_never_imports_it(tmp_path):
    """A whole verify of one cell with ray made unimportable in the CLI's process (the ranks import verl, which
    imports ray, in processes of their own: here this pytest process's preloaded parent forks them, as
    launching_cli's do, since the subject is the CLI's own imports, not its parent's start)."""
    from harness.processes import client
    from harness.rank.environment import rank_environment

    code = (
        "import sys\nsys.modules['ray'] = None\nfrom harness.cli import main\n"
        "raise SystemExit(main(['verify', '--alone', '--scenario', 'fsdp2-1gpu']))"
    )
    shared = client.shared_with_children(rank_environment(None))
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HARNESS_RESULTS_DIR": str(tmp_path), **shared},
    )
    assert done.returncode == 0, done.stderr
    assert "verdict: upstream passes all 1 scenario(s)" in done.stdout
