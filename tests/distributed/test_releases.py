"""`harness releases` on a real older release, end to end: verl 0.8.0's own environment (built from
constraints/verl-0.8.0.txt by uv, from the package registry), its facts read from its source, direct-1gpu run on
0.8.0 as released, and the candidate patch, written against 0.9.x, reported as not applying with its hunk.

0.8.0 needs no adapter: the direct path's verl API (apply_monkey_patch's keywords, apply_fsdp2,
get_shard_placement_fn) is the same from 0.6.0 to 0.9.1. What 0.8.0 needs of its own is its environment: it asks
for numpy<2, which the main set cannot give it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from harness.paths import ROOT


def _releases(results, release: str, timeout: int) -> list[dict]:
    """`harness releases` of one release on direct-1gpu, its records written under `results`."""
    done = subprocess.run([sys.executable, "-m", "harness", "releases", "--release", release, "--scenario",
                           "direct-1gpu"], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HARNESS_RESULTS_DIR": str(results)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [path] = results.glob("*-releases-*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_older_release_runs_in_its_own_environment_and_the_candidate_does_not_apply(tmp_path):
    results = tmp_path / "results"
    records = {r["arm"]: r for r in _releases(results, "0.8.0", timeout=1500)}
    assert set(records) == {"upstream", "fsdp2-lmhead-forward"}

    released = records["upstream"]
    assert released["release"] == "0.8.0" and released["versions"]["verl"] == "0.8.0"
    assert released["release_facts"]["lm_head_unit"]["value"] == "own unit (untied)"
    assert released["release_facts"]["lm_head_weight_read"]["value"] == "as is (self.lm_head.weight)"
    # Before #6659: the fused forward reads the sharded weight outside lm_head's own unit.
    assert released["outcome"] == "error", released
    assert "mixed torch.Tensor and DTensor" in released["error"]["message"]

    candidate = records["fsdp2-lmhead-forward"]
    assert candidate["outcome"] == "skipped"
    assert candidate["skipped_reason"].startswith("does not apply: ")
    assert "hunk #" in candidate["skipped_reason"] and "verl/models/transformers/qwen3_vl.py" in \
        candidate["skipped_reason"]
    table = (results / "releases.md").read_text()
    assert "| 0.8.0 " in table and "does not apply (hunk #" in table


def test_a_release_written_for_transformers_4_is_reported_from_its_source(tmp_path):
    records = _releases(tmp_path / "results", "0.7.0", timeout=600)
    assert {r["arm"] for r in records} == {"upstream", "fsdp2-lmhead-forward"}
    for record in records:
        assert record["outcome"] == "skipped" and record["skipped_reason"].startswith("not run: written for "
                                                                                    "transformers 4.x")
        # Before 0.7.1 verl wraps no lm_head unit of its own: lm_head's weight belongs to the root unit.
        assert record["release_facts"]["lm_head_unit"]["value"] == "root unit"
        assert record["release_facts"]["lm_head_weight_read"]["value"] == "as is (self.lm_head.weight)"
