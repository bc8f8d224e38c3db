"""A package's test run as a maintainer runs it (harness/upstream/run_generated.py run_pytest): plain pytest in a
fresh process, no project config, each test's outcome and first message line from JUnit, the numbers the test
wrote; a run past its time counts as a failed run. A test file of our own, standard library and pytest only."""

from __future__ import annotations

import sys

import pytest

from harness.upstream.run_generated import run_pytest

pytestmark = pytest.mark.unit

TEST_FILE = """
import json, os, time

def test_passes():
    with open(os.environ["MY_NUMBERS"], "w") as f:
        json.dump({"error": 0.5}, f)

def test_fails():
    assert 1 == 2, "one is not two"

def test_sleeps():
    if os.environ.get("SLEEP"):
        time.sleep(60)
"""


def test_outcomes_messages_and_numbers_come_back(tmp_path):
    test = tmp_path / "test_thing_on_cpu.py"
    test.write_text(TEST_FILE)
    run = run_pytest(test, "git:refs/pr/1", tmp_path / "runs", python=sys.executable, numbers_env="MY_NUMBERS")
    assert run.arm == "git:refs/pr/1" and run.returncode == 1
    assert run.outcomes == {"test_passes": "passed", "test_fails": "failed", "test_sleeps": "passed"}
    assert "one is not two" in run.messages["test_fails"]
    assert run.numbers == {"error": 0.5}
    assert (tmp_path / "runs" / "junit-git_refs_pr_1.xml").is_file()  # the label made a file name


def test_a_run_past_its_time_is_a_failed_run(tmp_path, monkeypatch):
    test = tmp_path / "test_thing_on_cpu.py"
    test.write_text(TEST_FILE)
    monkeypatch.setenv("SLEEP", "1")
    run = run_pytest(test, "release", tmp_path, python=sys.executable, numbers_env="MY_NUMBERS", timeout_s=0.5)
    assert run.returncode == 124 and "timed out after 0.5 s" in run.output_tail
