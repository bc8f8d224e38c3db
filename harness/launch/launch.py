"""Start one torchrun per scenario x arm run, enforce its timeout, and collect what each rank wrote.

The launcher never imports verl: the ranks import whichever copy the arm put first on PYTHONPATH.

Per cell: its run directory's `launch.json` (what every rank reads first), torchrun started through processes/, the
timeout, the hung ranks' stacks (rank/stacks.py) before the run is killed, whole. The device a cell runs on is
plan/devices.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from harness.inputs.scenario import Scenario
from harness.launch import run_dir as run_files
from harness.launch import sandboxing
from harness.paths import CACHE_DIR, ROOT
from harness.plan import devices
from harness.processes import client, sandbox, tree
from harness.rank.environment import rank_environment

RUNS_DIR = CACHE_DIR / "runs"
# Set by the runner on Ctrl-C or SIGTERM: every launch in flight kills its run and returns at once.
STOP = threading.Event()
_POLL_S = 0.2


@dataclass
class RawRun:
    """What a launch produced, before it is judged: per-rank results, exit status, timing."""

    scenario: Scenario
    arm_name: str
    device: str
    world_size: int
    run_dir: Path | None  # None: a cell skipped when planned, which never had one
    rank_results: dict = field(default_factory=dict)  # rank -> dict written by the worker
    returncode: int | None = None
    timed_out: bool = False
    skipped_reason: str | None = None
    wall_s: float = 0.0
    log_tail: str = ""
    interrupted: bool = False  # stopped by the user: nothing about the code under test may be concluded
    rank_signals: dict = field(default_factory=dict)  # rank -> signal name, for ranks a signal ended
    rank_start: str = ""  # "fork" (torchrun and its ranks, of the preloaded parent) or "fresh interpreter (why)"
    rank_stacks: dict = field(default_factory=dict)  # rank -> its threads' Python stacks, for a run that hung
    rank_logs: dict = field(default_factory=dict)  # rank -> its own log files (stdout, stderr), beside torchrun.log
    cuda_devices: list | None = None  # the GPUs its ranks were shown (CUDA_VISIBLE_DEVICES), on CUDA only
    sandbox: str = ""  # "sandboxed" (launch/sandboxing.py), or "none (why)"


def _new_run_dir(parent: Path, name: str) -> Path:
    """A directory no other run uses: one batch can run the same scenario x arm more than once (noise-floor's
    seeds share a name), and a reused directory would mix their rank files, even a previous run's results."""
    parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1000):
        run_dir = parent / (f"{name}-{attempt}" if attempt else name)
        try:
            run_dir.mkdir()  # atomic: exactly one caller creates it
            return run_dir
        except FileExistsError:
            continue
    raise FileExistsError(f"{parent}: no free run directory for {name}")


def launch(
    scenario: Scenario,
    arm_name: str,
    arm_dir: Path | None,
    *,
    keep_traces: bool = False,
    batch_id: str | None = None,
    cuda_devices: list[str] | None = None,
) -> RawRun:
    """One torchrun of a cell that can run here (the runner has asked planned_device first). cuda_devices: the
    GPUs its ranks may see, and all that it may count on (None: every one of this process's)."""
    device, skip = devices.planned_device(scenario, None if cuda_devices is None else len(cuda_devices))
    if skip:
        raise ValueError(f"{scenario.name}: launched though it cannot run here ({skip}); plan with planned_device")
    run_dir = _new_run_dir(RUNS_DIR / (batch_id or uuid.uuid4().hex[:8]), f"{scenario.name}__{arm_name}")
    raw = RawRun(scenario, arm_name, device, scenario.ranks, run_dir)
    launch_file = _write_launch_file(scenario, device, run_dir, keep_traces)
    env = devices.cell_environment(rank_environment(arm_dir), cuda_devices)
    if device == "cuda" and cuda_devices is not None:
        raw.cuda_devices = list(cuda_devices)
    raw.sandbox = sandboxing.mode(arm_dir)
    if raw.sandbox == sandboxing.SANDBOXED:
        _run_sandboxed(raw, arm_dir, env, launch_file)
    else:
        launcher, entry, raw.rank_start = _starters(env, run_dir)
        _run_until_done(raw, _torchrun_command(launcher, entry, scenario.ranks, run_dir, launch_file), env)
    _collect(raw)
    return raw


