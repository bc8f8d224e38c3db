"""Compare what one rank computed with the oracle: every log-prob, every entropy, every gradient shard.

A rank holds only its shard of each gradient, so it reports sums of squares for its shard; the record stage
adds them over ranks into a global relative error per parameter (PyTorch's check_sharded_parity compares shards
the same way). Nothing here communicates, so a comparison can never hang or add to the collective counts.

Where the reference carries alternatives (rank/oracle/reference.py: what real defects produce), each shard is also
compared with them: per alternative B this rank's <g, B> and <B, B>, with <g, g>, in float64, so that the record
stage can fit g = k B over all ranks and tell which defect the arm matches and how closely
(judge_cell/diagnosis.py). The existing numbers are computed exactly as before.
"""

from __future__ import annotations

import torch

from harness.rank.oracle.reference import ReferenceGrads


def local_view(tensor):
    """(local tensor, chunk) for a DTensor or a plain tensor: chunk(full) is the part of a full tensor shaped like
    `tensor` that this rank holds. The public DTensor API cuts it: distribute_tensor with src_data_rank=None
    splits the full tensor on every rank by the same placements, without any collective."""
    try:
        from torch.distributed.tensor import DTensor, distribute_tensor
    except ImportError:  # pragma: no cover - torch without DTensor
        DTensor = ()
    if isinstance(tensor, DTensor):
        mesh, placements = tensor.device_mesh, tensor.placements

        def chunk(full):
            return distribute_tensor(full.detach(), mesh, placements, src_data_rank=None).to_local().cpu()

        return tensor.to_local(), chunk
    return tensor, lambda full: full


def even_cut(tensor, full):
    """The rows of `full` a rank would take if it assumed equal shards: start at coordinate * rows // n (n: the
    mesh dimension's size), as many rows as this rank holds. None where that is what FSDP2 cuts anyway.

    FSDP2 cuts dim 0 in torch.chunk sizes: ceil(rows / n) rows per rank, the last shorter (256 rows at n = 3: 86,
    86, 84, starting at 0, 86, 172). A hand-written slice by rank * rows // n starts at 0, 85, 170: the same
    rows whenever n divides the dimension, shifted rows when it does not. It is an alternative a real defect
    produces (a fix exact at W = 2 and 4 that cuts uneven shards by hand), compared only where it differs."""
    try:
        from torch.distributed.tensor import DTensor, Shard
    except ImportError:  # pragma: no cover - torch without DTensor
        return None
    if not isinstance(tensor, DTensor) or full is None or full.dim() == 0:
        return None
    on_rows = [i for i, p in enumerate(tensor.placements) if isinstance(p, Shard) and p.dim == 0]
    if len(on_rows) != 1:
        return None
    n = tensor.device_mesh.size(on_rows[0])
    rows = full.shape[0]
    if rows % n == 0:
        return None
    start = tensor.device_mesh.get_local_rank(on_rows[0]) * rows // n
    held = tensor.to_local().shape[0]
    return full[start : start + held].detach()


def compare_outputs(actual: torch.Tensor, expected: torch.Tensor, alternatives: dict | None = None) -> dict:
    """max |actual - expected|; with alternatives ({name: tensor shaped like expected}), also the largest
    difference from each, so a failing run can be matched to the defect that produces it."""
    actual = actual.detach().float().cpu()
    expected = expected.float().cpu()
    if actual.shape != expected.shape:
        return {"max_abs": float("inf"), "shape": [list(actual.shape), list(expected.shape)]}
    finite = bool(torch.isfinite(actual).all())
    result = {"max_abs": float((actual - expected).abs().max()) if finite else float("inf"), "finite": finite}
    if alternatives and finite:
        result["alternatives"] = {
            name: float((actual - alt.float().cpu()).abs().max())
            for name, alt in alternatives.items()
            if alt.shape == actual.shape
        }
    return result


def _this_rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _alternatives(reference_grads: ReferenceGrads, name: str, rank: int) -> dict:
    """alternative -> the full tensor it puts where the reference has `name`'s gradient (None: none)."""
    per_rank = reference_grads.per_rank
    expected = reference_grads.get(name)
    alternatives = {}
    world = len(per_rank)
    mine = (per_rank.get(rank) or {}).get(name)
    if world > 1 and mine is not None:
        # What a rank holds when its gradient is never reduced: its own loss's (scaled as verl scales a rank's
        # loss, so that FSDP's average gives the reference) gradient, i.e. W times its share.
        alternatives["unreduced"] = mine * world
    entropy = reference_grads.entropy_part.get(name)
    if entropy is not None and expected is not None:
        alternatives["entropy_sign"] = expected - 2 * entropy
    kl = getattr(reference_grads, "kl_part", {}).get(name)
    if kl is not None and expected is not None:
        alternatives["kl_sign"] = expected - 2 * kl
    for mode, by_name in getattr(reference_grads, "agg_modes", {}).items():
        if by_name.get(name) is not None:
            alternatives[f"agg:{mode}"] = by_name[name]
    scale = reference_grads.rank_token_scale
    if scale and all((per_rank.get(r) or {}).get(name) is not None for r in scale):
        alternatives["rank_token_mean"] = sum(per_rank[r][name] * scale[r] for r in sorted(scale))
    return alternatives


