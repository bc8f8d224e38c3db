"""Results files: one new file per invocation, never overwritten; records read back; stamps for re-running."""

from __future__ import annotations

import hashlib
import json

import pytest

from harness.errors import UsageError
from harness.inputs.scenario import Scenario
from harness.paths import ROOT, SCENARIOS_DIR
from harness.plan.arms import arm_fingerprint, known_arms
from harness.records import store as rec
from harness.records.measures import ArmFingerprint
from harness.records.results import Record
from harness.records.reuse_key import Invocation
from harness.records.store import ResultsFile, invocation_info, package_versions, read_records, stamp_record


def numbered(n: int) -> Record:
    """The smallest record, told apart by its scenario's name."""
    return Record(scenario=f"s{n}", arm="upstream", outcome="pass")


def line(n: int) -> str:
    return json.dumps({"scenario": f"s{n}", "arm": "upstream", "outcome": "pass"})


def test_results_file_is_new_and_named_after_the_command(tmp_path):
    results = ResultsFile("repro", tmp_path / "sub")  # the directory is created
    try:
        assert results.path.parent == tmp_path / "sub"
        assert results.path.suffix == ".jsonl" and "-repro-" in results.path.name
        assert results.path.is_file() and results.path.read_text() == ""
    finally:
        results.close()


def test_two_instances_give_two_files_and_neither_overwrites(tmp_path):
    first = ResultsFile("repro", tmp_path)
    first.append(numbered(1))
    first.close()
    try:
        second = ResultsFile("verify", tmp_path)
    except FileExistsError:  # pragma: no cover - a clash must never overwrite
        pytest.fail("a second results file could not be created")
    second.append(numbered(2))
    second.close()
    assert first.path != second.path
    assert read_records(first.path) == [numbered(1)]
    assert read_records(second.path) == [numbered(2)]


def test_a_name_clash_never_overwrites(tmp_path, monkeypatch):
    """Even if two instances get the same name, the existing file's records survive."""
    first = ResultsFile("repro", tmp_path)
    first.append(numbered(1))
    first.close()
    try:
        again = ResultsFile("repro", tmp_path)
        again.append(numbered(2))
        again.close()
        assert again.path != first.path
    except FileExistsError:
        pass
    assert read_records(first.path) == [numbered(1)]


def test_same_command_same_second_gives_two_files(tmp_path):
    a = ResultsFile("repro", tmp_path)
    b = ResultsFile("repro", tmp_path)
    a.append(numbered(1))
    b.append(numbered(2))
    a.close()
    b.close()
    assert a.path != b.path
    assert read_records(a.path) == [numbered(1)] and read_records(b.path) == [numbered(2)]


def test_append_read_roundtrip_and_each_line_is_flushed(tmp_path):
    results = ResultsFile("run", tmp_path)
    records = [
        Record(scenario="s", arm="a", outcome="pass", parity={"grad_worst_rel": 1e-7}),
        Record(scenario="s", arm="b", outcome="mismatch", path=tmp_path),
    ]  # non-JSON -> str
    results.append(records[0])
    # Flushed per record: a reader sees it while the writer is still open.
    assert read_records(results.path) == [records[0]]
    results.append(records[1])
    results.close()
    back = read_records(results.path)
    assert back[0] == records[0]
    assert back[1].written() == {**records[1].written(), "path": str(tmp_path)}
    assert len(results.path.read_text().splitlines()) == 2