def _run_sandboxed(raw: RawRun, arm_dir: Path | None, env: dict, launch_file: Path):
    """launch's run of a cell in the OS sandbox (launch/sandboxing.py): its own compile cache (a shared writable
    one is a way into the next cell), started forked or fresh, its own parent ended with it, and no link it made
    left for the driver to read through."""
    scenario, run_dir = raw.scenario, raw.run_dir
    env["HARNESS_COMPILE_CACHE"] = str(run_dir / "inductor")
    policy = sandbox.policy_for(run_dir, arm_dir, env, scenario.timeout_s, scenario.ranks, raw.device)
    start = sandboxing.start(
        policy, env, run_dir, str(run_dir / run_files.LAUNCHER_PID), str(run_dir / run_files.FAILURES)
    )
    raw.rank_start = start.rank_start
    cmd = _torchrun_command(start.launcher, start.entry, scenario.ranks, run_dir, launch_file)
    try:
        _run_until_done(raw, cmd, start.env, start.cell_parent)
    finally:
        if start.cell_parent is not None:
            start.cell_parent.close()
    run_files.unlink_links(run_dir)


def _write_launch_file(scenario: Scenario, device: str, run_dir: Path, keep_traces: bool) -> Path:
    """What every rank reads first (rank/worker.py): the scenario, its device and where to write."""
    facts = {
        "scenario": json.loads(scenario.model_dump_json()),
        "device": device,
        "out_dir": str(run_dir),
        # Set explicitly (not the 30-minute default) and no shorter than the run's own timeout: a rank stuck in a
        # collective is a hang, ended by the launcher at timeout_s; a rank that crashes ends the run at once
        # because torchrun stops its peers.
        "collective_timeout_s": scenario.timeout_s,
        "keep_traces": keep_traces,
    }
    launch_file = run_dir / "launch.json"
    launch_file.write_text(json.dumps(facts, indent=1))
    return launch_file


def _starters(env: dict, run_dir: Path) -> tuple[list[str], str, str]:
    """(the command that starts torchrun, the module torchrun starts per rank, how ranks start, for the record).

    torchrun starts every rank. With the server up, torchrun and each rank it starts are stand-ins that have the
    server fork the real process with its imports done (harness/processes/: client.starter decides, and puts the
    server's socket into env). Either way torchrun runs inside our wrapper (harness/rank/torchrun.py), which keeps
    its failures as data in the run dir."""
    start = client.starter(env)
    launcher = start.torchrun(str(run_dir / run_files.LAUNCHER_PID), str(run_dir / run_files.FAILURES))
    return launcher, start.rank_entry, start.rank_start


def _torchrun_command(launcher: list[str], entry: str, ranks: int, run_dir: Path, launch_file: Path) -> list[str]:
    # Each rank's stdout and stderr in files of its own (--redirects), and still in torchrun.log (--tee), each line
    # prefixed with its rank.
    return [
        *launcher,
        "--standalone",
        f"--nproc-per-node={ranks}",
        # How often torchrun looks at its ranks: it noticed a finished run up to this late (0.5 s cost a cell
        # about 0.3 s of wall time). 0.1 -> 0.02: from the rank's exit to torchrun's main returning 0.22-0.30 s ->
        # 0.06-0.16 s (direct-1gpu x upstream, 8 cells in one run alternating the two, load 6.2 falling). A look is
        # a poll per rank, ~0.1 ms (cProfile of a forked torchrun: 28 looks in 3 ms): 50 a second cost 0.5 % of a
        # core.
        "--monitor-interval=0.02",
        f"--log-dir={run_dir / run_files.RANK_LOGS}",
        "--redirects=3",
        "--tee=3",
        "-m",
        entry,
        str(launch_file),
    ]


def _run_until_done(raw: RawRun, cmd: list[str], env: dict, cell_parent=None):
    """Run torchrun to its end, or kill it and every rank at the scenario's timeout (a hang: the stuck ranks'
    stacks are asked for first) or on STOP (interrupted); its output goes to torchrun.log."""
    start = time.perf_counter()
    with open(raw.run_dir / "torchrun.log", "wb") as log:
        # A session of its own, so a timeout can kill torchrun and every rank it started, and nothing else.
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        while raw.returncode is None:
            try:
                raw.returncode = proc.wait(timeout=_POLL_S)
            except subprocess.TimeoutExpired:
                if STOP.is_set() or time.perf_counter() - start > raw.scenario.timeout_s:
                    raw.interrupted, raw.timed_out = STOP.is_set(), not STOP.is_set()
                    if raw.timed_out:
                        raw.rank_stacks = _rank_stacks(raw.run_dir, _cell_pids(raw, proc, cell_parent))
                    kill_run(proc, raw.run_dir, _cell_pids(raw, proc, cell_parent))
                    break
    raw.wall_s = round(time.perf_counter() - start, 3)


