"""Readers of a run directory: what torchrun, its wrapper and each rank left there, each file read in one place.

launch.json               what every rank reads first (launch.py writes it)
progress_rank<R>          "<pid> <phase>", rewritten by the worker as it goes (harness/rank/worker.py)
rank<R>.json              the rank's result (harness/records/results.py's RankResult)
torchrun.log              torchrun's output, every rank's lines prefixed with its rank
torchrun-failures.json    how each failed rank ended (harness/rank/torchrun.py)
torchrun.pid              the forked torchrun's pid (harness/processes/stand_in.py), under the server only
rank-logs/                torchrun's --log-dir, emptied into rank<R>.{stdout,stderr}.log
stacks_rank<R>.txt        a hung rank's threads' stacks (harness/rank/stacks.py)
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

LAUNCHER_PID = "torchrun.pid"
FAILURES = "torchrun-failures.json"
RANK_LOGS = "rank-logs"
_PROGRESS = "progress_rank"


@dataclass(frozen=True)
class Progress:
    """One rank's progress file: its pid (None until written whole) and the last phase it announced."""

    pid: int | None
    phase: str


def progress(run_dir: Path) -> dict[int, Progress]:
    """Every rank's progress file, by rank."""
    found = {}
    for path in run_dir.glob(f"{_PROGRESS}*"):
        pid, _, phase = path.read_text().partition(" ")
        found[int(path.name.removeprefix(_PROGRESS))] = Progress(int(pid) if pid.isdigit() else None, phase.strip())
    return found


def rank_progress(run_dir: Path) -> dict[int, str]:
    """The last phase each rank announced."""
    return {rank: p.phase for rank, p in progress(run_dir).items()}


def rank_pids(run_dir: Path) -> dict[int, int]:
    """Each rank's pid, for the ranks that wrote one."""
    return {rank: p.pid for rank, p in progress(run_dir).items() if p.pid is not None}


def rank_results(run_dir: Path, world_size: int) -> dict[int, dict]:
    """rank -> the result it wrote, for the ranks that wrote one."""
    results = {}
    for rank in range(world_size):
        path = run_dir / f"rank{rank}.json"
        if path.is_file():
            results[rank] = json.loads(path.read_text())
    return results


def has_result(run_dir: Path, rank: int) -> bool:
    return (run_dir / f"rank{rank}.json").exists()


def tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except FileNotFoundError:
        return ""


def launcher_pid(run_dir: Path) -> list[int]:
    """The forked torchrun's pid, which its stand-in writes; none in a fresh interpreter."""
    try:
        text = (run_dir / LAUNCHER_PID).read_text().strip()
    except OSError:
        return []
    return [int(text)] if text.isdigit() else []


def rank_signals(failures_path: Path) -> dict[int, str]:
    """Ranks that a signal ended (SIGKILL from the OOM killer, say), from the failures torchrun's wrapper wrote
    (harness/rank/torchrun.py); none when no rank failed, or when torchrun itself was killed before it could write
    them."""
    try:
        failures = json.loads(failures_path.read_text())
    except FileNotFoundError:
        return {}
    return {int(rank): failure["signal"] for rank, failure in failures.items() if failure["signal"]}


def collect_rank_logs(run_dir: Path) -> dict[int, list[str]]:
    """torchrun writes LOG_DIR/<run id>_<random>/attempt_<n>/<local rank>/{stdout,stderr}.log; each moves beside
    torchrun.log as rank<R>.stdout.log / rank<R>.stderr.log (one node: local rank = rank; one attempt)."""
    logs: dict[int, list[str]] = {}
    for path in sorted((run_dir / RANK_LOGS).glob("*/attempt_*/*/*.log")):
        rank = int(path.parent.name)
        target = run_dir / f"rank{rank}.{path.stem}.log"
        os.replace(path, target)
        logs.setdefault(rank, []).append(target.name)
    shutil.rmtree(run_dir / RANK_LOGS, ignore_errors=True)
    return logs


def unlink_links(run_dir: Path):
    """Every symbolic link below run_dir removed: a sandboxed cell's code made them, and the driver reads the files
    it left (a link to the caller's secrets would put them into the record and the comment)."""
    for directory, subdirs, files in os.walk(run_dir):
        for name in subdirs + files:
            path = os.path.join(directory, name)
            if os.path.islink(path):
                os.unlink(path)
