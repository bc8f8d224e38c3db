"""plan/reuse.py: a baseline cell's record is reused only where every input it was run from is the same, only from a
command's record with an outcome of the code, and the newest one; the runner's lookup finds what stamping wrote."""

from __future__ import annotations

import json
from argparse import Namespace
from dataclasses import replace

import pytest

from harness.commands.run import reused_arms
from harness.plan.arms import arm_fingerprint, known_arms
from harness.plan.reuse import earlier_records, key_for, reusable
from harness.records import reuse_key
from harness.records.measures import ArmPatch
from harness.records.results import Record
from harness.records.reuse_key import Invocation
from harness.records.signing import MAC_FIELD, signed_record
from harness.records.store import invocation_info, stamp_record
from harness.run.executors import planned_cells
from harness.run.runner import _reused

BASE = dict(
    scenario_spec={"name": "fsdp2-multigpu", "seed": 1234},
    device="cpu",
    arm_name="none",
    patches=[ArmPatch(file="patches/none.diff", sha256="a" * 64)],
    invocation=Invocation(inputs_sha256="i" * 64, host="Xeon, 2 cores"),
)


@pytest.mark.parametrize(
    "changed",
    [
        {"invocation": Invocation(inputs_sha256="j" * 64, host="Xeon, 2 cores")},
        {"scenario_spec": {"name": "fsdp2-multigpu", "seed": 1235}},
        {"device": "cuda"},
        {"arm_name": "upstream"},
        {"patches": [ArmPatch(file="patches/none.diff", sha256="b" * 64)]},
        {"patches": []},
        {"invocation": Invocation(inputs_sha256="i" * 64, host="Xeon, 4 cores")},
    ],
)
def test_the_key_changes_with_each_input(changed):
    assert key_for(**BASE) == key_for(**BASE)
    assert key_for(**{**BASE, **changed}) != key_for(**BASE)


def test_the_inputs_digest_changes_with_the_harness_code_and_the_installed_packages(tmp_path, monkeypatch):
    (tmp_path / "harness").mkdir()
    (tmp_path / "models").mkdir()
    code = tmp_path / "harness" / "judge.py"
    code.write_text("TOLERANCE = 1e-3\n")
    site = tmp_path / "site"
    (site / "torch-2.13.0.dist-info").mkdir(parents=True)
    monkeypatch.setattr(reuse_key, "ROOT", tmp_path)
    monkeypatch.setattr(reuse_key.sys, "path", [str(site)])
    digest = reuse_key.inputs_sha256.__wrapped__

    first = digest()
    assert digest() == first
    code.write_text("TOLERANCE = 1e-2\n")  # a loosened tolerance, not yet committed
    second = digest()
    assert second != first
    (site / "torch-2.13.0.dist-info").rename(site / "torch-2.14.0.dist-info")
    assert digest() not in (first, second)


def _data(key: str, **fields) -> dict:
    return {"scenario": "s", "arm": "none", "outcome": "error", "command": "verify", "reuse_key": key, **fields}


def _write(path, *records, cut: bool = False, signed: bool = True):
    lines = [json.dumps(signed_record(r) if signed else r, sort_keys=True, default=str) for r in records]
    path.write_text("\n".join(lines) + ("\n" + lines[-1][:20] if cut else "") + "\n")


def test_the_newest_reusable_record_of_each_key_is_found_with_its_line(tmp_path):
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    _write(tmp_path / "20261130T000000Z-verify-1.jsonl", _data(a, wall_s=1.0), _data(b, wall_s=2.0))
    _write(tmp_path / "20261201T000000Z-verify-2.jsonl", _data(a, wall_s=3.0), _data(a, wall_s=4.0), cut=True)
    found = earlier_records({a, b, c}, tmp_path).found
    assert set(found) == {a, b}  # c never ran
    assert found[a][0]["wall_s"] == 4.0 and found[a][1].endswith("20261201T000000Z-verify-2.jsonl:2")
    assert found[b][0]["wall_s"] == 2.0 and found[b][1].endswith("20261130T000000Z-verify-1.jsonl:2")


