"""The typed results: what a rank may write (RankResult), what a record holds (Record), and records of either
schema version read back, with a line that is no record named by FILE:N."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from harness.commands.inspect import full_report
from harness.errors import UsageError
from harness.judge_cell.verdict import judge
from harness.launch.launch import RawRun
from harness.paths import ROOT
from harness.rank.worker import describe_error
from harness.records.results import (
    GROUPS,
    SCHEMA_VERSION,
    Measures,
    RankMeasures,
    RankResult,
    Record,
    merge_over_ranks,
    other_all_gather_bytes,
)
from harness.records.store import ResultsFile, load_record, load_records

# A record as the harness wrote it before the models (no schema_version): a direct-multigpu x upstream run.
SCHEMA_1 = ROOT / "tests/fixtures/records/schema-1.jsonl"
# A record of schema 2 (typed, still flat): an fsdp2-multigpu x upstream run as pytest's cells wrote it.
SCHEMA_2 = ROOT / "tests/fixtures/records/schema-2.jsonl"
# A record of schema 3 (stamp and verdict in groups, the measures flat): an engine-update-3 x upstream run.
SCHEMA_3 = ROOT / "tests/fixtures/records/schema-3.jsonl"


def test_a_rank_setting_an_undeclared_field_fails_at_that_line_and_its_record_names_it():
    """The rank builds its RankResult itself (rank/worker.py main): a measure the model does not declare raises where
    the rank sets it, and the error the rank writes (describe_error) says which."""
    out = RankResult(rank=1, world_size=2, device="cpu", error=None)
    out.step_s = 0.25  # a declared one is taken
    with pytest.raises(ValidationError, match="new_measure") as caught:
        out.new_measure = 1
    with pytest.raises(ValidationError, match="step_s"):
        out.step_s = "fast"  # a declared one of the wrong type too
    out.error = describe_error(caught.value, "compare", 1)
    assert out.error.phase == "compare" and "new_measure" in out.error.full_message
    written = out.model_dump(exclude_unset=True)
    assert written["step_s"] == 0.25 and "new_measure" not in written
    assert RankResult.model_validate(json.loads(json.dumps(written, default=str))).error.type == "ValidationError"


def test_an_undeclared_rank_field_is_refused():
    with pytest.raises(ValidationError, match="new_measure"):
        RankResult.model_validate({"rank": 0, "world_size": 1, "device": "cpu", "new_measure": 1})


def test_judge_names_the_rank_file_and_the_undeclared_field(tmp_path, scenario):
    result = {"rank": 0, "world_size": 1, "device": "cpu", "error": None, "new_measure": 1}
    raw = RawRun(scenario("fsdp2-1gpu"), "upstream", "cpu", 1, tmp_path, rank_results={0: result}, returncode=0)
    with pytest.raises(ValueError, match=r"rank0\.json: field 'new_measure'"):
        judge(raw)


def test_a_measure_is_declared_once_and_merged_over_ranks_by_its_rule(tmp_path, scenario):
    """RankMeasures declares a measure for both models; judge merges it by the rule on its field: rank 0's value
    (adapters), the largest (peak_rss_bytes, step_s), the first rank's that wrote one (verl_file)."""
    assert set(RankMeasures.model_fields) <= set(RankResult.model_fields) & set(Measures.model_fields)
    rules = {name: f.json_schema_extra["merge"] for name, f in RankMeasures.model_fields.items()}
    assert rules["adapters"] == "rank 0" and rules["peak_rss_bytes"] == "max" and rules["verl_file"] == "first"
    ranks = [
        {"adapters": ["a"], "peak_rss_bytes": 100, "step_s": 0.5, "saved_lm_head_bytes": None},
        {"adapters": ["b"], "peak_rss_bytes": 300, "step_s": 0.25, "verl_file": "/v/__init__.py"},
    ]
    ranks[1]["error"] = {"type": "RuntimeError", "message": "boom", "phase": "compare", "rank": 1}
    results = {r: {"rank": r, "world_size": 2, "device": "cpu", "error": None} | m for r, m in enumerate(ranks)}
    raw = RawRun(scenario("fsdp2-multigpu"), "upstream", "cpu", 2, tmp_path, rank_results=results, returncode=0)
    merged = merge_over_ranks([RankResult.model_validate(results[r]) for r in (0, 1)])
    assert merged == {
        "adapters": ["a"],
        "peak_rss_bytes": 300,
        "step_s": 0.5,
        "verl_file": "/v/__init__.py",
        "saved_lm_head_bytes": None,  # set to None by a rank (not measured on its path): kept so
    }
    record = judge(raw)  # an error (rank 1's): what the ranks measured is kept
    assert record.outcome == "error" and (
        record.measures.adapters,
        record.measures.peak_rss_bytes,
        record.measures.verl_file,
    ) == (
        ["a"],
        300,
        "/v/__init__.py",
    )


