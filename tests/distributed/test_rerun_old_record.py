"""A record written before records had a schema_version (version 1) reruns as it stands: its scenario_spec holds
the whole scenario, and the typed loader reads it like a new one."""

from __future__ import annotations

from harness.paths import ROOT

SCHEMA_1 = ROOT / "tests/fixtures/records/schema-1.jsonl"  # direct-multigpu x upstream, a mismatch


def test_a_schema_1_record_reruns_with_the_same_outcome(launching_cli):
    done = launching_cli("rerun", f"{SCHEMA_1}:1", timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "same as the stored record's mismatch" in done.stdout, done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "direct-multigpu" in line]
    assert [r.split("|")[1].strip() for r in rows] == ["stored record", "new run"], done.stdout
    [new] = launching_cli.results_files("rerun")
    assert '"schema_version": 4' in new.read_text()  # the new run is written in the current schema