@pytest.mark.parametrize(
    "fields, taken",
    [
        ({"outcome": "pass"}, True),
        ({"outcome": "mismatch"}, True),
        ({"outcome": "error", "error": {"type": "TypeError"}}, True),  # the code under test raised it
        ({"outcome": "hang"}, False),
        ({"outcome": "error", "error": {"type": "Timeout"}}, False),
        ({"outcome": "error", "error": {"type": "RankKilled"}}, False),
        ({"outcome": "error", "error": {"type": "RankLost"}}, False),
        ({"outcome": "error", "error": {"type": "DistBackendError"}}, False),  # a collective's transport
        ({"outcome": "skipped"}, False),
        ({"outcome": "pass", "command": "pytest"}, False),  # a test may set a fault up that the key does not see
        ({"outcome": "pass", "command": "releases"}, False),
        ({"outcome": "pass", "reused_from": "results/x.jsonl:1"}, False),  # the original is the one to name
    ],
)
def test_only_a_commands_record_with_an_outcome_of_the_code_is_reused(fields, taken, tmp_path):
    assert reusable(_data("a" * 64, **fields)) is taken
    _write(tmp_path / "20261201T000000Z-verify-1.jsonl", _data("a" * 64, **fields))
    assert bool(earlier_records({"a" * 64}, tmp_path).found) is taken


def test_the_runner_finds_the_record_stamping_wrote_and_reuses_it_as_it_was(tmp_path, monkeypatch, scenario):
    """key_for at planning and at stamping is one function of the same facts: a record written by one verify is
    found by the next for the same cell, and only for it and the arms asked."""
    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path))
    arms = known_arms()
    plan = [(scenario("fsdp2-multigpu"), arms["none"]), (scenario("fsdp2-multigpu"), arms["upstream"])]
    cells = planned_cells(plan)
    invocation = invocation_info("verify")
    ran = Record(scenario="fsdp2-multigpu", arm="none", outcome="error", wall_s=2.5)
    stamp_record(
        ran,
        scenario=cells[0].scenario,
        scenario_file=None,
        arm_fingerprint=arm_fingerprint(arms["none"]),
        invocation=invocation,
        device=cells[0].device,
    )
    assert ran.stamp.reuse_key == key_for(
        json.loads(cells[0].scenario.model_dump_json()),
        cells[0].device,
        "none",
        cells[0].fingerprint.patches,
        invocation,
    )
    _write(tmp_path / "20261201T000000Z-verify-1.jsonl", ran.written())

    reused = _reused(cells, frozenset({"none", "upstream"}), invocation)
    assert list(reused) == [0]  # upstream never ran here
    assert reused[0].stamp.reused_from.endswith("20261201T000000Z-verify-1.jsonl:1")
    again = reused[0].written()
    assert again["stamp"].pop("reused_from") and again == ran.written()  # the record as written, and where from
    assert _reused(cells, frozenset({"upstream"}), invocation) == {}  # none is not among the arms asked
    other_seed = planned_cells([(scenario("fsdp2-multigpu", seed=7), arms["none"])])
    assert _reused(other_seed, frozenset({"none"}), invocation) == {}
    # A Ray node's record has no key (its environment is not this host's digest).
    assert key_for({}, "cpu", "none", [], replace(invocation, inputs_sha256=None)) is None


def test_verify_reuses_the_arms_beside_the_patch_unless_fresh_or_keeping_traces():
    from harness.cli import build_parser

    assert reused_arms(Namespace(fresh=False, keep_traces=False), ["none", "upstream"]) == {"none", "upstream"}
    assert reused_arms(Namespace(fresh=True, keep_traces=False), ["none", "upstream"]) == frozenset()
    assert reused_arms(Namespace(fresh=False, keep_traces=True), ["none", "upstream"]) == frozenset()
    assert build_parser().parse_args(["verify", "--fresh"]).fresh is True
    assert build_parser().parse_args(["verify"]).fresh is False


