"""The phases of a rank, in order, and the tracker that announces them: the contract between the two sides. Torch-free:
the verdict (driver side) reads PHASES to order errors, the launcher reads the progress file to kill a hung rank and
name where it hung.

A rank announces the phases it can see. verl's engine runs forward, backward and the optimizer step inside one
call (forward_backward_batch, optimizer_step), so a rank on the engine path says "forward" for all of them; the
verdict then names the step's phase from the error's own traceback (judge_cell/diagnosis.py step_phase): "backward"
(autograd's backward, FSDP's post-backward included) or "optimizer" (optimizer.step, gradient clipping)."""

from __future__ import annotations

import os
import time
from pathlib import Path

PHASES = (
    "setup",
    "build",
    "oracle",
    "patch",
    "wrap",
    "compile",
    "forward",
    "backward",
    "optimizer",
    "compare",
    "bench",
    "done",
)


class Phase:
    """Tracks where the rank is, so an exception is recorded with the step that raised it.

    It also rewrites `progress_rank<R>` ("<pid> <phase>") on every change: the launcher reads it to kill the
    rank on a timeout and to say where a hung rank was stuck.
    """

    def __init__(self, progress_path: Path):
        self.name = "setup"
        self.times = {}
        self._t0 = time.perf_counter()
        self._progress_path = progress_path
        self._announce()

    def _announce(self):
        # Whole or not at all (write_whole): torchrun SIGTERMs a rank whose peer failed, and one stopped inside a
        # plain rewrite (truncate, then write) left an empty file, with no pid for the kill path and no phase for
        # the record (seen: direct-multigpu x crash-rank1, rank 0).
        write_whole(self._progress_path, f"{os.getpid()} {self.name}")

    def enter(self, name: str):
        assert name in PHASES, name
        now = time.perf_counter()
        self.times[self.name] = round(self.times.get(self.name, 0.0) + now - self._t0, 4)
        if name != self.name:
            self.name = name
            self._announce()
        self._t0 = now


def write_whole(path: Path, text: str):
    """path's new text, written beside it under a hidden name (no reader's glob, progress_rank* or rank*.json,
    matches it), then renamed over it: a reader sees the old text or the new, never a part of one."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)
