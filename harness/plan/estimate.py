"""How long the cells of a plan have left, from what each took the last time it ran on this host.

A cell's previous duration is the `wall_s` of the latest record (by `finished_at`) of the same scenario x arm in
the results directory, written on this host (the record's `host`), with the scenario as it runs now (a test's
cell with its timeout cut or a fault injected keeps the scenario's name, not its duration). Records are read as
plain JSON lines, without the record model, newest file first, and no further than the file where the last planned
cell was found: the directory keeps every run's history (100 files of 12 records: 0.4 s to read all, loaded),
and reading it must not cost a noticeable part of what it estimates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


def _same_scenario(recorded: dict | None, current: dict) -> bool:
    """The recorded scenario as it ran is the one planned now; a field the record predates counts as the same."""
    if not isinstance(recorded, dict):
        return True
    return all(recorded.get(key, value) == value for key, value in current.items())


def previous_durations(
    directory: Path, host: str, scenarios: dict[str, dict], cells: set[tuple[str, str]] | None = None
) -> dict[tuple[str, str], float]:
    """(scenario, arm) -> wall_s of its latest record on `host`, for the scenarios named in `scenarios` (name ->
    the scenario as it runs now, as records keep it in `scenario_spec`). With `cells`, the files older than the
    one where the last of them was found are not read (file names start with the UTC time they were opened)."""
    latest: dict[tuple[str, str], tuple[str, float]] = {}
    for path in sorted(Path(directory).glob("*.jsonl"), reverse=True):
        if cells is not None and cells <= latest.keys():
            break
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                data = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a kill, or not a results file
                continue
            if not isinstance(data, dict) or data.get("host") != host or data.get("scenario") not in scenarios:
                continue
            wall, when = data.get("wall_s"), str(data.get("finished_at") or "")
            if not isinstance(wall, (int, float)) or data.get("outcome") == "skipped":
                continue
            if not _same_scenario(data.get("scenario_spec"), scenarios[data["scenario"]]):
                continue
            key = (data["scenario"], str(data.get("arm")))
            if key not in latest or when >= latest[key][0]:
                latest[key] = (when, float(wall))
    return {key: wall for key, (_, wall) in latest.items()}


@dataclass
class Estimate:
    """What is left of a plan, in words and seconds."""

    left: int  # cells not finished (running or waiting)
    seconds: float | None  # about how long they take, from the known ones; None: none is known
    unknown: int  # cells left that never ran on this host

    def words(self, left: str = "left") -> str:
        """E.g. "9 left, about 40 s"; `left` names the cells ("cell(s) to run" before the first one starts)."""
        if not self.left:
            return f"none {left}"
        if self.seconds is None:
            return f"{self.left} {left}, no estimate: none of them has run on this host before"
        if not self.unknown:
            return f"{self.left} {left}, about {_duration(self.seconds)}"
        known = f" for {self.left - self.unknown} of them; {self.unknown} never ran on this host"
        return f"{self.left} {left}, about {_duration(self.seconds)}{known}"


def time_left(
    waiting: list[tuple[str, str]],
    running: list[tuple[tuple[str, str], float]],
    durations: dict[tuple[str, str], float],
    jobs: int,
) -> Estimate:
    """waiting: cells not started; running: (cell, seconds it has run so far). Each known cell takes what it took
    last time (less what a running one has already run), spread over `jobs` runs at once."""
    left = len(waiting) + len(running)
    known = [durations[c] for c in waiting if c in durations]
    known += [max(durations[c] - ran, 0.0) for c, ran in running if c in durations]
    unknown = left - len(known)
    seconds = sum(known) / max(1, min(jobs, len(known))) if known else None
    return Estimate(left, seconds, unknown)


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min {seconds % 60:02d} s"
