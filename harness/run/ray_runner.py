"""The runner on a Ray cluster (`--ray ADDRESS` or `--ray auto`): every cell one Ray task on the node Ray picks.

The task runs the local runner's own pieces there: the arm materialised from its diffs' text (arms.py), one
torchrun with its per-rank files, timeout and crash handling (launch.py), judged where the rank files are
(verdict.py). Only the record travels back; the driver stamps it and appends it to its one results file, as
run_plan does. This module is imported only when --ray is given: without it the driver never imports ray.

What reaches a node: this checkout as Ray's working_dir (the harness code, scenarios, models, patches; not .venv,
.cache, results), the arm's diffs inside the task. What each node must have: the same Python environment (torch,
transformers, verl, ray: constraints.txt). Rank logs stay on the node, under HARNESS_CACHE_DIR there
(HARNESS_RAY_NODE_CACHE here, default ~/.cache/fsdp2-harness); the record names the node and the path.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import uuid

from harness.errors import UsageError
from harness.paths import ROOT
from harness.plan.arms import Arm, materialise, patch_from_text
from harness.records.results import RankError, Record
from harness.records.store import ResultsFile, host_description, invocation_info, package_versions
from harness.run.interrupt import Interrupted, StopOnSignal
from harness.run.runner import (
    STILL_RUNNING_AFTER_S,
    Cell,
    PlanResult,
    progress_line,
    stamp_and_append,
)

NODE_CACHE = "HARNESS_RAY_NODE_CACHE"  # where each node keeps arms and rank logs (its HARNESS_CACHE_DIR)
_DEFAULT_NODE_CACHE = "~/.cache/fsdp2-harness"
# Ray's working_dir honours .gitignore; .venv is a symlink in worktrees, which that pattern does not match.
_NOT_SHIPPED = [".venv", ".cache", "results", ".git", ".whl", ".gl", "__pycache__", "*.pyc"]
_POLL_S = 0.5
_CANCEL_WAIT_S = 20.0  # a cancelled task's launch kills its ranks within seconds; then it is killed outright
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

    try:
        import ray
    except ImportError as exc:
        raise UsageError(f"--ray {flag}: ray is not importable by this Python ({sys.executable}): {exc}") from None

    address = ray_address(flag)
    silent = _answers(address)
    if silent:
        raise UsageError(f"--ray {flag}: cannot join a Ray cluster there: {silent}")
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
    """A Ray actor holding where each cell's task runs (node, node id, worker pid), as each task starts: the
    driver names them in progress lines and in the record of a task whose worker or node died."""

    def __init__(self):
        self.where: dict[int, dict] = {}

    def started(self, index: int, where: dict):
        self.where[index] = where

    def lookup(self) -> dict[int, dict]:
        return dict(self.where)


def run_on_node(board, index: int, cell: Cell, keep_traces: bool, batch_id: str) -> dict:
    """The Ray task: one cell on this node, as run_planned launches and judges it. Ray's cancel (Ctrl-C on the
    driver) raises KeyboardInterrupt here: launch's own STOP then kills the ranks, and nothing is recorded."""
    import ray

    from harness.judge.verdict import judge
    from harness.launch import launch as launch_mod

    where = {"node": node_name(), "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}
    # Not waited for: a task blocked in ray.get lends its CPUs to other tasks, which would then overlap it.
    board.started.remote(index, where)
    stop = launch_mod.STOP
    stop.clear()  # this worker may have run a cancelled task before
    arm = node_arm(cell.arm.name, cell.fingerprint)
    arm_dir = materialise(arm)
    held = [str(g) for g in ray.get_gpu_ids()] if cell.device == "cuda" else []
    done: dict = {}

    def go():
        try:
            done["raw"] = launch_mod.launch(
                cell.scenario, arm.name, arm_dir, keep_traces=keep_traces, batch_id=batch_id, cuda_devices=held
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
        return {"record": None, "where": where}
    if "error" in done:
        raise done["error"]
    raw = done["raw"]
    if raw.interrupted:
        return {"record": None, "where": where}
    record = judge(raw)
    if raw.cuda_devices is not None:
        record.cuda_devices = raw.cuda_devices
    record.node = where["node"]
    return {"record": record, "where": where, "host": host_description(), "versions": package_versions()}


def node_arm(name: str, fingerprint: dict) -> Arm:
    """The arm on the node, from the diffs' text the driver read (checked against their sha256): the same copy
    materialise builds locally, whatever files the node has."""
    where = f"arm {name}"
    patches = tuple(patch_from_text(p["text"], p["sha256"], p["file"], where) for p in fingerprint["patches"])
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
    if where is None:
        place = "before it reported its node"
    else:
        place = f"on node {where['node']} (Ray worker pid {where['pid']})"
    first = (str(exc).strip().splitlines() or [kind])[0]
    if kind in ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OutOfMemoryError"):
        message = f"the Ray task of this cell was lost {place}: {kind}: {first}"
    else:
        message = f"the Ray task of this cell raised {place}: {kind}: {first}"
    record = Record(
        scenario=cell.scenario.name,
        arm=cell.arm.name,
        outcome="error",
        world_size=cell.scenario.ranks,
        device=cell.device,
        error=RankError(type="RayTaskLost", message=message, full_message=str(exc)[-4000:]),
    )
    if where is not None:
        record.node = where["node"]
    return record


def run_plan_on_ray(
    command: str, plan: list[tuple], *, address: str, keep_traces: bool = False, quiet: bool = False
) -> PlanResult:
    """run_plan's contract (records in plan order, one results file, Interrupted on Ctrl-C), each cell a Ray
    task asking for what it needs: num_gpus=ranks on CUDA, num_cpus=ranks on CPU. Ray decides how many run at
    once."""
    from harness.run.runner import planned_cells

    for arm in {arm.name: arm for _, arm in plan}.values():
        materialise(arm)  # a diff that does not apply stops us here, before the cluster is joined
    ray = connect(address)
    run = None
    try:
        cells = planned_cells(plan, cluster_gpus(ray))  # the cluster's largest node, not this host, decides
        run = _RayRun(ray, command, cells, keep_traces, quiet)
        with StopOnSignal() as stop:
            run.submit(stop.stop)
            run.wait(stop.stop)
            if run.pending:
                run.cancel()
        recorded = [r for r in run.records if r is not None]
        if stop.stop.is_set() and len(recorded) < len(plan):
            raise Interrupted(len(recorded), len(plan), run.results.path)
        return PlanResult(run.records, run.results.path, run.lines)
    finally:
        if run is not None:
            run.results.close()
        ray.shutdown()


class _RayRun:
    """One plan's tasks on the cluster, and what has come back of them."""

    def __init__(self, ray, command: str, cells: list[Cell], keep_traces: bool, quiet: bool):
        self.ray, self.cells, self.keep_traces = ray, cells, keep_traces
        # No reuse_key on a node's record: the inputs digest is this host's environment, not the node's.
        self.invocation = {k: v for k, v in invocation_info(command).items() if k != "inputs_sha256"}
        self.results = ResultsFile(command)
        self.batch_id = uuid.uuid4().hex[:8]
        self.records: list = [None] * len(cells)
        self.lines: list = [None] * len(cells)
        self.pending: dict = {}  # ObjectRef -> the cell's index
        self.board = ray.remote(Board).options(num_cpus=0).remote()
        self.say = (lambda line: None) if quiet else (lambda line: print(line, file=sys.stderr, flush=True))

    def keep(self, i: int, record: Record, node_facts: dict | None = None):
        """Stamp and append a record as run_planned does (host and versions: the node's own), say so."""
        invocation = dict(self.invocation, **(node_facts or {}))
        self.lines[i] = stamp_and_append(record, self.cells[i], results=self.results, invocation=invocation)
        self.records[i] = record
        done = sum(r is not None for r in self.records)
        node = f"  on {record.node}" if record.node else ""
        self.say(progress_line(done, len(self.cells), record) + node)

    def submit(self, stop: threading.Event):
        from harness.judge.verdict import judge
        from harness.launch.launch import RawRun

        task = self.ray.remote(run_on_node)
        for i, cell in enumerate(self.cells):
            if stop.is_set():
                return
            ranks = cell.scenario.ranks
            if cell.skip:
                skipped = RawRun(cell.scenario, cell.arm.name, cell.device, ranks, None, skipped_reason=cell.skip)
                self.keep(i, judge(skipped))
                continue
            need = {"num_gpus": ranks} if cell.device == "cuda" else {"num_cpus": ranks}
            # Never retried: a cell run twice after a lost worker would hide the loss.
            ref = task.options(max_retries=0, **need).remote(self.board, i, cell, self.keep_traces, self.batch_id)
            self.pending[ref] = i

    def wait(self, stop: threading.Event):
        last = time.monotonic()
        while self.pending and not stop.is_set():
            ready, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=_POLL_S)
            for ref in ready:
                self.collect(ref, self.pending.pop(ref))
                last = time.monotonic()
            if not ready and time.monotonic() - last > STILL_RUNNING_AFTER_S:
                self.say("  still running: " + self.running())
                last = time.monotonic()

    def cancel(self):
        """Ctrl-C: every task cancelled (a running one's launch kills its ranks); what finished meanwhile kept."""
        ray = self.ray
        for ref in self.pending:
            ray.cancel(ref)
        ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=_CANCEL_WAIT_S)
        for ref in ready:
            i = self.pending.pop(ref)
            try:
                outcome = ray.get(ref)
            except ray.exceptions.RayError:
                continue  # cancelled before or while it ran: nothing to record
            if outcome["record"] is not None:
                self.keep(i, outcome["record"], _facts(outcome))
        for ref in self.pending:
            ray.cancel(ref, force=True)

    def collect(self, ref, i: int):
        """One finished task: its record kept; a lost one recorded as an error naming its node, its leftovers
        killed on that node when the node is still there."""
        ray, cell = self.ray, self.cells[i]
        try:
            outcome = ray.get(ref)
        except ray.exceptions.RayError as exc:
            where = ray.get(self.board.lookup.remote()).get(i)
            if where is not None and not isinstance(exc, ray.exceptions.NodeDiedError):
                _clean(ray, where, self.batch_id, f"{cell.scenario.name}__{cell.arm.name}")
            self.keep(i, lost_record(cell, exc, where))
            return
        if outcome["record"] is not None:
            self.keep(i, outcome["record"], _facts(outcome))

    def running(self) -> str:
        where = self.ray.get(self.board.lookup.remote())
        started = [i for i in self.pending.values() if i in where]
        names = [f"{self.cells[i].scenario.name} x {self.cells[i].arm.name} on {where[i]['node']}" for i in started]
        return ", ".join(names) or f"{len(self.pending)} task(s) waiting for the cluster's resources"


def _facts(outcome: dict) -> dict:
    return {k: outcome[k] for k in ("host", "versions") if k in outcome}


def _clean(ray, where: dict, batch_id: str, run_name: str):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    on_node = NodeAffinitySchedulingStrategy(where["node_id"], soft=False)
    cleaner = ray.remote(kill_leftovers).options(num_cpus=0, max_retries=0, scheduling_strategy=on_node)
    try:
        ray.get(cleaner.remote(batch_id, run_name), timeout=60)
    except ray.exceptions.RayError:
        pass  # the node went too: nothing of the run is left there to kill
