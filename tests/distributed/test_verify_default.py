"""The default verify as a user runs it: what `make test` runs (nightly scenarios only with --nightly or named with
--scenario); and the progress lines of a command, with cells left and the time they
took last time on this host (plan/estimate.py), read from the verifies whose reuse another test checks. Cheap cells
(direct-1gpu: about 1 s)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from user_checkout import copy_checkout, harness_in  # tests/user_checkout.py (tests/ is on sys.path)

from harness.records.store import host_description, load_records


def _shown(done) -> str:
    return done.stdout[-3000:] + done.stderr[-3000:]


def test_a_nightly_scenario_named_beside_a_default_one_runs_too(tmp_path):
    """`--scenario NAME` runs that scenario, nightly or not (issue 58: one named beside a default one was left out).
    A user's checkout with a nightly copy of direct-1gpu (about 2 s a cell), so that no minutes-long cell runs."""
    checkout = copy_checkout(tmp_path)
    shipped = (checkout / "scenarios" / "direct-1gpu.yaml").read_text()
    (checkout / "scenarios" / "direct-1gpu-nightly.yaml").write_text(shipped + "tags: [nightly]\n")
    results = tmp_path / "results"
    done = harness_in(
        checkout, "verify", "--scenario", "direct-1gpu-nightly", "--scenario", "direct-1gpu", "--alone",
        results=results, timeout=600, share_parent=True,
    )  # fmt: skip
    assert done.returncode == 0, _shown(done)
    [path] = results.glob("*-verify-*.jsonl")
    assert sorted(r.scenario for r in load_records(path)) == ["direct-1gpu", "direct-1gpu-nightly"]
    assert "left out" not in done.stdout, done.stdout


CANDIDATE = "patches/fsdp2-lmhead-forward.diff"


# One flow for the tests that check it (a verify of the candidate, then a second): the progress lines of the first,
# whose plan knows one cell from an earlier record, and the second's reuse and estimate from the first's records. Its
# tests share one group, so that it runs once under make test's two processes. Both verifies through harness.cli.main
# in this process (new_cli_in_process: the tests check what they print and write, not a fresh interpreter's start,
# ~1.1 s of CPU a command); what the second reads of the first is the results directory, as a user's would.
@pytest.fixture(scope="module")
def two_verifies(new_cli_in_process, record, scenario):
    cli = new_cli_in_process()
    spec = json.loads(scenario("direct-1gpu").model_dump_json())
    cli.results_dir.mkdir(parents=True, exist_ok=True)
    earlier = record(
        scenario="direct-1gpu", arm="upstream", host=host_description(), scenario_spec=spec, wall_s=42.0
    ).written()
    (cli.results_dir / "20261130T000000Z-matrix-1.jsonl").write_text(json.dumps(earlier) + "\n")
    first = cli("verify", "--patch", CANDIDATE, "--scenario", "direct-1gpu")
    second = cli("verify", "--patch", CANDIDATE, "--scenario", "direct-1gpu", "--absolute")
    return SimpleNamespace(cli=cli, first=first, second=second)


@pytest.mark.xdist_group("verify-twice")
def test_progress_says_how_many_cells_are_left_and_about_how_long_they_took_here_before(two_verifies):
    first, second = two_verifies.first, two_verifies.second
    assert first.returncode == 0, _shown(first)
    lines = first.stderr.splitlines()
    # Before any cell: upstream took 42 s here last time; none and the patch never ran here: estimated from their
    # kind, said so.
    plan = next(line for line in lines if line.startswith("3 cell(s) to run, about "))
    assert plan.endswith("(estimate by kind for 2, host pace of 1 record(s))"), plan
    # In plan order (the patch, none, upstream): after the patch, none's estimate and upstream's 42 s are left; after
    # none, upstream's 42 s alone, known, so no estimate is said.
    one = next(line for line in lines if line.startswith("[1/3] direct-1gpu"))
    assert "(2 left, about " in one and "(estimate by kind for 1, host pace of " in one, one
    two = next(line for line in lines if line.startswith("[2/3] direct-1gpu"))
    assert two.endswith("(1 left, about 42 s)"), two
    last = next(line for line in lines if line.startswith("[3/3] direct-1gpu"))
    assert last.endswith("(none left)"), last
    # The next verify knows the patch's cell, from the record the first one wrote.
    assert second.returncode == 0, _shown(second)
    [patch] = [r for r in load_records(two_verifies.cli.results_files("verify")[0]) if r.arm == "fsdp2-lmhead-forward"]
    assert f"1 cell(s) to run, about {round(patch.wall_s)} s" in second.stderr.splitlines(), second.stderr


def _but_where_from(record) -> dict:
    """The record as written, but for the stamp's reused_from (where a reused record came from)."""
    written = record.written()
    return {**written, "stamp": {**written["stamp"], "reused_from": None}}


@pytest.mark.xdist_group("verify-twice")
def test_a_second_verify_reuses_none_and_upstream_and_runs_the_patch(two_verifies):
    """The arms beside the patch are the same cells from one verify to the next: the second takes the first's
    records (reused_from naming each line), runs only the patch, and reaches the same verdict (--fresh: test_reuse).
    The first's verdict leads with what the patch changes against upstream (the default, issue 74); the second asks
    for the absolute one (--absolute), which an argument does not take out of the reuse key. An earlier record of
    upstream's on this host (the flow's, for its estimate) is no reuse: it was not written with the same inputs."""
    launching_cli, first, second = two_verifies.cli, two_verifies.first, two_verifies.second
    assert first.returncode == 0, _shown(first)
    assert (
        first.stdout.count(
            "verdict: fsdp2-lmhead-forward changes no outcome in the 1 scenario(s) compared with upstream run beside it"
        )
        == 1
    ), first.stdout
    assert second.returncode == 0, _shown(second)
    earlier, later = (load_records(path) for path in launching_cli.results_files("verify"))
    assert not any(r.stamp.reused_from for r in earlier)
    by_arm = {r.arm: r for r in later}
    ran = {r.arm: (r, line) for line, r in enumerate(earlier, start=1)}
    for arm in ("none", "upstream"):
        record, line = ran[arm]
        assert by_arm[arm].stamp.reused_from.endswith(f"{launching_cli.results_files('verify')[0].name}:{line}")
        assert _but_where_from(by_arm[arm]) == _but_where_from(record)
    patch = by_arm["fsdp2-lmhead-forward"]
    assert (
        patch.stamp.reused_from is None and patch.stamp.finished_at >= ran["fsdp2-lmhead-forward"][0].stamp.finished_at
    )
    assert (
        patch.stamp.reuse_key == ran["fsdp2-lmhead-forward"][0].stamp.reuse_key
    )  # the same inputs, and still run again
    assert "2 of 3 cells (none, upstream) not run again" in second.stderr, second.stderr
    assert "(2 of them reused from an earlier run with the same inputs" in second.stdout, second.stdout
    assert second.stdout.count("verdict: fsdp2-lmhead-forward passes all 1 scenario(s)") == 1, second.stdout
