"""torch.compile of the FSDP2-wrapped model, in place, one way for both paths: the engine path compiles the module
verl's engine built, the direct path the model it wrapped with verl's apply_fsdp2. The scope (inputs/scenario.py's
compile_scope) picks what dynamo traces."""

from __future__ import annotations


def compile_in_place(module, scope: str, backend: str) -> int:
    """torch.compile as a user who turns it on for the FSDP2-wrapped model: the whole model; its own forward only
    (head); or each transformer block (the classes the model names as no-split, which verl also wraps as FSDP
    units), as torchtitan's apply_compile does. In place (nn.Module.compile, which compiles the module's call as
    `torch.compile(module)` does), so whoever calls the module, verl's engine or our step, calls the compiled
    forward; compilation itself happens in the first forward. Returns how many modules were compiled."""
    if scope == "model":
        module.compile(backend=backend)
        return 1
    if scope == "head":
        # The forward verl's monkey patch gave the model (the fused head: the lm_head weight, FusedLinearForPPO,
        # the log-probs) compiled, the vision-language model it calls first (vision tower, decoder) run eager:
        # dynamo tracing those was 73-84% of a whole-model cell (scenarios/fsdp2-compile.yaml).
        import torch

        inner = getattr(module, "model", None)
        if not isinstance(inner, torch.nn.Module):
            raise RuntimeError(f"compile_scope head: {type(module).__name__} has no .model submodule to leave eager")
        inner.forward = torch.compiler.disable(inner.forward)
        module.compile(backend=backend)
        return 1
    blocks = set(getattr(module, "_no_split_modules", None) or [])
    compiled = 0
    for sub in module.modules():
        # FSDP2 swaps a wrapped module's class for a subclass (FSDP<Name>): match the classes it derives from.
        if any(cls.__name__ in blocks for cls in type(sub).__mro__):
            sub.compile(backend=backend)
            compiled += 1
    if not compiled:
        raise RuntimeError(f"compile_scope layers: no module of the classes {sorted(blocks)} to compile")
    return compiled
