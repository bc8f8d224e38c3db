"""Every tolerance the harness judges with, per precision, each set above the measured noise floor of a correct arm.

Noise floor = the largest error a correct arm (upstream at 1 rank, and the FSDP-unshard candidate at every
world size) showed across all scenarios of that precision; see docs/SCENARIOS.md "Tolerances" for the measurements.
A tolerance is changed only with a new measurement of that floor, never to make an arm pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Tolerance:
    logprob_abs: float  # max |log p - log p_ref| over all tokens
    entropy_abs: float  # max |H - H_ref| over all tokens
    # per parameter ||g - g_ref|| / max(||g_ref||, its even share of the whole gradient's norm), over the whole
    # (unsharded) gradient: see judge_cell/verdict.py _grad_parity
    grad_rel: float
    noise_floor: dict  # the measurement each bound sits above

    def as_dict(self) -> dict:
        return asdict(self)


# (precision, reference) -> tolerance. "oracle" is the fp32 plain-transformers reference; "fsdp_unfused" is
# FSDP2's own unfused path under the same mixed-precision policy (bf16 only). Floors: `python -m harness
# noise-floor --seeds 3` with the fsdp2-lmhead-forward arm over every eager scenario (21 runs, CPU, gloo).
TOLERANCES = {
    # fp32: the fused head's chunked matmul and reductions differ from the oracle's by rounding only. The bounds
    # leave room for other devices' reduction orders and stay four orders below the defects found (~1).
    ("fp32", "oracle"): Tolerance(
        logprob_abs=1e-4,
        entropy_abs=1e-4,
        grad_rel=1e-4,
        noise_floor={"logprob_abs": 0.0, "entropy_abs": 2.38e-6, "grad_rel": 7.57e-7},
    ),
    # bf16 against fp32: the coarse check. Entropy comes back rounded to bf16 (half an ulp is 0.0156 at the
    # entropy's magnitude, 4..8); gradients differ by up to 0.24 because bf16 and fp32 put tokens near the
    # PPO clip boundary on different sides of it. Gradients are judged sharply against FSDP's own path below.
    ("bf16-mixed", "oracle"): Tolerance(
        logprob_abs=1e-2,
        entropy_abs=0.04,
        grad_rel=0.5,
        noise_floor={"logprob_abs": 4.93e-3, "entropy_abs": 1.57e-2, "grad_rel": 0.238},
    ),
    # bf16 against FSDP's unfused path under the same policy: same log-probs bit for bit, entropy differs by
    # its bf16 rounding, gradients by the fused head's own bf16 backward.
    ("bf16-mixed", "fsdp_unfused"): Tolerance(
        logprob_abs=2e-3,
        entropy_abs=0.04,
        grad_rel=0.05,
        noise_floor={"logprob_abs": 0.0, "entropy_abs": 1.56e-2, "grad_rel": 1.91e-2},
    ),
}


def tolerance_for(precision: str, reference: str = "oracle") -> Tolerance:
    return TOLERANCES[(precision, reference)]


# The regression test `harness upstream` generates for verl (harness/upstream/test_template.py.in): its own loss
# (weighted token mean of the log-probs minus an entropy bonus, no clip) against the plain fp32 model, W=2.
# Floors: the candidate fix and an independent correct fix (tests/fixtures/alternative_fixes/lm-head-in-root-unit.diff)
# gave the same numbers, measured by the generated test itself (docs/UPSTREAM.md). The defects sit at ~0.7-1.
UPSTREAM_TEST_TOLERANCES = {
    # fp32: rounding only, as for the harness's own fp32 bounds above.
    "fp32": {
        "logprob_abs": 1e-4,
        "entropy_abs": 1e-4,
        "grad_rel": 1e-4,
        "noise_floor": {"logprob_abs": 0.0, "entropy_abs": 1.91e-6, "grad_rel": 6.57e-7},
    },
    # bf16 (verl's default policy) against fp32: the log-probs (|log p| ~ 4..8 at vocabulary 256) come from bf16
    # logits, whose half ulp there is 0.0156, so 0.02; the lm_head gradient is reduced in fp32 from bf16
    # activations: 0.05, six times its floor and over ten times below the defects.
    "bf16": {"logprob_abs": 0.02, "grad_rel": 0.05, "noise_floor": {"logprob_abs": 5.10e-3, "grad_rel": 7.71e-3}},
}


@dataclass(frozen=True)
class UpdateTolerance:
    """The training update's bounds (scenarios with `steps`, judge_cell/update_verdict.py). The log-probs the first RL
    step starts from are on the seeded weights and are judged with the Tolerance above; later ones with
    logprob_abs here, since the weights under them already carry the update's rounding."""

    # per parameter, after every optimizer step: ||d - d_ref|| / max(||d_ref||, its even share of the whole
    # update's norm), d = weights after - weights before (shard_stats.even_share_relative). None: not judged.
    update_rel: float | None
    param_rel: float  # the same for the weights themselves
    metric_rel: float  # verl's grad_norm and lr: |v - v_ref| / |v_ref|
    metric_abs: float  # verl's loss, pg_loss, entropy_loss, pg_clipfrac, ppo_kl: |v - v_ref|
    logprob_abs: float  # max |log p - log p_ref| on the weights after one or more RL steps
    # per parameter, the gradient before the clip at every optimizer step after the update's first (whose weights are
    # the seeded ones: judged with the Tolerance's grad_rel as a one-step cell's), measured as for gradients
    grad_rel: float
    noise_floor: dict

    def as_dict(self) -> dict:
        return asdict(self)


