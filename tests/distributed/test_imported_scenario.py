"""`harness import` turns a verl run script into a scenario that runs: a file of verl overrides imported into a user's
checkout, its one cell under upstream verl run through `python -m harness run`, and judged as the shipped update
scenarios are (upstream's unreduced lm_head gradient shows in the update)."""

from __future__ import annotations

import json

import pytest
from user_checkout import copy_checkout, harness_in  # tests/user_checkout.py (tests/ is on sys.path)

from harness.paths import ROOT

SCRIPTS = ROOT / "tests" / "fixtures" / "verl_scripts"


def _import_and_run(tmp_path, script, name):
    checkout = copy_checkout(tmp_path)
    imported = harness_in(
        checkout, "import", str(script), "--out", f"scenarios/{name}.yaml", results=tmp_path / "r", timeout=120
    )
    assert imported.returncode == 0, imported.stdout + imported.stderr
    return harness_in(
        checkout,
        "run",
        "--scenario",
        name,
        "--arm",
        "upstream",
        results=tmp_path / "results",
        timeout=900,
        share_parent=True,  # the subject is the imported file, not the command's process tree
    )


def _failures(tmp_path) -> list[str]:
    """The cell's failures as its record holds them (the printed why leads with the first cause and cuts the rest)."""
    (records,) = (tmp_path / "results").glob("*-run-*.jsonl")
    (record,) = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    return record["verdict"]["failures"]


def test_an_imported_overrides_file_runs_and_upstream_fails_naming_lm_head(tmp_path):
    done = _import_and_run(tmp_path, SCRIPTS / "adamw_update.overrides", "imported-adamw")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stub = done.stdout.split("(write each reason):\n", 1)[1]
    assert stub.startswith("imported-adamw:\n  upstream:\n    outcome: mismatch\n"), stub
    assert any(f.startswith("update lm_head.weight: relative error") for f in _failures(tmp_path)), done.stdout[-3000:]


@pytest.mark.nightly  # the recipe's scenario is the nightly's; its sensitive twin is make test's
def test_the_imported_qwen3_vl_recipe_runs(tmp_path):
    """The recipe's KL loss against verl's ref engine, entropy 0, dynamic bsz and gradient checkpointing in the update
    (issue 48): imported, it runs, and upstream's unreduced lm_head gradient shows in the update."""
    done = _import_and_run(tmp_path, SCRIPTS / "qwen3_vl_8b_grpo.sh", "imported-qwen3-vl-8b-grpo")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stub = done.stdout.split("(write each reason):\n", 1)[1]
    assert "outcome: mismatch" in stub, stub
    assert any(f.startswith("update lm_head.weight: relative error") for f in _failures(tmp_path)), done.stdout[-3000:]
