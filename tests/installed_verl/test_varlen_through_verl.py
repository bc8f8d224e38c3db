"""The CPU varlen stand-in (rank/verl_side/varlen_attention.py) through verl's own patched Qwen3-VL forward, in a
subprocess (verl patches classes): three packed samples, each with an image, give the logits of the sdpa model run on
each sample alone. The stand-in's own maths against plain sdpa: tests/unit/rank/verl_side/test_varlen_attention.py."""

from __future__ import annotations

import json

from own_process import run_code  # tests/own_process.py (tests/ is on sys.path: its conftest)

MODEL_LEVEL = """
import json, torch
from harness.rank.oracle.batch import make_samples
from harness.rank.oracle.model import build_model
from harness.inputs.scenario import BatchSettings
model = build_model("tiny-qwen3-vl", 7).eval()
samples = make_samples(model, BatchSettings(micro_batch_size=3), 7, 0, 0)
def alone(m, s):
    ids = torch.cat([s.prompt_ids, s.response_ids])[None]
    return m(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=s.position_ids[1:, None],
             pixel_values=s.pixel_values, image_grid_thw=s.image_grid_thw, use_cache=False).logits[0]
with torch.no_grad():
    expected = [alone(model, s) for s in samples]
from harness.rank.verl_side.varlen_attention import ATTN_IMPLEMENTATION, install_varlen_attention
installed = install_varlen_attention()
from verl.models.transformers.monkey_patch import apply_monkey_patch
model.set_attn_implementation(ATTN_IMPLEMENTATION)
apply_monkey_patch(model, use_remove_padding=True)
ids = torch.cat([torch.cat([s.prompt_ids, s.response_ids]) for s in samples])[None]
pos = torch.cat([s.position_ids for s in samples], dim=-1)[:, None]   # (4, 1, nnz): verl's packed layout
with torch.no_grad():
    out = model(input_ids=ids, attention_mask=None, position_ids=pos,
                pixel_values=torch.cat([s.pixel_values for s in samples]),
                image_grid_thw=torch.cat([s.image_grid_thw for s in samples]), use_cache=False).logits[0]
diffs, start = [], 0
for s, e in zip(samples, expected):
    diffs.append(float((out[start:start + e.shape[0]] - e).abs().max()))
    start += e.shape[0]
print(json.dumps({"installed": installed, "diffs": diffs, "impl": model.config._attn_implementation}))
"""


def test_packed_model_forward_through_verl_matches_each_sample_alone(tmp_path):
    """Three packed samples, each with an image (vision tower: cu_seqlens), through verl's patched forward and
    the stand-in, equal the sdpa model run on each sample alone."""
    done = run_code(MODEL_LEVEL, folder=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["installed"] == ["cpu-varlen-attention"] and facts["impl"] == "cpu_flash_varlen"
    assert max(facts["diffs"]) < 1e-5, facts
