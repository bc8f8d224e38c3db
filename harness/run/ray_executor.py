"""The Ray executor (`--ray ADDRESS` or `--ray auto`): every cell of run_plan one Ray task on the node Ray picks.

The task runs there what a local cell runs (executors.launch_and_judge): the arm materialised from its diffs' text
(arms.py), one torchrun with its per-rank files, timeout and crash handling (launch.py), judged where the rank
files are (verdict.py). Only the record travels back; the runner stamps it and appends it to its one results file,
as for a local cell. This module is imported only when --ray is given: without it the driver never imports ray.

What reaches a node: this checkout as Ray's working_dir (the harness code, scenarios, models, patches; not .venv,
.cache, results), the arm's diffs inside the task. What each node must have: the same Python environment (torch,
transformers, verl, ray: constraints.txt). Rank logs stay on the node, under HARNESS_CACHE_DIR there
(HARNESS_RAY_NODE_CACHE here, default ~/.cache/fsdp2-harness); the record names the node and the path.

The executor is RayExecutor; it runs the same launch and judge as LocalPool.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from concurrent.futures import Future

from harness.errors import UsageError
from harness.paths import ROOT
from harness.plan.arms import Arm, materialise, patch_from_text
from harness.records.measures import ArmFingerprint
from harness.records.results import RankError, Record, Verdict
from harness.records.store import host_description, package_versions
from harness.run.executors import Cell, Job, Ran, launch_and_judge, planned_cells

NODE_CACHE = "HARNESS_RAY_NODE_CACHE"  # where each node keeps arms and rank logs (its HARNESS_CACHE_DIR)
_DEFAULT_NODE_CACHE = "~/.cache/fsdp2-harness"
# Ray's working_dir honours .gitignore; .venv is a symlink in worktrees, which that pattern does not match.
_NOT_SHIPPED = [".venv", ".cache", "results", ".git", ".whl", ".gl", "__pycache__", "*.pyc"]
_CANCEL_WAIT_S = 20.0  # a cancelled task's launch kills its ranks within seconds; then it is killed outright
# No reuse_key on a node's record: the inputs digest is this host's environment, not the node's.
_NOT_THIS_HOST = {"inputs_sha256": None}
# The driver's settings a node's launch must see too (the rest of its environment is the node's own).
_FORWARDED = ("HARNESS_PRELOAD", "OMP_NUM_THREADS")


def ray_address(flag: str) -> str:
    """--ray's value as ray.init takes it: `auto` finds a running cluster (RAY_ADDRESS, or this host's head)."""
    return flag if flag != "auto" else os.environ.get("RAY_ADDRESS") or "auto"


def _answers(address: str, timeout_s: float = 5.0) -> str | None:
    """None if HOST:PORT accepts a connection, else why not. ray.init retries an address that answers nothing
    for minutes, line after line; `auto` and other forms are left to ray.init."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        return f"nothing answers at {host}:{port} ({exc.strerror or type(exc).__name__})"
    return None


def connect(flag: str):
    """Join the cluster (never start one: ray.init without an address would). One line and exit 2 if none."""
    import logging

    # Asked before ray is imported: an address nothing answers at is one line at once, without ray's import (and
    # what its import prints: urllib3's warning about SOCKS support, on some starts).
    address = ray_address(flag)
    silent = _answers(address)
    if silent:
        raise UsageError(f"--ray {flag}: cannot join a Ray cluster there: {silent}")
    try:
        import ray
    except ImportError as exc:
        raise UsageError(f"--ray {flag}: ray is not importable by this Python ({sys.executable}): {exc}") from None
    env_vars = {"HARNESS_CACHE_DIR": os.environ.get(NODE_CACHE) or _DEFAULT_NODE_CACHE, "PYTHONUNBUFFERED": "1"}
    env_vars.update({name: os.environ[name] for name in _FORWARDED if name in os.environ})
    env_vars.setdefault("OMP_NUM_THREADS", "1")  # Ray would set it to the task's CPUs; the ranks use 1, as here
    try:
        ray.init(
            address=address,
            runtime_env={"working_dir": str(ROOT), "excludes": _NOT_SHIPPED, "env_vars": env_vars},
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"--ray {flag}: cannot join a Ray cluster there: {first}") from None
    return ray


