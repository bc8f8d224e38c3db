"""The CPU varlen stand-in (rank/verl_side/varlen_attention.py) does flash-attention's varlen maths: each packed segment
attends only to itself, causally for text, non-causally for the vision tower. Checked against plain sdpa on each
unpacked sample; through verl's own patched Qwen3-VL forward: tests/installed_verl/test_varlen_through_verl.py."""

from __future__ import annotations

import pytest
import torch

from harness.rank.verl_side.varlen_attention import segments_from_position_ids, varlen_attention


def _qkv(total, heads=4, kv_heads=2, dim=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(1, total, heads, dim, generator=gen),
        torch.randn(1, total, kv_heads, dim, generator=gen),
        torch.randn(1, total, kv_heads, dim, generator=gen),
    )


def _per_sample_sdpa(q, k, v, bounds, causal, scale=None):
    outs = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        qs, ks, vs = (t[:, a:b].transpose(1, 2) for t in (q, k, v))
        ks, vs = (t.repeat_interleave(q.size(2) // k.size(2), dim=1) for t in (ks, vs))
        outs.append(
            torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=scale).transpose(1, 2)
        )
    return torch.cat(outs, dim=1)


def test_segments_restart_where_position_ids_are_zero():
    pos = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])
    assert segments_from_position_ids(pos) == [0, 3, 5, 9]


def test_packed_text_is_causal_per_sample():
    """Three samples packed with text position ids restarting at 0 (the last one verl's ulysses_pad tail)."""
    lengths = [5, 7, 2]
    q, k, v = _qkv(sum(lengths))
    pos = torch.cat([torch.arange(n) for n in lengths])[None]
    got = varlen_attention(q, k, v, None, q.size(1), is_causal=True, position_ids=pos, softmax_scale=0.3)
    want = _per_sample_sdpa(q, k, v, [0, 5, 12, 14], causal=True, scale=0.3)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    # Not the same as attending across samples: the stand-in is not plain causal sdpa over the packed row.
    whole = _per_sample_sdpa(q, k, v, [0, 14], causal=True, scale=0.3)
    assert (got[:, 5:] - whole[:, 5:]).abs().max() > 1e-3


def test_vision_segments_from_cu_seqlens_are_not_causal():
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    q, k, v = _qkv(10, heads=2, kv_heads=2)
    got = varlen_attention(
        q, k, v, None, 10, is_causal=False, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=6, max_length_k=6
    )
    torch.testing.assert_close(got, _per_sample_sdpa(q, k, v, [0, 4, 10], causal=False), rtol=0, atol=1e-6)


def test_padded_batches_are_refused():
    q, k, v = _qkv(4)
    with pytest.raises(NotImplementedError, match="attention_mask"):
        varlen_attention(q, k, v, torch.ones(1, 4), 4, is_causal=True)
