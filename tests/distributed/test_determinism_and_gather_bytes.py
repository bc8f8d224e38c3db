"""End-to-end properties that need real runs: determinism, byte accounting, the verify/rerun contract."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from harness.paths import RESULTS_DIR, ROOT, SCENARIOS_DIR
from harness.rank.model import hidden_size, load_config, vocab_size
from harness.spec.scenario import load_scenario


@pytest.fixture
def run_named(run_cell):
    def run(scenario_name: str, arm_name: str) -> dict:
        return run_cell(load_scenario(SCENARIOS_DIR / f"{scenario_name}.yaml"), arm_name)

    return run


def _gathered_lm_head_bytes(scenario_name: str) -> tuple[int, int]:
    scenario = load_scenario(SCENARIOS_DIR / f"{scenario_name}.yaml")
    config = load_config(scenario.model, scenario.model_overrides)
    world = scenario.ranks
    return world, (world - 1) * vocab_size(config) * hidden_size(config) * 4 // world


def test_same_seed_same_numbers_and_lm_head_gather_bytes(run_named):
    first, second = run_named("fsdp2-multigpu", "upstream"), run_named("fsdp2-multigpu", "upstream")
    assert first["outcome"] == second["outcome"] == "mismatch"
    assert first["parity"] == second["parity"]  # every number, bit for bit, on CPU
    world, expected = _gathered_lm_head_bytes("fsdp2-multigpu")
    for record in (first, second):
        other = record["comm"]["all_gather"]["by_origin"]["other"]
        # The patch's full_tensor(): one all-gather of the fp32 lm_head weight, (W-1)/W of it received per rank.
        assert other == {"count": 1, "bytes": expected}
    assert first["comm"]["all_gather"]["count"] == second["comm"]["all_gather"]["count"]
    assert first["comm"]["reduce_scatter"]["count"] == second["comm"]["reduce_scatter"]["count"] > 0


def test_lm_head_gather_bytes_at_four_ranks(run_named):
    record = run_named("fsdp2-multigpu-4", "upstream")
    world, expected = _gathered_lm_head_bytes("fsdp2-multigpu-4")
    assert world == 4
    assert record["comm"]["all_gather"]["by_origin"]["other"] == {"count": 1, "bytes": expected}


def _harness(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_verify_candidate_passes_and_upstream_fails_with_cells_named(tmp_path):
    out = tmp_path / "candidate.json"
    candidate = _harness("verify", "--patch", "patches/fsdp2-lmhead-forward.diff", "--scenario", "fsdp2-multigpu",
                         "--alone", "--json", str(out))
    assert candidate.returncode == 0, candidate.stdout + candidate.stderr
    records = json.loads(out.read_text())
    assert [(r["scenario"], r["arm"], r["outcome"]) for r in records] == [
        ("fsdp2-multigpu", "fsdp2-lmhead-forward", "pass")]
    for key in ("scenario", "arm", "world_size", "device", "backend", "outcome", "error", "parity", "comm",
                "versions", "wall_s"):
        assert key in records[0]

    upstream = _harness("verify", "--scenario", "fsdp2-multigpu", "--alone")
    assert upstream.returncode == 1, upstream.stdout + upstream.stderr
    assert "fsdp2-multigpu: mismatch" in upstream.stdout and "lm_head.weight" in upstream.stdout

    again = _harness("rerun", f"{out}:1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "same as the record's pass" in again.stdout


def test_a_record_written_by_a_pytest_scenario_item_can_be_rerun():
    """Scenario items (conftest.py) go through the same runner as the commands, so their records carry the
    scenario as it ran; `harness rerun` of one replays it."""
    started = time.time()
    # Not an xdist worker itself, whatever runs this test: its results file is then named pytest-main.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    item = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                           "scenarios/fsdp2-1gpu.yaml::upstream"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    assert item.returncode == 0, item.stdout + item.stderr
    written = [p for p in RESULTS_DIR.glob("*-pytest-main-*.jsonl") if p.stat().st_mtime >= started - 1]
    assert len(written) == 1, written
    again = _harness("rerun", f"{written[0]}:1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "same as the record's pass" in again.stdout


def test_rerun_after_the_patch_file_is_gone(tmp_path):
    """A record keeps the text of every diff its arm applied: rerun materialises the arm from it."""
    mine = tmp_path / "mine-fix.diff"
    mine.write_text((ROOT / "patches" / "fsdp2-lmhead-forward.diff").read_text())
    out = tmp_path / "mine.json"
    done = _harness("verify", "--patch", str(mine), "--scenario", "direct-1gpu", "--alone", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(out.read_text())[0]
    assert record["arm_patches"][0]["text"] == mine.read_text()
    mine.unlink()
    again = _harness("rerun", f"{out}:1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "same as the record's pass" in again.stdout and "no longer exists" in again.stderr