def _collect(raw: RawRun):
    """What the run left in its directory: each rank's result, the log's tail, the ranks a signal ended, and the
    rank logs."""
    raw.rank_results = run_files.rank_results(raw.run_dir, raw.world_size)
    raw.log_tail = run_files.tail(raw.run_dir / "torchrun.log")
    raw.rank_signals = run_files.rank_signals(raw.run_dir / run_files.FAILURES)
    raw.rank_logs = run_files.collect_rank_logs(raw.run_dir)


_STACKS_WAIT_S = 3.0


def _cell_pids(raw: RawRun, proc: subprocess.Popen, cell_parent) -> dict[int, int] | None:
    """A sandboxed cell's processes, {pid as the cell names it: pid here}, found from the processes it started in
    (psutil: below torchrun's command, and below its own parent where it forks), never from what it wrote in its
    run directory: there the pids are its own namespace's, and its code could name any process of this host. None
    for a cell outside the sandbox."""
    if raw.sandbox != sandboxing.SANDBOXED:
        return None
    found = tree.namespace_pids(proc.pid)
    if cell_parent is not None and cell_parent.forked_pid():  # the preloaded parent's fork: the cell is below it
        found.update(tree.namespace_pids(cell_parent.forked_pid()))
    return found


def _rank_stacks(run_dir: Path, cell_pids: dict[int, int] | None) -> dict[int, str]:
    """Ask every rank still running for its threads' Python stacks (rank/stacks.py: SIGUSR1 -> faulthandler) and
    read what they wrote, waiting a few seconds at most: a rank must not outlive its timeout by much. cell_pids:
    a sandboxed cell's (_cell_pids), through which its progress files' pids are read."""
    from harness.rank.stacks import SIGNAL

    asked = {}
    for rank, pid in run_files.rank_pids(run_dir).items():
        if cell_pids is not None:
            pid = cell_pids.get(pid)
        if pid is not None and not run_files.has_result(run_dir, rank):
            try:
                os.kill(pid, SIGNAL)
                asked[rank] = run_dir / f"stacks_rank{rank}.txt"
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + _STACKS_WAIT_S
    stacks = {}
    while asked and time.monotonic() < deadline:
        for rank, path in list(asked.items()):
            text = path.read_text(errors="replace") if path.is_file() else ""
            # faulthandler writes one "Thread 0x... (most recent call first):" block per thread; the last one
            # ends with the main thread's outermost frame, so wait until the text stops growing.
            if text and text == stacks.get(rank):
                del asked[rank]
            elif text:
                stacks[rank] = text
        time.sleep(0.1)
    return stacks


def kill_run(proc: subprocess.Popen, run_dir: Path, cell_pids: dict[int, int] | None = None):
    """Ends a launch's torchrun (proc) and its ranks (their pids, from their progress files in run_dir), and waits
    for them. torchrun starts each rank in a session of its own, so the ranks are killed by their own group too. Under
    the server, proc is torchrun's stand-in: the forked torchrun, its children (the ranks' stand-ins) and the ranks
    the server forked for them are all killed, collected before any dies (a dead torchrun's children are reparented
    and could no longer be found from it). A sandboxed cell (cell_pids, see _cell_pids): every process below proc,
    none named by the run directory; the end of its first process ends the rest (its PID namespace)."""
    if cell_pids is not None:
        pids = list(cell_pids.values())
        tree.kill_all([proc.pid, *pids])
        proc.wait()
        tree.wait_gone(pids)
        return
    launcher = run_files.launcher_pid(run_dir)
    ranks = list(run_files.rank_pids(run_dir).values())
    pids = ranks + tree.children(proc.pid) + launcher + [c for p in launcher for c in tree.children(p)]
    tree.kill_all([*pids, proc.pid])
    proc.wait()
    tree.wait_gone(pids)