def test_report_full_shows_the_peak_resident_memory(record):
    assert "peak resident memory of a rank (the largest): 3 MiB" in full_report(record(peak_rss_bytes=3 * 2**20), "r")
    layout = {"trainer": "v1", "response_mask": "nested", "response_lengths": [11, 8]}
    assert "batch: the v1 trainer's, response_mask nested, response lengths [11, 8]" in full_report(
        record(batch_layout=layout), "r"
    )
    assert "peak resident" not in full_report(record(), "r")


@pytest.mark.parametrize("path, version", [(SCHEMA_1, 1), (SCHEMA_2, 2), (SCHEMA_3, 3)])
def test_an_older_record_loads_and_reads_the_same_values_through_the_groups(path, version):
    """Schemas 1 and 2 wrote every field flat, schema 3 its measures; read back, each field of a group is in its
    group with the value the line holds, every other field where it was, and the record written again reads back
    the same."""
    line = json.loads(path.read_text().splitlines()[0])
    [record] = load_records(path)
    assert record.schema_version == version and "measures" not in line
    assert ("stamp" in line and "verdict" in line) == (version == 3)
    # What the line holds by name, its stamp and verdict groups (schema 3) opened.
    flat = {k: v for k, v in line.items() if k not in ("stamp", "verdict")} | line.get("stamp", {})
    flat |= line.get("verdict", {})
    groups = {group: getattr(record, group).written() for group in GROUPS}
    moved = {name: group for group, fields in groups.items() for name in fields}
    assert set(moved) == {name for name in flat if any(name in model.model_fields for model in GROUPS.values())}
    assert {"host", "harness_commit", "scenario_spec", "versions"} <= set(groups["stamp"])
    assert {"error", "failures", "why", "diagnosis"} <= set(groups["verdict"])
    assert {"comm", "parity", "residency", "verl_config", "step_s", "lm_head_shape"} <= set(groups["measures"])
    written = record.written()
    for name, value in flat.items():
        if name == "failures":  # typed since (records/results.py Failure): the old words load as failures' words
            continue
        read = groups[moved[name]][name] if name in moved else written[name]
        assert json.dumps(read, sort_keys=True) == json.dumps(value, sort_keys=True), name
    assert record.verdict.why == flat["why"] and record.stamp.host == flat["host"]
    assert record.verdict.failure_words() == flat["failures"] and record.outcome == flat["outcome"] == "mismatch"
    assert {f.kind for f in record.verdict.failures} == {"why"}
    assert record.stamp.scenario_spec.written()["name"] == flat["scenario"]
    # Each measure read where it lives now, typed: the headline figure, the worst gradient, the step's time.
    assert other_all_gather_bytes(record) == flat["comm"]["all_gather"]["by_origin"]["other"]["bytes"]
    assert record.measures.parity.grad_worst_param == flat["parity"]["grad_worst_param"]
    assert record.measures.step_s == flat["step_s"] and record.measures.lm_head_shape == flat["lm_head_shape"]
    if version == 3:  # an update's numbers, per optimizer step
        assert len(record.measures.update.steps) == len(flat["update"]["steps"]) > 0
    assert Record.model_validate(json.loads(json.dumps(written))).written() == written


def test_the_groups_share_no_field_with_each_other_or_the_record():
    """nested_shape places a flat field by its name: a name in two groups, or in a group and on the record, would
    be placed wrongly."""
    names = [name for model in GROUPS.values() for name in model.model_fields]
    assert len(names) == len(set(names))
    assert not set(names) & set(Record.model_fields)


def test_a_schema_1_record_renders(cli_in_process):
    done = cli_in_process("report", SCHEMA_1)
    assert done.returncode == 0, done.stderr
    assert "direct-multigpu" in done.stdout and "mismatch" in done.stdout
    full = cli_in_process("report", "--full", f"{SCHEMA_1}:1")
    assert full.returncode == 0, full.stderr
    assert "lm_head.weight" in full.stdout


