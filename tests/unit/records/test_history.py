"""records/history.py: the one reader of the results history, newest file first, each record addressed FILE:N (its
line), a line cut short by a kill passed over; reuse (plan/reuse.py), estimate (plan/estimate.py) and rerun
(records/store.py load_record) read through it and agree on the addresses."""

from __future__ import annotations

import json

import pytest

from harness.errors import UsageError
from harness.plan.estimate import previous_durations
from harness.plan.reuse import earlier_records
from harness.records.history import history, newest_results_file, split_address
from harness.records.signing import signed_record
from harness.records.store import load_record, read_records

pytestmark = pytest.mark.unit

HOST = "Intel(R) Xeon(R) Processor, 2 cores"
KEY = "a" * 64


def _line(record) -> str:
    return json.dumps(signed_record(record.written()), default=str, sort_keys=True) + "\n"


@pytest.fixture
def results(tmp_path, record, scenario):
    """Two results files: the older with two records, the newer with one and a last line cut short by a kill."""
    spec = json.loads(scenario("fsdp2-multigpu").model_dump_json())
    stamp = dict(host=HOST, scenario_spec=spec, command="verify", reuse_key=KEY)
    directory = tmp_path / "results"
    directory.mkdir()
    older = [
        record(arm="none", wall_s=3.0, finished_at="2026-12-01T09:00:00+00:00", **stamp),
        record(arm="upstream", wall_s=4.0, finished_at="2026-12-01T09:00:05+00:00", **stamp),
    ]
    newer = record(arm="upstream", wall_s=6.0, finished_at="2026-12-02T09:00:00+00:00", **stamp)
    (directory / "20261201T090000Z-verify-1.jsonl").write_text("".join(map(_line, older)))
    (directory / "20261202T090000Z-verify-2.jsonl").write_text(_line(newer) + _line(newer)[:40])
    return directory, older, newer


def test_files_come_newest_first_and_a_cut_last_line_is_passed_over(results):
    directory, older, newer = results
    texts = list(history(directory))
    assert [t.path.name for t in texts] == ["20261202T090000Z-verify-2.jsonl", "20261201T090000Z-verify-1.jsonl"]
    assert [n for n, _ in texts[0].records()] == [1]  # line 2 was cut by a kill
    assert [(n, d["arm"]) for n, d in texts[1].records(newest_first=True)] == [(2, "upstream"), (1, "none")]
    assert newest_results_file(directory) == texts[0].path
    assert read_records(texts[0].path) == [newer]  # strict, but a cut last line is no error


def test_a_bad_line_before_the_last_names_itself_when_a_file_is_read_on_its_own(results):
    directory, _, newer = results
    path = directory / "20261203T090000Z-run-3.jsonl"
    path.write_text('{"cut\n' + _line(newer))
    with pytest.raises(UsageError, match=r"20261203T090000Z-run-3.jsonl:1: not a record"):
        read_records(path)
    assert [n for n, _ in next(history(directory)).records()] == [2]  # the history passes it over


def test_reuse_estimate_and_rerun_read_the_same_history_and_the_same_addresses(results):
    directory, older, newer = results
    [(data, where)] = earlier_records({KEY}, directory).found.values()
    assert where.endswith("20261202T090000Z-verify-2.jsonl:1") and data["measures"] == newer.written()["measures"]
    path, line = split_address(where)
    assert line == 1 and load_record(f"{directory / path.name}:{line}") == newer
    assert load_record(f"{directory / '20261201T090000Z-verify-1.jsonl'}:2") == older[1]
    assert load_record(str(directory / "20261201T090000Z-verify-1.jsonl")) == older[1]  # FILE: its last record
    spec = older[0].stamp.scenario_spec.written()
    durations = previous_durations(directory, HOST, {"fsdp2-multigpu": spec})
    assert durations == {("fsdp2-multigpu", "upstream"): 6.0, ("fsdp2-multigpu", "none"): 3.0}
    with pytest.raises(UsageError, match="record 3 does not exist"):
        load_record(f"{directory / '20261201T090000Z-verify-1.jsonl'}:3")
