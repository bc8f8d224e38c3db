"""The default verify as a user runs it: what `make test` runs (nightly scenarios only with --nightly or named with
--scenario); and the progress lines of a command, with cells left and the time they
took last time on this host (plan/estimate.py). One cheap cell each (direct-1gpu: about 2 s)."""

from __future__ import annotations

import json

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


def test_progress_says_how_many_cells_are_left_and_about_how_long_they_took_here_before(
    launching_cli, record, scenario
):
    spec = json.loads(scenario("direct-1gpu").model_dump_json())
    launching_cli.results_dir.mkdir(parents=True, exist_ok=True)
    earlier = record(
        scenario="direct-1gpu", arm="upstream", host=host_description(), scenario_spec=spec, wall_s=42.0
    ).written()
    (launching_cli.results_dir / "20261130T000000Z-matrix-1.jsonl").write_text(json.dumps(earlier) + "\n")
    done = launching_cli("run", "--scenario", "direct-1gpu", "--arm", "upstream", "--arm", "none")
    assert done.returncode == 0, _shown(done)
    lines = done.stderr.splitlines()
    # Before any cell: upstream took 42 s here last time; none never ran here: estimated from its kind, said so.
    plan = next(line for line in lines if line.startswith("2 cell(s) to run, about "))
    assert plan.endswith("(estimate by kind for 1, host pace of 1 record(s))"), plan
    first = next(line for line in lines if line.startswith("[1/2] direct-1gpu"))
    assert "(1 left, about " in first and "(estimate by kind for all, host pace of " in first, first
    last = next(line for line in lines if line.startswith("[2/2] direct-1gpu"))
    assert last.endswith("(none left)"), last
    # The next run knows both, from the records the first one wrote.
    again = launching_cli("run", "--scenario", "direct-1gpu", "--arm", "none")
    assert again.returncode == 0, _shown(again)
    [none] = [r for r in load_records(launching_cli.results_files("run")[-2]) if r.arm == "none"]
    assert f"1 cell(s) to run, about {round(none.wall_s)} s" in again.stderr.splitlines(), again.stderr


def _but_where_from(record) -> dict:
    """The record as written, but for the stamp's reused_from (where a reused record came from)."""
    written = record.written()
    return {**written, "stamp": {**written["stamp"], "reused_from": None}}


def test_a_second_verify_reuses_none_and_upstream_and_runs_the_patch(launching_cli):
    """The arms beside the patch are the same cells from one verify to the next: the second takes the first's
    records (reused_from naming each line), runs only the patch, and reaches the same verdict (--fresh: test_reuse).
    The first's verdict leads with what the patch changes against upstream (the default, issue 74); the second asks
    for the absolute one (--absolute), which an argument does not take out of the reuse key."""
    candidate = "patches/fsdp2-lmhead-forward.diff"
    first = launching_cli("verify", "--patch", candidate, "--scenario", "direct-1gpu")
    assert first.returncode == 0, _shown(first)
    assert (
        first.stdout.count(
            "verdict: fsdp2-lmhead-forward changes no outcome in the 1 scenario(s) compared with upstream run beside it"
        )
        == 1
    ), first.stdout
    second = launching_cli("verify", "--patch", candidate, "--scenario", "direct-1gpu", "--absolute")
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
