"""Environment adapter `cpu-bert-padding`: plain-torch stand-ins for the four functions verl before #7127
(2026-08-17, its pure-torch fallbacks) takes from `flash_attn.bert_padding` on the packed (remove-padding) path, so
that every verl commit from 0.8.0 on runs its engine on a host without flash-attn (which ships CUDA wheels only).

Why: those trees' `verl/utils/attention_utils.py` resolves index_first_axis, pad_input, rearrange and unpad_input on
every call through its `_get_attention_functions()`, which imports `flash_attn.bert_padding` on any host that is
not an NPU; verl's engine unpads each batch through it (`verl/workers/utils/padding.py`), so every engine cell errors
with `ModuleNotFoundError: No module named 'flash_attn'` before verl's own code has done anything. The adapter wraps
that resolver: verl's own resolution is tried first (flash-attn or the NPU's functions where there are any) and only
the ImportError of flash-attn itself is answered with the stand-ins, the same maths as flash-attn's (and as the
fallbacks verl added in #7127). It is installed only where it is needed: the real flash_attn absent and the tree
without fallbacks of its own (`installed_for`). Other imports of flash-attn in those trees (the legacy dp_actor's
`torch_functional` helpers, Megatron's, the triton cross-entropy) are left as they are: one that runs still raises
the import error naming flash_attn.

tests/unit/rank/verl_side/test_bert_padding.py checks each stand-in against a plain per-row reference on small tensors.
"""

from __future__ import annotations

import importlib.util
import re

import torch

NAME = "cpu-bert-padding"
_installed: list[str] = []


def index_first_axis(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """flash_attn.bert_padding.index_first_axis: the rows of `tensor` (first axis) at `indices`; the gradient flows
    back to those rows (indexing is differentiable, as flash-attn's gather is)."""
    if tensor.ndim < 2:
        raise ValueError(f"{NAME}: index_first_axis wants at least 2 dims, got {tuple(tensor.shape)}")
    return tensor[indices]


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """flash_attn.bert_padding.pad_input: (nnz, ...) rows put back at `indices` of a zero (batch * seqlen, ...)
    tensor, shaped (batch, seqlen, ...)."""
    rest = hidden_states.shape[1:]
    output = hidden_states.new_zeros(batch * seqlen, *rest)
    output[indices] = hidden_states
    return output.view(batch, seqlen, *rest)


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor, unused_mask: torch.Tensor | None = None):
    """flash_attn.bert_padding.unpad_input (flash-attn >= 2.6.3, the five-tuple): the kept tokens of (batch, seqlen,
    ...) as (nnz, ...), their flat indices, the int32 cumulative sequence lengths from 0, the longest sequence and
    each sequence's used length. `unused_mask` marks tokens kept but not attended (counted in the lengths)."""
    all_masks = attention_mask + unused_mask if unused_mask is not None else attention_mask
    seqlens = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    rows = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(rows, indices), indices, cu_seqlens, int(seqlens.max().item()), used_seqlens


_TOKEN = re.compile(r"\(|\)|\.\.\.|[A-Za-z_][A-Za-z0-9_]*|\d+")
# A bare ellipsis (its axes kept apart) as a group of its own; '...' inside parentheses is the product of its axes.
_BARE = ["…"]


def _parse_side(text: str) -> list[list[str]]:
    """One side of an einops pattern as its groups, each a list of axis names: 'b (h d) ...' is [['b'], ['h', 'd'],
    _BARE]. Anonymous axes (digits) are not handled: verl's patterns name every axis."""
    groups: list[list[str]] = []
    current: list[str] | None = None
    for token in _TOKEN.findall(text):
        if token == "(":
            if current is not None:
                raise ValueError(f"{NAME}: nested parentheses in {text!r}")
            current = []
        elif token == ")":
            if current is None:
                raise ValueError(f"{NAME}: unbalanced ')' in {text!r}")
            groups.append(current)
            current = None
        elif token.isdigit():
            raise ValueError(f"{NAME}: anonymous axis {token!r} in {text!r} is not handled")
        elif current is not None:
            current.append(token)
        else:
            groups.append(_BARE if token == "..." else [token])
    if current is not None:
        raise ValueError(f"{NAME}: unbalanced '(' in {text!r}")
    return groups


