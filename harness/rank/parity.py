"""Compare what one rank computed with the oracle: every log-prob, every entropy, every gradient shard.

A rank holds only its shard of each gradient, so it reports sums of squares for its shard; the record stage
adds them over ranks into a global relative error per parameter (PyTorch's check_sharded_parity compares shards
the same way). Nothing here communicates, so a comparison can never hang or add to the collective counts.
"""
from __future__ import annotations

import torch


def _local_view(tensor):
    """(local tensor, slices of the global tensor it holds) for a DTensor or a plain tensor."""
    try:
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:  # pragma: no cover - torch without DTensor
        DTensor = ()
    if isinstance(tensor, DTensor):
        local = tensor.to_local()
        shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
        return local, tuple(slice(o, o + s) for o, s in zip(offset, shape))
    return tensor, tuple(slice(0, s) for s in tensor.shape)


def compare_outputs(actual: torch.Tensor, expected: torch.Tensor) -> dict:
    actual = actual.detach().float().cpu()
    expected = expected.float().cpu()
    if actual.shape != expected.shape:
        return {"max_abs": float("inf"), "shape": [list(actual.shape), list(expected.shape)]}
    finite = bool(torch.isfinite(actual).all())
    return {"max_abs": float((actual - expected).abs().max()) if finite else float("inf"), "finite": finite}


def compare_gradients(named_params, reference_grads: dict) -> dict:
    """Per parameter: this rank's share of ||g - g_ref||^2 and ||g_ref||^2, and what is wrong with it."""
    result = {}
    for name, param in named_params:
        expected = reference_grads.get(name)
        grad = param.grad
        entry = {"diff_sq": 0.0, "ref_sq": 0.0, "max_abs": 0.0, "problem": None}
        if expected is None:
            # The oracle says no gradient flows here; a non-zero one is wrong.
            if grad is not None:
                local, _ = _local_view(grad)
                entry["diff_sq"] = float(local.detach().float().pow(2).sum())
            result[name] = entry
            continue
        if grad is None:
            local_param, index = _local_view(param)
            share = expected[index].float()
            entry.update(ref_sq=float(share.pow(2).sum()), diff_sq=float(share.pow(2).sum()))
            # A shard with no elements has nothing to miss.
            entry["problem"] = "missing" if local_param.numel() > 0 else None
            result[name] = entry
            continue
        local, index = _local_view(grad)
        local = local.detach().float().cpu()
        share = expected[index].float().cpu()
        if local.shape != share.shape:
            entry.update(problem=f"shape {list(local.shape)} vs {list(share.shape)}", diff_sq=float("inf"))
        elif not bool(torch.isfinite(local).all()):
            entry.update(problem="nonfinite", diff_sq=float("inf"))
        else:
            diff = local - share
            entry.update(diff_sq=float(diff.pow(2).sum()), max_abs=float(diff.abs().max()) if diff.numel() else 0.0)
        entry["ref_sq"] = float(share.pow(2).sum())
        result[name] = entry
    return result