def _alternative_terms(
    local: torch.Tensor, share: torch.Tensor, alternatives: dict, chunk, local_alternatives: dict | None = None
) -> dict:
    """<g, g>, and per alternative (the reference itself as "reference") <g, B> and <B, B>, in float64.
    alternatives are full tensors, cut to this rank's shard here; local_alternatives are already this rank's."""
    g = local.double()
    out = {"gg": float((g * g).sum())}
    mine = {"reference": share, **(local_alternatives or {})}
    for alternative, full in {**mine, **alternatives}.items():
        b = (full if alternative in mine else chunk(full)).detach().double().cpu()
        if b.shape != g.shape:
            continue
        out[alternative] = {"gb": float((g * b).sum()), "bb": float((b * b).sum())}
    return out


class ArmOutputUnreadable(ValueError):
    """What the arm produced cannot be read as what it should be (a gradient DTensor whose placements do not fit
    its mesh): raised by the harness while reading it, about the arm's output, not a harness defect."""


def _check_readable(name: str, grad) -> None:
    """A gradient DTensor has one placement per mesh dimension; one that has not (a one-entry grad_placements on
    HSDP's 2-D mesh) cannot be cut like its parameter. Said about the parameter before torch raises about it."""
    placements, mesh = getattr(grad, "placements", None), getattr(grad, "device_mesh", None)
    if placements is None or mesh is None or len(placements) == mesh.ndim:
        return
    raise ArmOutputUnreadable(
        f"{name}'s gradient has {len(placements)} placement(s) ({', '.join(map(repr, placements))}) on a "
        f"{mesh.ndim}-D mesh {tuple(mesh.mesh.shape)}: a DTensor needs one per mesh dimension"
    )


def compare_gradients(named_params, reference_grads: ReferenceGrads) -> dict:
    """Per parameter: this rank's share of ||g - g_ref||^2 and ||g_ref||^2, and what is wrong with it; where the
    reference carries alternatives, also this shard's comparison with each (under the record's key "fit")."""
    result = {}
    rank = _this_rank()
    for name, param in named_params:
        expected = reference_grads.get(name)
        grad = param.grad
        entry = {"diff_sq": 0.0, "ref_sq": 0.0, "max_abs": 0.0, "problem": None}
        if expected is None:
            # The oracle says no gradient flows here; a non-zero one is wrong.
            if grad is not None:
                local, _ = local_view(grad)
                entry["diff_sq"] = float(local.detach().float().pow(2).sum())
            result[name] = entry
            continue
        if grad is None:
            local_param, chunk = local_view(param)
            share = chunk(expected).float()
            entry.update(ref_sq=float(share.pow(2).sum()), diff_sq=float(share.pow(2).sum()), numel=share.numel())
            # A shard with no elements has nothing to miss.
            entry["problem"] = "missing" if local_param.numel() > 0 else None
            result[name] = entry
            continue
        _check_readable(name, grad)
        local, chunk = local_view(grad)
        local = local.detach().float().cpu()
        share = chunk(expected).float().cpu()
        if local.shape != share.shape:
            entry.update(problem=f"shape {list(local.shape)} vs {list(share.shape)}", diff_sq=float("inf"))
        elif not bool(torch.isfinite(local).all()):
            entry.update(problem="nonfinite", diff_sq=float("inf"))
        else:
            diff = local - share
            entry.update(diff_sq=float(diff.pow(2).sum()), max_abs=float(diff.abs().max()) if diff.numel() else 0.0)
            if reference_grads.with_alternatives:
                alternatives = _alternatives(reference_grads, name, rank)
                cut = even_cut(grad, expected)
                entry["fit"] = _alternative_terms(
                    local, share, alternatives, chunk, {"even_cut": cut} if cut is not None else None
                )
        entry["ref_sq"] = float(share.pow(2).sum())
        entry["numel"] = share.numel()  # the verdict weighs a parameter's error by its share of the gradient
        result[name] = entry
    return result