def cluster_gpus(ray) -> int:
    """The most GPUs any live node has: a CUDA cell runs on one node, so that is what planning may count on."""
    return int(max((n["Resources"].get("GPU", 0) for n in ray.nodes() if n.get("Alive")), default=0))


def node_name() -> str:
    import ray

    return f"{socket.gethostname()} ({ray.util.get_node_ip_address()})"


class Board:
    """A Ray actor holding where each cell's task runs (node, node id, worker pid, when it began: time.time()), as
    each task starts: the driver names them in progress lines and in the record of a task whose worker or node
    died."""

    def __init__(self):
        self.where: dict[int, dict] = {}

    def started(self, index: int, where: dict):
        self.where[index] = where

    def lookup(self) -> dict[int, dict]:
        return dict(self.where)


def run_on_node(board, index: int, cell: Cell, keep_traces: bool, batch_id: str) -> Ran | None:
    """The Ray task: one cell on this node, launched and judged as on the driver's host. Ray's cancel (Ctrl-C on
    the driver) raises KeyboardInterrupt here: launch's own STOP then kills the ranks, and nothing is recorded."""
    import ray

    from harness.launch import launch as launch_mod

    where = {"node": node_name(), "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}
    # Not waited for: a task blocked in ray.get lends its CPUs to other tasks, which would then overlap it.
    board.started.remote(index, {**where, "at": time.time()})
    stop = launch_mod.STOP
    stop.clear()  # this worker may have run a cancelled task before
    arm_dir = materialise(node_arm(cell.arm.name, cell.fingerprint))
    held = [str(g) for g in ray.get_gpu_ids()] if cell.device == "cuda" else []
    done: dict = {}

    def go():
        try:
            done["record"] = launch_and_judge(
                cell, arm_dir, keep_traces=keep_traces, batch_id=batch_id, cuda_devices=held
            )
        except BaseException as exc:  # noqa: BLE001 - raised again in the task's thread, for Ray to report
            done["error"] = exc

    thread = threading.Thread(target=go, name=f"cell-{index}")
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    except KeyboardInterrupt:
        stop.set()
        thread.join()
        return None
    if "error" in done:
        raise done["error"]
    record = done["record"]
    if record is None:
        return None
    record.node = where["node"]
    return Ran(record, {"host": host_description(), "versions": package_versions(), **_NOT_THIS_HOST})


def node_arm(name: str, fingerprint: ArmFingerprint) -> Arm:
    """The arm on the node, from the diffs' text the driver read (checked against their sha256): the same copy
    materialise builds locally, whatever files the node has."""
    where = f"arm {name}"
    patches = tuple(patch_from_text(p.text, p.sha256, p.file, where) for p in fingerprint.patches)
    return Arm(name, patches)


def kill_leftovers(batch_id: str, run_name: str) -> list[int]:
    """On the node of a worker that died mid-cell: the processes its launch left (torchrun, the ranks) are killed,
    found from their run directories' pid files and command lines. Only processes of this harness are touched."""
    import psutil

    from harness.launch import launch as launch_mod
    from harness.launch import run_dir as run_files

    pids: set[int] = set()
    run_dirs = sorted((launch_mod.RUNS_DIR / batch_id).glob(f"{run_name}*"))
    for run_dir in run_dirs:
        pids.update(list(run_files.rank_pids(run_dir).values()) + run_files.launcher_pid(run_dir))
    for proc in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if any(str(d) in line for d in run_dirs):
            pids.add(proc.info["pid"])
    found = set()
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if "harness" in " ".join(proc.cmdline()):
                found.add(proc)
                found.update(proc.children(recursive=True))
        except psutil.Error:
            pass
    for proc in found:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(list(found), timeout=10)
    return sorted(p.pid for p in found)


def lost_record(cell: Cell, exc: Exception, where: dict | None) -> Record:
    """The record of a cell whose task did not come back: its worker or node died, or the task raised."""
    kind = type(exc).__name__
    place = f"on node {where['node']} (Ray worker pid {where['pid']})" if where else "before it reported its node"
    first = (str(exc).strip().splitlines() or [kind])[0]
    lost = kind in ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OutOfMemoryError")
    message = f"the Ray task of this cell {'was lost' if lost else 'raised'} {place}: {kind}: {first}"
    record = Record(
        scenario=cell.scenario.name,
        arm=cell.arm.name,
        outcome="error",
        world_size=cell.scenario.ranks,
        device=cell.device,
        verdict=Verdict(error=RankError(type="RayTaskLost", message=message, full_message=str(exc)[-4000:])),
    )
    if where is not None:
        record.node = where["node"]
    return record


class RayExecutor:
    """Each cell a Ray task asking for what it needs: num_gpus=ranks on CUDA, num_cpus=ranks on CPU. Ray picks the
    node and decides how many run at once (so no estimate: jobs is None). A task is never retried: a cell run twice
    after a lost worker would hide the loss."""

    jobs = None

    def __init__(self, address: str):
        self.address = address
        self.ray = None
        self.refs: dict[int, object] = {}  # plan index -> its task's ObjectRef
        self.cancelled = False

    def plan(self, pairs: list[tuple]) -> list[Cell]:
        """Joins the cluster (after run_plan materialised every arm: a diff that does not apply stops us before);
        the cluster's largest node, not this host, decides which cells can run."""
        self.ray = ray = connect(self.address)
        self.board = ray.remote(Board).options(num_cpus=0).remote()
        self.task = ray.remote(run_on_node)
        return planned_cells(pairs, cluster_gpus(ray))

    def submit(self, job: Job) -> Future:
        cell = job.cell
        if cell.skip:  # judged here, as nothing runs: no task asks for what this host cannot give
            future = Future()
            future.set_result(Ran(launch_and_judge(cell, None), dict(_NOT_THIS_HOST)))
            return future
        need = {"num_gpus": cell.scenario.ranks} if cell.device == "cuda" else {"num_cpus": cell.scenario.ranks}
        ref = self.task.options(max_retries=0, **need).remote(
            self.board, job.index, cell, job.keep_traces, job.batch_id
        )
        self.refs[job.index] = ref
        return ref.future()

    def outcome(self, job: Job, future: Future) -> Ran | None:
        """A finished task's Ran; a lost one's an error record naming its node, its leftovers killed on that node
        when the node is still there; a cancelled one's nothing."""
        ray = self.ray
        try:
            return future.result()
        except ray.exceptions.RayError as exc:
            if self.cancelled:
                return None
            where = ray.get(self.board.lookup.remote()).get(job.index)
            if where is not None and not isinstance(exc, ray.exceptions.NodeDiedError):
                _clean(ray, where, job.batch_id, f"{job.cell.scenario.name}__{job.cell.arm.name}")
            return Ran(lost_record(job.cell, exc, where), dict(_NOT_THIS_HOST))

    def running(self) -> dict[int, tuple[float, str]]:
        now, wall = time.monotonic(), time.time()
        where = self.ray.get(self.board.lookup.remote())
        return {i: (now - max(0.0, wall - w["at"]), w["node"]) for i, w in where.items()}

    def cancel(self, jobs: list[Job]):
        """Ctrl-C: every task cancelled (a running one's launch kills its ranks), those still running after
        _CANCEL_WAIT_S killed outright; what finished meanwhile the runner still keeps."""
        ray, self.cancelled = self.ray, True
        refs = [self.refs[j.index] for j in jobs if j.index in self.refs]
        for ref in refs:
            ray.cancel(ref)
        if refs:
            _, stuck = ray.wait(refs, num_returns=len(refs), timeout=_CANCEL_WAIT_S)
            for ref in stuck:
                ray.cancel(ref, force=True)

    def close(self):
        if self.ray is not None:
            self.ray.shutdown()


def _clean(ray, where: dict, batch_id: str, run_name: str):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    on_node = NodeAffinitySchedulingStrategy(where["node_id"], soft=False)
    cleaner = ray.remote(kill_leftovers).options(num_cpus=0, max_retries=0, scheduling_strategy=on_node)
    try:
        ray.get(cleaner.remote(batch_id, run_name), timeout=60)
    except ray.exceptions.RayError:
        pass  # the node went too: nothing of the run is left there to kill
