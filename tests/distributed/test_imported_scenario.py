"""`harness import` turns a verl run script into a scenario that runs: a file of verl overrides imported into a user's
checkout, its one cell under upstream verl run through `python -m harness run`, and judged as the shipped update
scenarios are (upstream's unreduced lm_head gradient shows in the update); each fixture script of verl's forms
(arrays, a launcher array, plain main_ppo lines) on the tiny model of its own family, under none, upstream and the
candidate. The user's checkout holds a scenario file that does not load: the imported one runs beside it."""

from __future__ import annotations

import json

import pytest
from user_checkout import copy_checkout, harness_in  # tests/user_checkout.py (tests/ is on sys.path)

from harness.paths import ROOT

SCRIPTS = ROOT / "tests" / "fixtures" / "verl_scripts"
ARMS = ("none", "upstream", "fsdp2-lmhead-forward")


def _records(tmp_path) -> dict:
    """The cells' records by arm."""
    (records,) = (tmp_path / "results").glob("*-run-*.jsonl")
    return {r["arm"]: r for r in (json.loads(line) for line in records.read_text().splitlines() if line.strip())}


def _import_and_run(tmp_path, script, name, arms=("upstream",)):
    checkout = copy_checkout(tmp_path)
    (checkout / "scenarios" / "mine-typo.yaml").write_text("ranks: 2\nprecison: fp32\n")  # fails only its own
    imported = harness_in(
        checkout, "import", str(script), "--out", f"scenarios/{name}.yaml", results=tmp_path / "r", timeout=120
    )
    assert imported.returncode == 0, imported.stdout + imported.stderr
    return harness_in(
        checkout,
        "run",
        "--scenario",
        name,
        *[word for arm in arms for word in ("--arm", arm)],
        results=tmp_path / "results",
        timeout=900,
        share_parent=True,  # the subject is the imported file, not the command's process tree
    )


def _failures(tmp_path) -> list[str]:
    """The cell's failures' words as its record holds them (the printed why leads with the first cause and cuts the
    rest)."""
    (records,) = (tmp_path / "results").glob("*-run-*.jsonl")
    (record,) = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    return [f["words"] for f in record["verdict"]["failures"]]


def test_an_imported_overrides_file_runs_and_upstream_fails_naming_lm_head(tmp_path):
    done = _import_and_run(tmp_path, SCRIPTS / "adamw_update.overrides", "imported-adamw")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stub = done.stdout.split("(write each reason):\n", 1)[1]
    assert stub.startswith("imported-adamw:\n  upstream:\n    outcome: mismatch\n"), stub
    assert any(f.startswith("update lm_head.weight: relative error") for f in _failures(tmp_path)), done.stdout[-3000:]


@pytest.mark.nightly  # the recipe's scenario is the nightly's; its sensitive twin is make test's
def test_the_imported_qwen3_vl_recipe_runs(tmp_path):
    """The recipe's KL loss against verl's ref engine, entropy 0, dynamic bsz and gradient checkpointing in the update
    (issue 48): imported (the plain main_ppo form), it runs on tiny Qwen3-VL: none crashes, upstream's unreduced
    lm_head gradient shows in the update, the candidate passes."""
    done = _import_and_run(tmp_path, SCRIPTS / "qwen3_vl_8b_grpo.sh", "imported-qwen3-vl-8b-grpo", ARMS)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    by_arm = _records(tmp_path)
    assert {r["stamp"]["scenario_spec"]["model"] for r in by_arm.values()} == {"tiny-qwen3-vl"}
    assert (by_arm["none"]["outcome"], by_arm["fsdp2-lmhead-forward"]["outcome"]) == ("error", "pass")
    assert by_arm["upstream"]["outcome"] == "mismatch"
    upstream_words = [f["words"] for f in by_arm["upstream"]["verdict"]["failures"]]
    assert any(w.startswith("update lm_head.weight: relative error") for w in upstream_words)


@pytest.mark.nightly  # three cells of verl's update on a MoE model
def test_the_imported_moe_launcher_script_runs_on_its_own_family(tmp_path):
    """Qwen3-VL-30B-A3B's script (a launcher array, Ulysses SP 4 -> 2, KL against a ref of SP 1): on tiny Qwen3-VL-MoE
    (verl's qwen3_vl.py, the file #6659 and the candidate change), as the shipped Qwen3-VL scenarios judge it."""
    done = _import_and_run(tmp_path, SCRIPTS / "qwen3_vl_30b_a3b_launcher.sh", "imported-moe", ARMS)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    by_arm = _records(tmp_path)
    assert {r["stamp"]["scenario_spec"]["model"] for r in by_arm.values()} == {"tiny-qwen3-vl-moe"}
    assert by_arm["none"]["outcome"] == "error"
    assert by_arm["upstream"]["outcome"] == "mismatch"
    assert any(f["words"].startswith("update lm_head.weight") for f in by_arm["upstream"]["verdict"]["failures"])
    assert by_arm["fsdp2-lmhead-forward"]["outcome"] == "pass", by_arm["fsdp2-lmhead-forward"]["verdict"]


@pytest.mark.nightly  # three cells of verl's update
def test_the_imported_qwen3_5_arrays_script_is_judged_on_qwen3_5_where_the_candidate_fails(tmp_path):
    """Qwen3.5-27B's script (bash arrays): on tiny Qwen3.5, verl's qwen3_5.py, which keeps #6659's full_tensor() in
    every arm (neither `none` nor the candidate changes that file): lm_head's gradient is wrong in all three. On
    tiny Qwen3-VL the candidate passed it (issue 58): a verdict on another family's file."""
    done = _import_and_run(tmp_path, SCRIPTS / "qwen3_5_27b_grpo_arrays.sh", "imported-qwen3-5", ARMS)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    by_arm = _records(tmp_path)
    assert {r["stamp"]["scenario_spec"]["model"] for r in by_arm.values()} == {"tiny-qwen3-5"}
    for arm in ARMS:
        assert by_arm[arm]["outcome"] == "mismatch", (arm, by_arm[arm]["verdict"])
        assert any(f["words"].startswith("update lm_head.weight") for f in by_arm[arm]["verdict"]["failures"]), arm
