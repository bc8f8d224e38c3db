"""README's Time table is drawn from docs/timings.csv (tools/timings.py), never written by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.unit


def test_readme_time_table_is_drawn_from_the_data():
    done = subprocess.run([sys.executable, "tools/timings.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_new_measurement_moves_the_table(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import timings
    finally:
        sys.path.pop(0)
    data = timings.rows()
    newer = dict(data[-1], date="2099-01-01", hour_utc="00:00", commit="abc1234", seconds="1.5")
    drawn = timings.table([*data, newer])
    step_line = next(line for line in drawn.splitlines() if timings.STEPS[newer["step"]][0] in line)
    assert "1.5 s" in step_line and "abc1234" in step_line
    assert drawn != timings.table(data)


def test_the_table_shows_the_latest_commits_figures_with_their_loop_and_no_date():
    """The README shows current figures beside the goals; the dates, and an earlier commit's figures of the same
    day, stay in the data."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import timings
    finally:
        sys.path.pop(0)
    data = timings.rows()
    one = dict(data[-1], date="2099-01-01", hour_utc="00:00", commit="aaa1111", host_loop_s="0.10", seconds="9")
    two = dict(one, hour_utc="01:00", commit="bbb2222", host_loop_s="0.20", seconds="18")
    drawn = timings.table([*data, one, two])
    assert "2099" not in drawn and "2026-" not in drawn
    step_line = next(line for line in drawn.splitlines() if timings.STEPS[one["step"]][0] in line)
    assert step_line.split(" | ")[1] == "18 s (bbb2222, loop 0.20 s)", step_line
    three = dict(two, hour_utc="02:00", seconds="17")
    step_line = next(
        line
        for line in timings.table([*data, one, two, three]).splitlines()
        if one["step"] in line or timings.STEPS[one["step"]][0] in line
    )
    assert step_line.split(" | ")[1] == "18, 17 s (bbb2222, loop 0.20 s)", step_line