def test_truncated_last_line_is_skipped(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(line(1) + "\n" + line(2) + "\n" + '{"scenario": "s3", "outco')
    assert read_records(path) == [numbered(1), numbered(2)]


def test_blank_lines_are_ignored(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(f"{line(1)}\n\n{line(2)}\n")
    assert read_records(path) == [numbered(1), numbered(2)]


def test_corrupt_middle_line_is_one_line_naming_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(f'{line(1)}\n{{"scenario": "s2", "cut\n{line(3)}\n')
    with pytest.raises(UsageError, match=f"^{path}:2: not a record") as caught:
        read_records(path)
    assert "\n" not in str(caught.value)


def test_package_versions_names_the_stack():
    versions = package_versions()
    assert {"python", "torch", "transformers", "verl"} <= set(versions)
    assert versions["torch"] and versions["verl"]


def test_stamp_record_adds_what_is_needed_to_rerun(tmp_path, scenario):
    scenario_file = SCENARIOS_DIR / "fsdp2-multigpu.yaml"
    invocation = invocation_info("verify")
    arm = known_arms()["none"]
    record = Record(scenario="fsdp2-multigpu", arm="none", outcome="error")
    multigpu = scenario("fsdp2-multigpu")
    stamped = stamp_record(
        record,
        scenario=multigpu,
        scenario_file=scenario_file,
        arm_fingerprint=arm_fingerprint(arm),
        invocation=invocation,
    )
    assert stamped is record and stamped.outcome == "error"
    assert stamped.stamp.versions == invocation.versions and stamped.stamp.versions["verl"]
    assert stamped.stamp.harness_commit == invocation.harness_commit
    assert stamped.stamp.harness_commit  # this checkout is a git repository
    assert stamped.stamp.command == "verify" and stamped.stamp.host
    assert stamped.stamp.scenario_file == "scenarios/fsdp2-multigpu.yaml"
    assert stamped.stamp.scenario_sha256 == hashlib.sha256(scenario_file.read_bytes()).hexdigest()
    assert [p.written() for p in stamped.stamp.arm_patches] == [
        {
            "file": "patches/none.diff",
            "sha256": hashlib.sha256((ROOT / "patches/none.diff").read_bytes()).hexdigest(),
            "text": (ROOT / "patches/none.diff").read_text(),
        }
    ]
    assert stamped.stamp.finished_at
    # The scenario as it ran, so `harness rerun` needs nothing but the record (every path stamps through here).
    assert Scenario.model_validate_json(json.dumps(stamped.stamp.scenario_spec.written())) == multigpu
    assert stamped.schema_version == 4  # what it is written in; a record without it is version 1
    json.dumps(stamped.written())  # a record is plain JSON


def test_stamp_record_outside_the_repo_and_without_a_file(tmp_path, scenario):
    outside = tmp_path / "mine.yaml"
    outside.write_text("ranks: 1\n")
    invocation = Invocation(versions={"torch": "x"}, harness_commit="abc", host="h", command="run")
    one_gpu = scenario("fsdp2-1gpu")
    stamped = stamp_record(
        Record(scenario="fsdp2-1gpu", arm="upstream", outcome="pass"),
        scenario=one_gpu,
        scenario_file=outside,
        arm_fingerprint=ArmFingerprint(name="upstream", patches=[]),
        invocation=invocation,
    )
    assert stamped.stamp.scenario_file == str(outside)
    assert stamped.stamp.scenario_sha256 == hashlib.sha256(b"ranks: 1\n").hexdigest()
    assert [p.written() for p in stamped.stamp.arm_patches] == []
    bare = stamp_record(
        Record(scenario="fsdp2-1gpu", arm="upstream", outcome="pass"),
        scenario=one_gpu,
        scenario_file=None,
        arm_fingerprint=ArmFingerprint(name="upstream"),
        invocation=invocation,
    )
    assert bare.stamp.scenario_file is None and bare.stamp.scenario_sha256 is None and bare.stamp.arm_patches == []


def test_harness_commit_marks_a_dirty_tree(monkeypatch, tmp_path):
    """The checkout's commit, with -dirty where a tracked file is edited; None outside a git repository."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    monkeypatch.setattr(rec, "ROOT", tmp_path)
    assert rec.harness_commit() is None
    git("init", "-q")
    (tmp_path / "x.py").write_text("x = 1\n")
    git("add", "x.py")
    git("-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", "x")
    commit = rec.harness_commit()
    assert commit is not None and len(commit) == 12 and not commit.endswith("-dirty")
    (tmp_path / "x.py").write_text("x = 2\n")
    assert rec.harness_commit() == f"{commit}-dirty"
