"""A rank's progress file (rank/phases.py), read by the launcher for the pid to kill and the phase a rank hung in
(launch/run_dir.py): never seen part-written, since torchrun may stop a rank at any moment."""

from __future__ import annotations

import os

import pytest

from harness.launch.run_dir import progress
from harness.rank import phases

pytestmark = pytest.mark.unit


def test_a_new_phase_replaces_the_whole_file_and_the_old_one_stays_readable_until_then(tmp_path, monkeypatch):
    tracker = phases.Phase(tmp_path / "progress_rank0")
    assert progress(tmp_path)[0].phase == "setup" and progress(tmp_path)[0].pid == os.getpid()
    replace, seen = os.replace, []

    def checked_replace(src, dst):
        # Up to the rename the readers see the last whole announcement, and the new text is not among their files.
        seen.append((progress(tmp_path)[0].phase, sorted(p.name for p in tmp_path.iterdir())))
        replace(src, dst)

    monkeypatch.setattr(phases.os, "replace", checked_replace)
    tracker.enter("build")
    assert seen == [("setup", [".progress_rank0.partial", "progress_rank0"])]
    assert progress(tmp_path)[0].phase == "build" and sorted(p.name for p in tmp_path.iterdir()) == ["progress_rank0"]
