"""Environment adapter `cpu-varlen-attention`: a plain-torch stand-in for flash-attention's varlen kernel, so that
verl's Ulysses sequence parallelism runs as released on a CPU host.

Why: verl puts its all-to-all only inside the flash-attention path. `apply_monkey_patch` (ulysses_sp_size > 1 or
remove-padding) replaces transformers' `integrations.flash_attention._flash_attention_forward` with its
`_ulysses_flash_attention_forward`, which gathers the sequence and scatters the heads, then calls the kernel by the
module-level name `_flash_attention_forward` in verl/models/transformers/monkey_patch.py. A CPU host has no
flash-attn kernel behind that name. The stand-in takes its place and does the same maths with
`scaled_dot_product_attention`, one segment at a time:

  - segments from `cu_seq_lens_q` when given (the vision tower passes them, non-causal);
  - otherwise from the text position ids, a new segment wherever the position id is 0 (packed samples, and
    the tail verl's ulysses_pad appends, restart at 0) — the rule transformers uses to build cu_seqlens;
  - causal or not as the caller says (`is_causal`: the text decoder True, the vision tower False).

The model is loaded with an attention implementation whose name contains "flash" (transformers then routes the text
decoder and the vision tower through `flash_attention_forward`, with packed position ids and cu_seqlens), registered
with transformers' AttentionInterface. Nothing of verl changes: its slicing, all-to-all, gathers, gradient scaling and
labels run as released. tests/unit/rank/verl_side/test_varlen_attention.py checks the stand-in against sdpa on each
unpacked sample, tests/installed_verl/test_varlen_through_verl.py through verl's patched forward.
"""

from __future__ import annotations

import torch

NAME = "cpu-varlen-attention"
# The attention implementation name the model is loaded with: contains "flash" (transformers' test for the
# flash path, utils.generic.is_flash_attention_requested) and no "/" (which would make it a hub kernel).
ATTN_IMPLEMENTATION = "cpu_flash_varlen"
_installed: list[str] = []


def segments_from_position_ids(position_ids: torch.Tensor) -> list[int]:
    """Boundaries [0, ..., total] of the packed segments in one row of text position ids."""
    row = position_ids.reshape(-1)
    starts = torch.nonzero(row == 0).flatten().tolist()
    if not starts or starts[0] != 0:
        starts = [0] + starts
    return starts + [row.numel()]


def varlen_attention(
    query_states,
    key_states,
    value_states,
    attention_mask,
    query_length,
    is_causal=True,
    dropout=0.0,
    position_ids=None,
    softmax_scale=None,
    sliding_window=None,
    use_top_left_mask=False,
    softcap=None,
    deterministic=None,
    cu_seq_lens_q=None,
    cu_seq_lens_k=None,
    max_length_q=None,
    max_length_k=None,
    target_dtype=None,
    attn_implementation=None,
    **kwargs,
):
    """transformers' `_flash_attention_forward` contract: q, k, v (batch, seq, heads, head_dim), returns the
    same layout. Each packed segment attends only to itself."""
    if attention_mask is not None:
        raise NotImplementedError(f"{NAME}: padded batches (attention_mask) are not handled; verl's SP path packs")
    if sliding_window is not None or softcap is not None:
        raise NotImplementedError(f"{NAME}: sliding_window / softcap are not handled")
    if target_dtype is not None and query_states.dtype == torch.float32:
        # What transformers' fa_peft_integration_check does before the kernel: fp32 inputs go in target_dtype.
        query_states, key_states, value_states = (t.to(target_dtype) for t in (query_states, key_states, value_states))
    if cu_seq_lens_q is not None:
        if cu_seq_lens_k is not None and not torch.equal(cu_seq_lens_q, cu_seq_lens_k):
            raise NotImplementedError(f"{NAME}: different query and key segments are not handled")
        bounds = [int(x) for x in cu_seq_lens_q.tolist()]
    elif position_ids is not None and query_states.size(0) == 1:
        bounds = segments_from_position_ids(position_ids)
    else:
        bounds = None
    q, k, v = (t.transpose(1, 2) for t in (query_states, key_states, value_states))  # (b, heads, seq, dim)
    gqa = q.size(1) != k.size(1)
    drop = dropout if torch.is_grad_enabled() else 0.0

    def attend(qs, ks, vs):
        return torch.nn.functional.scaled_dot_product_attention(
            qs, ks, vs, dropout_p=drop, is_causal=bool(is_causal), scale=softmax_scale, enable_gqa=gqa
        )

    if bounds is None:
        out = attend(q, k, v)
    else:
        if bounds[-1] != q.size(2):
            raise ValueError(f"{NAME}: segments cover {bounds[-1]} positions, the sequence has {q.size(2)}")
        out = torch.cat(
            [attend(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a], dim=2
        )
    return out.transpose(1, 2)


def install_varlen_attention() -> list[str]:
    """Register the flash-named implementation and point verl's kernel name at the stand-in. Call after the
    host adapters and before verl loads the model. Returns the names of the adapters now on ([NAME])."""
    if _installed:
        return list(_installed)
    from transformers import AttentionInterface
    from transformers import modeling_flash_attention_utils as fa_utils
    from transformers.integrations.flash_attention import flash_attention_forward
    from verl.models.transformers import monkey_patch

    AttentionInterface.register(ATTN_IMPLEMENTATION, flash_attention_forward)
    # transformers preloads a flash kernel for any "flash" implementation when the model is built
    # (lazy_import_flash_attention); marking this name as the one loaded skips that: no kernel is used, the
    # stand-in below replaces the function that would call it.
    fa_utils._loaded_implementation = ATTN_IMPLEMENTATION
    monkey_patch._flash_attention_forward = varlen_attention
    _installed.append(NAME)
    return list(_installed)
