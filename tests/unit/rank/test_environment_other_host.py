"""The nightly's other-host variant (make test-other-host; docs/TIME.md "Another host's bits"): the ranks' thread
count reaches each rank through its environment and is set there, after the fork, so the preloaded parent stays one
thread; the nightly runs the target, and a parent started under the perturbed allocator is one of its own."""

from __future__ import annotations

import re

import pytest
import yaml

from harness.paths import ROOT
from harness.processes import client
from harness.rank.environment import RANK_THREADS, rank_environment, rank_threads


@pytest.mark.parametrize(("value", "threads"), [("2", 2), (" 4 ", 4), ("", None), ("0", None), ("two", None)])
def test_the_ranks_threads_are_read_from_the_environment(monkeypatch, value, threads):
    monkeypatch.setenv(RANK_THREADS, value)
    assert rank_threads() == threads


def test_the_variant_reaches_the_ranks_and_keeps_the_parent_forking(monkeypatch):
    monkeypatch.setenv(RANK_THREADS, "2")
    monkeypatch.setenv("MALLOC_PERTURB_", "165")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = rank_environment(None)
    # The ranks get the variant; the parent (and so the ranks' OpenMP at their start) stays at one thread.
    assert env[RANK_THREADS] == "2" and env["OMP_NUM_THREADS"] == "1"
    # The thread count is read in the rank, at run time: one parent serves both; the allocator's setting is read at
    # a process's start: a parent of its own.
    assert client.key(env) == client.key({k: v for k, v in env.items() if k != RANK_THREADS})
    assert client.key(env) != client.key({k: v for k, v in env.items() if k != "MALLOC_PERTURB_"})


def test_the_nightly_runs_the_variant_target():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^OTHER_HOST = .*HARNESS_RANK_THREADS=2", makefile, re.M)
    recipe = re.search(r"^test-other-host:.*\n\t(.*)", makefile, re.M).group(1)
    assert recipe.startswith("$(OTHER_HOST) ") and "tests/distributed" in recipe
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text())
    steps = [step.get("run", "") for job in workflow["jobs"].values() for step in job.get("steps", [])]
    assert "make test-other-host" in steps
