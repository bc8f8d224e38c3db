"""plan/estimate.py: the time a plan has left, from each cell's latest record on this host in a results dir."""

from __future__ import annotations

import json

import pytest

from harness.plan.estimate import Estimate, previous_durations, time_left

HOST = "Intel(R) Xeon(R) Processor, 2 cores"


def _spec(scenario) -> dict:
    return json.loads(scenario.model_dump_json())


@pytest.fixture
def multigpu(scenario):
    return scenario("fsdp2-multigpu")


def _write(directory, name, *records):
    directory.mkdir(exist_ok=True)
    (directory / name).write_text("".join(json.dumps(r.written(), default=str) + "\n" for r in records))


def test_the_latest_record_of_each_scenario_and_arm_on_this_host_gives_its_duration(
    tmp_path, record, multigpu, scenario
):
    spec = _spec(multigpu)
    results = tmp_path / "results"
    mine = dict(scenario="fsdp2-multigpu", host=HOST, scenario_spec=spec)
    _write(
        results,
        "20261201T090000Z-matrix-1.jsonl",
        record(**mine, arm="upstream", wall_s=14.0, finished_at="2026-12-01T09:00:10+00:00"),
        record(**mine, arm="none", wall_s=3.5, finished_at="2026-12-01T09:00:20+00:00"),
    )
    _write(
        results,
        "20261201T100000Z-repro-2.jsonl",
        # later: it wins for upstream
        record(**mine, arm="upstream", wall_s=9.25, finished_at="2026-12-01T10:00:10+00:00"),
        # another machine's: not this one's duration
        record(
            **{**mine, "host": "AMD EPYC, 64 cores"}, arm="none", wall_s=0.5, finished_at="2026-12-01T10:01:00+00:00"
        ),
    )
    (results / "20261201T110000Z-run-3.jsonl").write_text('{"scenario": "fsdp2-multigpu", "ho')  # cut by a kill
    durations = previous_durations(results, HOST, {"fsdp2-multigpu": spec})
    assert durations == {("fsdp2-multigpu", "upstream"): 9.25, ("fsdp2-multigpu", "none"): 3.5}
    # A scenario not planned is not read; an empty directory knows nothing.
    assert previous_durations(results, HOST, {"fsdp2-1gpu": _spec(scenario("fsdp2-1gpu"))}) == {}
    assert previous_durations(tmp_path / "absent", HOST, {"fsdp2-multigpu": spec}) == {}


def test_a_record_of_the_scenario_changed_or_skipped_is_not_its_duration(tmp_path, record, multigpu):
    spec = _spec(multigpu)
    results = tmp_path / "results"
    mine = dict(scenario="fsdp2-multigpu", host=HOST, arm="upstream")
    _write(
        results,
        "20261201T090000Z-pytest-1.jsonl",
        record(**mine, scenario_spec=spec, wall_s=14.0, finished_at="2026-12-01T09:00:00+00:00"),
        # a test's cell with the timeout cut to make it hang: same name, not the same scenario
        record(**mine, scenario_spec={**spec, "timeout_s": 5.0}, wall_s=5.2, finished_at="2026-12-01T09:01:00+00:00"),
        record(**mine, scenario_spec=spec, outcome="skipped", wall_s=0.0, finished_at="2026-12-01T09:02:00+00:00"),
    )
    assert previous_durations(results, HOST, {"fsdp2-multigpu": spec}) == {("fsdp2-multigpu", "upstream"): 14.0}
    # A record older than a field the scenario has now counts as the same scenario.
    older = {k: v for k, v in spec.items() if k != "warmup"}
    _write(
        results,
        "20261201T100000Z-run-2.jsonl",
        record(**mine, scenario_spec=older, wall_s=11.0, finished_at="2026-12-01T10:00:00+00:00"),
    )
    assert previous_durations(results, HOST, {"fsdp2-multigpu": spec}) == {("fsdp2-multigpu", "upstream"): 11.0}