# Floors: the candidate (fsdp2-lmhead-forward) on every engine-update-* scenario of the precision, seeds 1234, 7
# and 99 (CPU, gloo; docs/SCENARIOS.md "Tolerances"). The defects they must catch sit at: upstream's lm_head update
# 1.02, its weights 0.015 after the first mini-batch, its grad_norm 0.065, its next-step log-probs 0.125 (fp32,
# engine-update-adamw); a skipped or doubled step at 0.67-1.
UPDATE_TOLERANCES = {
    # Adam's step is close to lr * sign(g) elementwise: an element whose gradient sits at the rounding noise can take
    # the other sign, an O(lr) difference. Over 2 epochs x 2 mini-batches with no-sync accumulation that reached
    # 4.6e-3 of a parameter's update norm (patch_embed; 1.1e-4-2.9e-4 elsewhere); SGD's updates stay at 5e-5.
    "fp32": UpdateTolerance(
        update_rel=0.05,
        param_rel=1e-3,
        metric_rel=1e-3,
        metric_abs=1e-4,
        logprob_abs=1e-3,
        # the gradient on weights that carry the update's rounding: its floor is the weights' (engine-update-no-sync,
        # 2 epochs, seed 1234: 7.36e-5, patch_embed; engine-update-adamw 4.8e-6), too close to the one-step 1e-4
        grad_rel=1e-3,
        noise_floor={
            "update_rel": 4.56e-3,
            "param_rel": 6.99e-5,
            "metric_rel": 3.34e-5,
            "metric_abs": 4.75e-6,
            "logprob_abs": 8.73e-5,
            "grad_rel": 7.36e-5,
        },
    ),
    # bf16 against the fp32 oracle: bf16 rounding gives many elements of Adam's sign-like step the other sign
    # (0.25-0.49 of a correct arm's update norm), so the update itself says nothing here and is not judged; the
    # weights, verl's metrics (entropy_loss is bf16-rounded: 0.014) and the next steps' log-probs are.
    "bf16-mixed": UpdateTolerance(
        update_rel=None,
        param_rel=0.02,
        metric_rel=0.02,
        metric_abs=0.05,
        logprob_abs=0.05,
        # as the one-step bf16 bound against the fp32 oracle (tokens near the PPO clip): engine-update-bf16, seed 1234
        grad_rel=0.5,
        noise_floor={
            "update_rel": 0.485,
            "param_rel": 5.47e-3,
            "metric_rel": 3.79e-3,
            "metric_abs": 1.39e-2,
            "logprob_abs": 1.64e-2,
            "grad_rel": 4.40e-2,
        },
    ),
}


def update_tolerance_for(precision: str) -> UpdateTolerance:
    return UPDATE_TOLERANCES[precision]


# The Qwen3.5 linear-attention tests of `harness upstream` (findings qwen3-5-packed-rows, pr-7471-...): one layer,
# fp32, verl's packed forward against transformers' forward on each sample alone. Floors measured with the fix
# (verl's per-sample loop): outputs 6.6e-7, gradients 3.6e-6 (conv1d.weight); the defect: outputs 4.9e-4, every
# gradient 2.7e-4 to 9.5e-3 off. grad_rel is the harness's fp32 bound.
QWEN3_5_LAYER_TEST_TOLERANCES = {
    "output_abs": 1e-5,
    "grad_rel": 1e-4,
    "noise_floor": {"output_abs": 6.56e-7, "grad_rel": 3.59e-6},
}
