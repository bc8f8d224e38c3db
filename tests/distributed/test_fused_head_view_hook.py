"""FSDP2 warns that the candidate's fused head (patches/fsdp2-lmhead-forward.diff) "returned a view tensor": an in-place
op on such a view silently drops FSDP's pre-backward hook (the all-gather before the head's backward). Shown here
with the candidate's own code on a real FSDP2 unit: the views are the outputs of verl's FusedLinearForPPOFunction (a
custom autograd Function that returns two views of tensors made in its forward), and torch's autograd refuses any
in-place op on them, or on a view of them, with an error ("a function that returns multiple views ... do not allow
the output views to be modified inplace"): none can drop the hook silently there. The out-of-place use verl makes of
them gives lm_head the gradient a plain linear head gives. One process of its own (tests/own_process.py), gloo, world
size 1."""

from __future__ import annotations

import textwrap

from own_process import run_code  # tests/own_process.py (tests/ is on sys.path: its conftest)

from harness.plan.arms import materialise, resolve_arm

SCRIPT = textwrap.dedent(
    """
    import os, sys, warnings
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo")
    import verl.models.transformers.qwen3_vl as q
    from verl.utils.experimental.torch_functional import FusedLinearForPPO

    assert "fsdp2-lmhead-forward" in q.__file__, q.__file__  # the candidate's copy, not the installed verl
    torch.manual_seed(0)
    D, V, T = 8, 32, 6
    plain = torch.nn.Linear(D, V, bias=False)
    head = torch.nn.Linear(D, V, bias=False)
    head.load_state_dict(plain.state_dict())
    fully_shard(head, mesh=init_device_mesh("cpu", (1,)))
    hidden = torch.randn(1, T, D)
    labels = torch.randint(0, V, (1, T))

    def run():
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            fused = q._lm_head_fused_ppo_forward(head)
            # verl's own module, as forward_with_torch_backend builds it, handed to lm_head's forward method
            log_probs, entropy = fused(FusedLinearForPPO(), hidden.clone().requires_grad_(), labels, 1.0)
        return log_probs, entropy, [str(w.message) for w in seen]

    # 1. the hazard's condition is there: FSDP2 warns, and the outputs are views
    log_probs, entropy, seen = run()
    assert any("returned a view tensor" in m for m in seen), seen
    assert log_probs._base is not None and entropy._base is not None
    # 2. every in-place op on them is refused by autograd: nothing can drop the hook silently
    refused = []
    ops = [("add_", lambda t: t.add_(1.0)), ("mul_", lambda t: t.mul_(2.0)), ("+=", lambda t: t.__iadd__(1.0)),
           ("index", lambda t: t.__setitem__((0, 0), 0.0)), ("clamp_", lambda t: t.clamp_(max=0.0)),
           ("a view of it", lambda t: t.squeeze(0).add_(1.0)), ("a row of it", lambda t: t[0].mul_(2.0))]
    for name, op in ops:
        for out in run()[:2]:
            try:
                op(out)
            except RuntimeError as e:
                assert "is a view and is being modified inplace" in str(e), str(e)
                refused.append(name)
            else:
                raise AssertionError(f"in-place {name} on the fused head's output was allowed")
    print("refused", len(refused))
    # 3. out of place, as verl uses them: lm_head's gradient is a plain linear head's
    log_probs, entropy, _ = run()
    ((log_probs * 2.0).sum() + 0.1 * entropy.sum()).backward()
    h = hidden.clone()
    logits = plain(h).float()
    lp = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    p = torch.softmax(logits, -1)
    ent = torch.logsumexp(logits, -1) - (p * logits).sum(-1)
    ((lp * 2.0).sum() + 0.1 * ent.sum()).backward()
    got = head.weight.grad.full_tensor()
    err = float((got - plain.weight.grad).norm() / plain.weight.grad.norm())
    assert err < 1e-5, err
    print("grad rel err", err)
    dist.destroy_process_group()
    """
)


def test_an_in_place_op_on_the_fused_heads_view_outputs_is_refused_never_silently_drops_the_hook(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    copy = materialise(resolve_arm("fsdp2-lmhead-forward"))
    done = run_code(SCRIPT, str(port), folder=tmp_path, timeout=300, arm_dir=copy)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "refused 14" in done.stdout and "grad rel err" in done.stdout, done.stdout
