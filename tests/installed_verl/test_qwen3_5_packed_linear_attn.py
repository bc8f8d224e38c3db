"""A fact of the installed verl behind docs/FINDINGS.md's "Qwen3.5's linear attention on packed rows", read in a
subprocess (verl patches classes): verl's qwen3_5_gated_delta_net_forward on one packed row of three samples, with
cu_seqlens, against transformers' own Qwen3_5GatedDeltaNet run on each sample alone. On a host without
flash-linear-attention the layer's chunk rule is transformers' torch_chunk_gated_delta_rule, which takes **kwargs;
verl's probe (_call_accepts_kwarg) takes that for cu_seqlens support and hands it cu_seqlens, which it ignores: the
first sample is exact, each later one starts from the previous sample's recurrent state. The same rule behind a
signature that names no cu_seqlens sends verl to its own per-sample loop, which is exact. When verl fixes its probe
this test fails: the finding, the nightly scenario engine-qwen3-5-packed-samples and its expectations then change."""

from __future__ import annotations

import json

from own_process import run_code  # tests/own_process.py (tests/ is on sys.path: its conftest)

LAYER_LEVEL = """
import json, torch
from harness.rank.oracle.model import build_model
model = build_model("tiny-qwen3-5", 7).eval()
layer = model.model.language_model.layers[0].linear_attn
torch.manual_seed(0)
lengths = [7, 9, 12]
hidden = [torch.randn(1, n, 64) for n in lengths]
with torch.no_grad():
    alone = [layer(h)[0] for h in hidden]  # transformers' own forward, each sample alone
from verl.models.transformers.qwen3_5 import qwen3_5_gated_delta_net_forward
packed = torch.cat(hidden, dim=1)
cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
def per_sample():
    with torch.no_grad():
        out = qwen3_5_gated_delta_net_forward(layer, packed, cu_seqlens=cu, cu_seqlens_cpu=cu)[0]
    return [float((part - a).abs().max()) for part, a in zip(out.split(lengths), alone)]
rule = layer.chunk_gated_delta_rule
as_installed = per_sample()
def named(query, key, value, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=False):
    return rule(query, key, value, g=g, beta=beta, initial_state=initial_state,
                output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
layer.chunk_gated_delta_rule = named
print(json.dumps({"rule": rule.__name__, "conv_fn": layer.causal_conv1d_fn is not None,
                  "as_installed": as_installed, "per_sample_loop": per_sample()}))
"""


def test_verls_packed_gated_delta_rule_on_the_torch_fallback_runs_a_rows_samples_as_one_sequence(tmp_path):
    done = run_code(LAYER_LEVEL, folder=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["rule"] == "torch_chunk_gated_delta_rule" and not facts["conv_fn"], facts  # the CPU fallbacks
    first, *later = facts["as_installed"]
    assert first < 1e-6, facts  # the first sample starts from a zero state either way
    assert min(later) > 1e-3, facts  # measured 2.6e-3 and 3.4e-3: each later sample carries its predecessor's state
    assert max(facts["per_sample_loop"]) < 1e-6, facts  # verl's own per-sample loop: exact (measured <= 1.5e-9)
