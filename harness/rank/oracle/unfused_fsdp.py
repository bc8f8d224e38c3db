"""Second reference for mixed precision: FSDP2's own unfused path under the same precision policy.

The fp32 oracle bounds how far a bf16 run may drift at all; this one shows whether a patch behaves like FSDP
itself does under that policy (lm_head called as a module, so FSDP gathers its weight in the param dtype and
reduce-scatters its gradient). It wraps a copy of the model with our own `fully_shard` calls that mirror
verl's wrap policy (each no-split block, the embeddings and lm_head when untied, then the root) and its shard
placement, without importing verl. verl's engine passes fully_shard no shard_placement_fn (verl 0.9.1 defines
get_shard_placement_fn and never calls it), so every parameter is FSDP2's default Shard(0), cut in torch.chunk
sizes: uneven where the shard group does not divide dim 0 (256 vocabulary rows at 3 ranks: 86, 86, 84).
"""

from __future__ import annotations

import sys

from torch import nn


def reference_fsdp_kwargs(mesh, scenario, world: int, device_type: str) -> dict:
    """The FSDP2 settings of this reference: the scenario's precision policy (bf16 params, fp32 reduce under
    bf16-mixed), its CPU offload, and FSDP2's default placement, as verl's engine gives it (Shard(0): uneven shards
    where the world does not divide dim 0). It is our reference, so it is written here without verl; what verl
    itself gets comes from rank/verl_side/verl_config.py. `world` is kept for the callers' signature."""
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

    mixed = scenario.precision == "bf16-mixed"
    return {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=torch.bfloat16 if mixed else torch.float32, reduce_dtype=torch.float32, cast_forward_inputs=True
        ),
        "offload_policy": (
            CPUOffloadPolicy(pin_memory=device_type == "cuda")
            if scenario.cpu_offload or scenario.forward_only
            else None
        ),
        "reshard_after_forward": True,
    }


def wrap_like_verl(model: nn.Module, fsdp_kwargs: dict):
    # verl patches forwards on the class: once it is imported, this copy would run the code under test.
    assert "verl" not in sys.modules, "the FSDP reference must be built before verl is imported"
    from torch.distributed.fsdp import fully_shard

    tied = getattr(model.config, "tie_word_embeddings", False)
    block_classes = set(getattr(model, "_no_split_modules", None) or [])
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if type(module).__name__ in block_classes or (
            not tied and (isinstance(module, nn.Embedding) or leaf in ("embed_tokens", "lm_head"))
        ):
            fully_shard(module, **fsdp_kwargs)
    fully_shard(model, **fsdp_kwargs)
    return model


def gathered_grads(model) -> dict:
    """Every parameter's full gradient (all-gathered from its shards), or None where it got none."""
    from torch.distributed.tensor import DTensor

    grads = {}
    for name, p in model.named_parameters():
        g = p.grad
        grads[name] = None if g is None else (g.full_tensor() if isinstance(g, DTensor) else g).detach().float()
    return grads
