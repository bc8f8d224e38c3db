"""`harness releases` on a real older release, end to end: verl 0.8.0's own environment (built from
constraints/verl-0.8.0.txt by uv, from the package registry), its facts read from its source, direct-1gpu run on
0.8.0 as released, and the candidate patch, written against 0.9.x, reported as not applying with its hunk.

0.8.0 needs no adapter: the direct path's verl API (apply_monkey_patch's keywords, apply_fsdp2,
get_shard_placement_fn) is the same from 0.6.0 to 0.9.1. What 0.8.0 needs of its own is its environment: it asks
for numpy<2, which the main set cannot give it. 0.7.0, written for transformers 4.x, runs the same way on
transformers 4.57: what differs there is the harness's side (rank/oracle/transformers_compat.py), never verl's.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.paths import ROOT
from harness.records.results import Record
from harness.records.store import load_records

# The nightly's (make test-nightly): each release runs in its own environment, a venv built per release.
pytestmark = pytest.mark.nightly


def _releases(harness_cli, release: str, timeout: int) -> list[Record]:
    """`harness releases` of one release on direct-1gpu, its records written under harness_cli.results_dir."""
    done = harness_cli("releases", "--release", release, "--scenario", "direct-1gpu", timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [path] = harness_cli.results_files("releases")
    return load_records(path)


def test_an_older_release_runs_in_its_own_environment_and_the_candidate_does_not_apply(harness_cli):
    results = harness_cli.results_dir
    records = {r.arm: r for r in _releases(harness_cli, "0.8.0", timeout=1500)}
    assert set(records) == {"upstream", "fsdp2-lmhead-forward"}

    released = records["upstream"]
    assert released.stamp.release == "0.8.0" and released.stamp.versions["verl"] == "0.8.0"
    assert released.stamp.release_facts["lm_head_unit"]["value"] == "own unit (untied)"
    assert released.stamp.release_facts["lm_head_weight_read"]["value"] == "as is (self.lm_head.weight)"
    # Before #6659: the fused forward reads the sharded weight outside lm_head's own unit.
    assert released.outcome == "error", released
    assert "mixed torch.Tensor and DTensor" in released.verdict.error.message

    candidate = records["fsdp2-lmhead-forward"]
    assert candidate.outcome == "skipped"
    assert candidate.verdict.skipped_reason.startswith("does not apply: ")
    assert (
        "hunk #" in candidate.verdict.skipped_reason
        and "verl/models/transformers/qwen3_vl.py" in candidate.verdict.skipped_reason
    )
    table = (results / "releases.md").read_text()
    assert "| 0.8.0 " in table and "does not apply (hunk #" in table


def test_a_release_written_for_transformers_4_runs_on_transformers_4(harness_cli):
    """0.7.0 in its own environment with transformers 4.57 (scenarios/releases.yaml's release_pins), the harness's
    model and batch built through the transformers 4 adapters (rank/oracle/transformers_compat.py)."""
    records = {r.arm: r for r in _releases(harness_cli, "0.7.0", timeout=1500)}
    assert set(records) == {"upstream", "fsdp2-lmhead-forward"}
    released = records["upstream"]
    assert released.stamp.versions["verl"] == "0.7.0" and released.stamp.versions["transformers"].startswith("4.57.")
    assert released.measures.adapters == ["rope-parameters", "rope-index-ids"]
    # Before 0.7.1 verl wraps no lm_head unit of its own: lm_head's weight belongs to the root unit, gathered for
    # the whole forward, so the fused forward reads it whole.
    assert released.stamp.release_facts["lm_head_unit"]["value"] == "root unit"
    assert released.stamp.release_facts["lm_head_weight_read"]["value"] == "as is (self.lm_head.weight)"
    assert released.outcome == "pass", released
    candidate = records["fsdp2-lmhead-forward"]
    assert candidate.outcome == "skipped" and candidate.verdict.skipped_reason.startswith("does not apply: ")


POSITIONS = """
def positions():
    from types import SimpleNamespace
    import transformers
    from harness.rank.oracle.batch import make_micro_batch, with_position_ids
    from harness.rank.oracle.model import build_model
    model = build_model("tiny-qwen3-vl", 1234)
    rotary = model.model.language_model.rotary_emb
    spec = SimpleNamespace(micro_batch_size=2, seq_len=32, response_len=12, images_per_sample=1, image_grid=[1, 4, 4])
    batch = with_position_ids(model, make_micro_batch(model.config, spec, 1234, 0, 0))
    return {"transformers": transformers.__version__, "mrope_section": list(rotary.mrope_section),
            "inv_freq": rotary.inv_freq.tolist(), "position_ids": batch.position_ids.tolist()}
"""


def test_transformers_4_and_5_build_the_same_rope_and_position_ids():
    """The transformers 4 adapters (rank/oracle/transformers_compat.py) give the tiny model the same rotary embedding
    and the batch the same M-RoPE position ids under transformers 4.57 (0.7.0's environment, in a subprocess) as under
    the installed transformers 5."""
    from harness.inputs.release_plan import load_release_plan
    from harness.plan.release_envs import ensure_env
    from harness.processes.bytecode import run_environment

    python = ensure_env("0.7.0", load_release_plan().pins_for("0.7.0"))
    script = POSITIONS + "\nimport json\nprint(json.dumps(positions()))\n"
    done = subprocess.run(
        [str(python), "-c", script], cwd=ROOT, env=run_environment(python), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    old = json.loads(done.stdout.strip().splitlines()[-1])
    namespace = {}
    exec(POSITIONS, namespace)  # noqa: S102 - the same function, run here on the installed transformers 5
    new = namespace["positions"]()
    assert old["transformers"].startswith("4.57.") and new["transformers"].startswith("5.")
    assert old["mrope_section"] == new["mrope_section"] == [4, 2, 2]
    assert old["inv_freq"] == new["inv_freq"]
    assert old["position_ids"] == new["position_ids"]