def test_time_left_spreads_the_known_cells_over_the_jobs_and_says_what_it_does_not_know():
    durations = {("a", "x"): 30.0, ("b", "x"): 10.0, ("c", "x"): 20.0}
    # c has run 5 s of its 20: 15 left; a and b wait; two at once.
    est = time_left([("a", "x"), ("b", "x")], [(("c", "x"), 5.0)], durations, jobs=2)
    assert est == Estimate(left=3, seconds=27.5, unknown=0)
    assert est.words() == "3 left, about 28 s"
    assert est.words("cell(s) to run") == "3 cell(s) to run, about 28 s"
    # One job: the sum. A running cell past its previous duration is about done, not negative.
    assert time_left([("a", "x")], [(("b", "x"), 60.0)], durations, jobs=1).seconds == 30.0
    partly = time_left([("a", "x"), ("new", "x")], [], durations, jobs=2)
    assert partly.words() == "2 left, about 30 s for 1 of them; 1 never ran on this host"
    none_known = time_left([("new", "x")], [], durations, jobs=2)
    assert none_known.seconds is None
    assert none_known.words() == "1 left, no estimate: none of them has run on this host before"
    assert time_left([], [], durations, jobs=2).words() == "none left"
    assert time_left([("a", "x")] * 9, [], durations, jobs=1).words() == "9 left, about 4 min 30 s"


def test_files_older_than_the_one_that_completes_the_plan_are_not_read(tmp_path, record, multigpu):
    spec = _spec(multigpu)
    results = tmp_path / "results"
    mine = dict(scenario="fsdp2-multigpu", host=HOST, scenario_spec=spec, arm="upstream")
    # The older file's record finished later (a long invocation that ran beside the newer one): read, it wins.
    _write(results, "20261201T090000Z-matrix-1.jsonl", record(**mine, wall_s=50.0, finished_at="2026-12-01T11:00:00"))
    _write(results, "20261201T100000Z-repro-2.jsonl", record(**mine, wall_s=9.0, finished_at="2026-12-01T10:00:30"))
    planned = {"fsdp2-multigpu": spec}
    assert previous_durations(results, HOST, planned) == {("fsdp2-multigpu", "upstream"): 50.0}
    # Asked for the plan's cells, the newest file that has them all is the last one read.
    cells = {("fsdp2-multigpu", "upstream")}
    assert previous_durations(results, HOST, planned, cells) == {("fsdp2-multigpu", "upstream"): 9.0}
    # A cell the newer file lacks sends it on to the older one.
    cells.add(("fsdp2-multigpu", "none"))
    assert previous_durations(results, HOST, planned, cells) == {("fsdp2-multigpu", "upstream"): 50.0}


def test_a_cell_that_never_ran_here_is_estimated_from_its_kind_from_the_first_run_on(tmp_path, record, scenario):
    """issue 49: a first verify got "no estimate". Now every planned cell has one: from its kind (path, ranks,
    steps, compile) at a 2-core host's pace while nothing ran here, at this host's measured pace after, and the
    words say it is an estimate."""
    from harness.plan.estimate import kind_seconds

    specs = {n: _spec(scenario(n)) for n in ("direct-1gpu", "engine-update-hsdp", "fsdp2-compile-inductor")}
    cells = {(n, "mine") for n in specs}
    first = previous_durations(tmp_path / "results", HOST, specs, cells)
    assert first == {} and set(first.estimated) == cells and first.pace == (1.0, 0)
    by_kind = {n: first.estimated[(n, "mine")] for n in specs}
    # more ranks and RL steps, a cold inductor compile: each kind costs more
    assert by_kind["direct-1gpu"] < by_kind["engine-update-hsdp"] < by_kind["fsdp2-compile-inductor"]
    est = time_left(sorted(cells), [], first, jobs=1)
    assert est.seconds == pytest.approx(sum(by_kind.values()))
    assert est.words("cell(s) to run").endswith("(estimate by kind for all, 2-core pace)")
    # a host twice as slow as the kind's figures: the estimate doubles, measured on that record
    slow = kind_seconds(specs["direct-1gpu"]) * 2
    ran = record(scenario="direct-1gpu", arm="upstream", host=HOST, scenario_spec=specs["direct-1gpu"], wall_s=slow)
    _write(tmp_path / "results", "20261201T090000Z-run-1.jsonl", ran)
    later = previous_durations(tmp_path / "results", HOST, specs, cells)
    assert later.pace == (2.0, 1) and later.estimated[("direct-1gpu", "mine")] == pytest.approx(slow)
    assert (
        time_left([("direct-1gpu", "mine")], [], later, 1)
        .words()
        .endswith("by kind for all, host pace of 1 record(s))")
    )