def test_a_new_record_is_written_in_its_groups_and_reads_back_the_same(tmp_path, record):
    written = record(error={"type": "RuntimeError", "message": "boom", "phase": "forward", "rank": 1}).written()
    results = ResultsFile("test", tmp_path)
    results.append(Record.model_validate(written))
    results.close()
    back = json.loads(results.path.read_text())
    assert back.pop("mac") and back == written and back["schema_version"] == SCHEMA_VERSION == 4
    assert back["verdict"]["error"] == {"type": "RuntimeError", "message": "boom", "phase": "forward", "rank": 1}
    assert back["stamp"]["host"] and not {"error", "host", "failures", "versions"} & set(back)
    assert back["measures"]["comm"]["all_gather"]["count"] == 16 and not {"comm", "parity"} & set(back)
    # A group that holds nothing is not written: a record without measures has no "measures".
    assert "measures" not in Record(scenario="s", arm="a", outcome="skipped").written()
    assert load_record(f"{results.path}:1").written() == written


def test_a_field_of_a_group_set_on_the_record_itself_is_refused_naming_its_place(record):
    rec = record()
    with pytest.raises(AttributeError, match=r"record\.stamp\.reused_from"):
        rec.reused_from = "results/x.jsonl:1"
    with pytest.raises(AttributeError, match=r"record\.verdict\.why"):
        rec.why = "because"
    with pytest.raises(AttributeError, match=r"record\.measures\.step_s"):
        rec.step_s = 2.0
    rec.measures.step_s = 2.0
    assert rec.written()["measures"]["step_s"] == 2.0 and "step_s" not in rec.written()
    rec.verdict.why = "because"
    assert rec.written()["verdict"]["why"] == "because" and "why" not in rec.written()


def test_unknown_fields_of_an_old_record_are_kept(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"scenario": "s", "arm": "a", "outcome": "pass", "gone_field": [1]}) + "\n")
    [old] = load_records(path)
    assert old.written()["gone_field"] == [1]


def test_a_stamps_verl_tree_written_as_a_plain_object_loads_typed_and_writes_back_the_same(tmp_path):
    """Records written before VerlTree was a model hold the tree as the dict plan/verl_trees.py dumped (six keys);
    hand-made ones (tests) hold fewer. Both load into the typed tree and are written back unchanged."""
    whole = {"path": "/src/verl", "ref": "main", "commit": "a" * 40, "dirty": False, "version": "0.9.1", "key": "k"}
    part = {"path": "/src/verl", "commit": "b" * 40, "dirty": True}
    path = tmp_path / "old.jsonl"
    lines = [{"scenario": "s", "arm": "a", "outcome": "pass", "stamp": {"verl_tree": t}} for t in (whole, part)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    first, second = load_records(path)
    assert first.stamp.verl_tree.commit == "a" * 40 and first.stamp.verl_tree.spec == f"/src/verl@{'a' * 40}"
    assert second.stamp.verl_tree.ref is None and second.stamp.verl_tree.spec == "/src/verl"  # edits: on disk
    assert [r.written()["stamp"]["verl_tree"] for r in (first, second)] == [whole, part]
    path.write_text(json.dumps({"scenario": "s", "arm": "a", "outcome": "pass", "stamp": {"verl_tree": {}}}))
    with pytest.raises(UsageError, match=r"old\.jsonl:1: .*stamp\.verl_tree\.path"):  # a tree names its path
        load_records(path)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"outcome": "passed"}, "outcome"),
        ({"world_size": "two"}, "world_size"),
        ({"error": {"rank": 0}}, "verdict.error.type"),
    ],
)
def test_a_line_that_is_no_record_is_one_line_naming_file_line_and_field(tmp_path, record, change, field):
    path = tmp_path / "r.jsonl"
    good = json.dumps(record().written())
    path.write_text(good + "\n" + json.dumps({**record().written(), **change}) + "\n" + good + "\n")
    with pytest.raises(UsageError) as caught:
        load_records(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:2: field '{field}': ") and "\n" not in message


def test_a_bad_record_through_the_cli_is_a_usage_error(tmp_path, record, cli_in_process):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({**record().written(), "outcome": "passed"}) + "\n")
    assert "r.jsonl:1: field 'outcome'" in cli_in_process.usage_error("report", path)