def test_only_records_this_driver_signed_are_reused_and_the_rest_are_counted_once(tmp_path):
    """A record with the right reuse key that a pull request's code wrote into results/ (no MAC, or one made without
    the driver's key) is never reused; the driver's own record is; the driver's record edited after it was written
    (its outcome flipped) is not."""
    key = "a" * 64
    genuine = _data(key, outcome="mismatch", wall_s=1.0)
    _write(tmp_path / "20261201T000000Z-verify-1.jsonl", genuine)
    found = earlier_records({key}, tmp_path)
    assert found.found[key][0]["outcome"] == "mismatch" and MAC_FIELD not in found.found[key][0]
    assert (found.forged, found.unsigned, found.notes()) == (0, 0, [])

    forged = {**_data(key, outcome="pass", wall_s=2.0), MAC_FIELD: "0" * 64}
    edited = {**signed_record(genuine), "outcome": "pass"}  # the driver's line with its outcome flipped
    _write(tmp_path / "20261202T000000Z-verify-2.jsonl", forged, edited, signed=False)
    _write(tmp_path / "20261203T000000Z-verify-3.jsonl", _data(key, outcome="pass"), signed=False)  # no MAC at all
    found = earlier_records({key}, tmp_path)
    assert found.found[key][0]["outcome"] == "mismatch"  # the driver's own, older record: not the newer forgeries
    assert found.found[key][1].endswith("20261201T000000Z-verify-1.jsonl:1")
    assert (found.forged, found.unsigned) == (2, 1)
    assert found.notes() == [
        "2 record(s) in results/ not written by this harness: ignored for reuse",
        "1 record(s) in results/ without a MAC (written before records were signed, or not by this harness): read by "
        "reports, not reused",
    ]


def test_the_runner_reuses_no_forged_record_and_says_so_once(tmp_path, monkeypatch, scenario, capsys):
    """The attack of issue 71: an `upstream` record with the base's reuse key written into results/ by the PR's
    code. The runner takes nothing from it and says so once, on stderr."""
    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path))
    arms = known_arms()
    cells = planned_cells([(scenario("fsdp2-multigpu"), arms["upstream"])])
    invocation = invocation_info("verify")
    spec = json.loads(cells[0].scenario.model_dump_json())
    key = key_for(spec, cells[0].device, "upstream", cells[0].fingerprint.patches, invocation)
    payload = _data(key, arm="upstream", outcome="pass", scenario="fsdp2-multigpu", scenario_spec=spec)
    _write(tmp_path / "20261201T000000Z-verify-1.jsonl", payload, payload, signed=False)
    assert _reused(cells, frozenset({"upstream"}), invocation) == {}
    err = capsys.readouterr().err
    assert err.count("2 record(s) in results/ without a MAC") == 1
    _write(tmp_path / "20261202T000000Z-verify-2.jsonl", payload)  # the same record, as the driver writes it
    assert list(_reused(cells, frozenset({"upstream"}), invocation)) == [0]


def test_a_record_the_results_file_wrote_is_signed_and_reused(tmp_path, record):
    """The line records/store.py writes (its MAC made over the record as JSON, read back from the file's text) is
    the driver's own: reuse takes it, with its MAC left out of the record."""
    from harness.records.store import ResultsFile

    key = "e" * 64
    results = ResultsFile("verify", tmp_path)
    results.append(record(outcome="mismatch", command="verify", reuse_key=key, message="a lone \udc80 surrogate"))
    results.close()
    earlier = earlier_records({key}, tmp_path)
    assert set(earlier.found) == {key} and (earlier.forged, earlier.unsigned) == (0, 0)
    assert MAC_FIELD not in earlier.found[key][0]
