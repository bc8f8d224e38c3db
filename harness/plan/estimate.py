"""How long the cells of a plan have left, from what each took the last time it ran on this host, and for a cell that
never ran here, from its kind (path, ranks, RL steps, compile) at this host's pace (kind_seconds), said so. A cell's
previous duration is the `wall_s` of the latest record (by `finished_at`) of the same scenario x arm in the results
directory, written on this host (the record's `host`), with the scenario as it runs now (a test's cell with its
timeout cut or a fault injected keeps the scenario's name, not its duration). Records are read as plain JSON
(records/history.py, the one reader of the results history), without the record model, newest file first, and no
further than the file where the last planned cell was found: the directory keeps every run's history (100 files of 12
records: 0.4 s to read all, loaded), and reading it must not cost a noticeable part of what it estimates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.records.record_head import record_head, scenario_kind


def _same_scenario(recorded: dict | None, current: dict) -> bool:
    """The recorded scenario as it ran is the one planned now; a field the record predates counts as the same."""
    if not isinstance(recorded, dict):
        return True
    return all(recorded.get(key, value) == value for key, value in current.items())


# A cell's seconds by its kind, on the project's 2-core reference host with the preloaded parent kept (docs/TIME.md:
# fsdp2-multigpu 3.7-4.2 s, engine-update-no-sync 8.0-8.6 s, engine-sp2-dp2 7.7 s at 4 ranks, a compile cell on
# aot_eager ~30 s, on inductor 3-4 minutes cold). Scaled by this host's pace (host_pace); only for a cell that never
# ran here, and said to be an estimate.
KIND_BASE_S = {"direct": 2.0, "engine": 2.5}
KIND_PER_RANK_S = 1.0  # each rank's share of a 2-core host
KIND_PER_STEP_S = 2.0  # each RL step of an update, per 2 ranks
KIND_COMPILE_S = {"aot_eager": 30.0, "inductor": 180.0}


def kind_seconds(spec: dict) -> float:
    """About how long a cell of this kind takes on the reference host: its path, ranks, RL steps and compile."""
    kind = scenario_kind(spec)
    ranks = kind.ranks or 1
    seconds = KIND_BASE_S.get(kind.path or "direct", 2.5) + KIND_PER_RANK_S * ranks
    seconds += KIND_PER_STEP_S * (kind.steps or 0) * max(ranks, 2) / 2
    if kind.compile:
        seconds += KIND_COMPILE_S.get(str(kind.compile_backend), 180.0)
    return seconds * (0.7 if kind.forward_only else 1.0)


class Durations(dict):
    """(scenario, arm) -> seconds it took last time here; `estimated`: the same for the planned cells that never
    ran here, from their kind at this host's pace (kind_seconds x pace), and `pace` with how it was found."""

    estimated: dict
    pace: tuple[float, int]  # (this host's seconds per reference second, records it was measured on; 0: none)


def previous_durations(
    directory: Path, host: str, scenarios: dict[str, dict], cells: set[tuple[str, str]] | None = None
) -> Durations:
    """(scenario, arm) -> wall_s of its latest record on `host`, for the scenarios named in `scenarios` (name ->
    the scenario as it runs now, as records keep it in `scenario_spec`). With `cells`, the files older than the
    one where the last of them was found are not read (file names start with the UTC time they were opened), and
    each of them that never ran here gets an estimate from its kind (Durations.estimated)."""
    from harness.records.history import history

    latest: dict[tuple[str, str], tuple[str, float]] = {}
    paces: list[float] = []  # this host's wall_s / kind_seconds of every record read
    for text in history(directory):
        if cells is not None and cells <= latest.keys():
            break
        for _, data in text.records():  # in the nested shape, whatever its schema; cut lines skipped
            head = record_head(data)
            if head is None or head.stamp.host != host:
                continue
            wall, when, spec = head.wall_s, head.stamp.finished_at or "", head.stamp.scenario_spec
            if wall is None or head.outcome == "skipped":
                continue
            if spec is not None and not head.stamp.reused_from:
                paces.append(wall / kind_seconds(spec))
            if head.scenario not in scenarios:
                continue
            if not _same_scenario(spec, scenarios[head.scenario]):
                continue
            key = (head.scenario, str(head.arm))
            if key not in latest or when >= latest[key][0]:
                latest[key] = (when, wall)
    durations = Durations({key: wall for key, (_, wall) in latest.items()})
    durations.pace = (sorted(paces)[len(paces) // 2], len(paces)) if paces else (1.0, 0)
    durations.estimated = {
        cell: kind_seconds(scenarios[cell[0]]) * durations.pace[0]
        for cell in sorted(cells or ())
        if cell not in durations and cell[0] in scenarios
    }
    return durations


@dataclass
class Estimate:
    """What is left of a plan, in words and seconds."""

    left: int  # cells not finished (running or waiting)
    seconds: float | None  # about how long they take, from the known ones; None: none is known
    unknown: int  # cells left that never ran on this host
    by_kind: int = 0  # of those, estimated from their kind (in `seconds`)
    pace_records: int = 0  # the records this host's pace was measured on (0: the reference host's pace)

    def words(self, left: str = "left") -> str:
        """E.g. "9 left, about 40 s"; `left` names the cells ("cell(s) to run" before the first one starts)."""
        if not self.left:
            return f"none {left}"
        if self.seconds is None:
            return f"{self.left} {left}, no estimate: none of them has run on this host before"
        if not self.unknown:
            return f"{self.left} {left}, about {_duration(self.seconds)}"
        if self.by_kind:
            # Estimated from the kind: path, ranks, RL steps, compile (kind_seconds), at the pace measured here.
            pace = f"host pace of {self.pace_records} record(s)" if self.pace_records else "2-core pace"
            which = "all" if self.by_kind == self.left else f"{self.by_kind}"
            return f"{self.left} {left}, about {_duration(self.seconds)} (estimate by kind for {which}, {pace})"
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
    # A cell that never ran here: its estimate by kind (Durations.estimated), where previous_durations made one.
    estimated = getattr(durations, "estimated", {})
    guessed = [estimated[c] for c in waiting if c not in durations and c in estimated]
    guessed += [max(estimated[c] - ran, 0.0) for c, ran in running if c not in durations and c in estimated]
    every = known + guessed
    seconds = sum(every) / max(1, min(jobs, len(every))) if every else None
    pace = getattr(durations, "pace", (1.0, 0))
    return Estimate(left, seconds, unknown, len(guessed), pace[1])


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min {seconds % 60:02d} s"