def rearrange(tensor: torch.Tensor, pattern: str, **sizes: int) -> torch.Tensor:
    """einops.rearrange for what flash-attn's bert_padding and verl call it with: named axes, groups in parentheses
    on either side ('(b s) ... -> b s ...', 'b s ... -> (b s) ...', 'b s h d -> b s (h d)'), one ellipsis, sizes
    given by keyword. A reshape to the left side's single axes, a permute, a reshape to the right side's groups."""
    left_text, arrow, right_text = pattern.partition("->")
    if not arrow:
        raise ValueError(f"{NAME}: pattern {pattern!r} has no '->'")
    left, right = _parse_side(left_text), _parse_side(right_text)
    if any("..." in group for group in left):
        raise ValueError(f"{NAME}: '(...)' on the left of {pattern!r} is not handled")
    has_ellipsis = _BARE in left
    ellipsis_dims = tensor.ndim - len(left) + 1 if has_ellipsis else 0
    if ellipsis_dims < 0 or (not has_ellipsis and len(left) != tensor.ndim):
        raise ValueError(f"{NAME}: pattern {pattern!r} has {len(left)} axes, the tensor {tensor.ndim}")
    known = dict(sizes)
    single: list[str] = []  # the left side's elementary axes, in order
    shape: list[int] = []
    dim = 0
    for group in left:
        if group == _BARE:
            for i in range(ellipsis_dims):
                single.append(f"...{i}")
                shape.append(tensor.shape[dim + i])
            dim += ellipsis_dims
            continue
        whole = tensor.shape[dim]
        unknown = [name for name in group if name not in known]
        if len(unknown) > 1:
            raise ValueError(f"{NAME}: cannot split axis {dim} into {group} without sizes for {unknown[1:]}")
        product = 1
        for name in group:
            product *= known.get(name, 1)
        if unknown:
            if whole % product:
                raise ValueError(f"{NAME}: axis {dim} of size {whole} is not divisible by {product}")
            known[unknown[0]] = whole // product
        elif product != whole:
            raise ValueError(f"{NAME}: axis {dim} has size {whole}, the pattern's {group} make {product}")
        for name in group:
            single.append(name)
            shape.append(known[name])
        dim += 1
    axes = [f"...{i}" for i in range(ellipsis_dims)]
    # Each output dimension as the elementary axes it is the product of.
    out_axes: list[list[str]] = []
    for group in right:
        if group == _BARE:
            out_axes += [[name] for name in axes]
        else:
            out_axes.append([name for member in group for name in (axes if member == "..." else [member])])
    order = [name for dim_axes in out_axes for name in dim_axes]
    if sorted(order) != sorted(single):
        raise ValueError(f"{NAME}: pattern {pattern!r}: the two sides name different axes")
    moved = tensor.reshape(shape).permute([single.index(name) for name in order])
    out_shape = []
    for dim_axes in out_axes:
        size = 1
        for name in dim_axes:
            size *= shape[single.index(name)]
        out_shape.append(size)
    return moved.reshape(out_shape)


def installed_for(attention_utils) -> bool:
    """Whether a tree's verl.utils.attention_utils needs the adapter on this host: the real flash_attn is not
    installed and the tree resolves the four functions from it with no fallback of its own (before verl #7127)."""
    if importlib.util.find_spec("flash_attn") is not None:
        return False
    return hasattr(attention_utils, "_get_attention_functions") and not hasattr(attention_utils, "_fallback_pad_input")


def install_bert_padding() -> list[str]:
    """Wrap the tree's resolver where it needs it (installed_for); returns the names of the adapters now on:
    [NAME], or [] where the tree or the host needs none (a tree without attention_utils: none to wrap)."""
    if _installed:
        return list(_installed)
    try:
        from verl.utils import attention_utils
    except ModuleNotFoundError as e:
        if e.name != "verl.utils.attention_utils":
            raise
        return []
    if not installed_for(attention_utils):
        return []
    attention_utils._get_attention_functions = or_stand_ins(attention_utils._get_attention_functions)
    _installed.append(NAME)
    return list(_installed)


def or_stand_ins(resolve):
    """The tree's resolver, answered with the stand-ins where it fails for flash-attn's absence alone; any other
    missing module is the tree's to report, as it would be without the adapter."""

    def resolve_or_stand_in():
        try:
            return resolve()
        except ModuleNotFoundError as e:
            if e.name is None or e.name.split(".")[0] != "flash_attn":
                raise
            return index_first_axis, pad_input, rearrange, unpad_input

    return resolve_or_stand_in
