"""Every tolerance the harness judges with, per precision, each set above the measured noise floor of a correct arm.

Noise floor = the largest error a correct arm (upstream at 1 rank, and the FSDP-unshard candidate at every
world size) showed across all scenarios of that precision; see README "Tolerances" for the measurements.
A tolerance is changed only with a new measurement of that floor, never to make an arm pass.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Tolerance:
    logprob_abs: float  # max |log p - log p_ref| over all tokens
    entropy_abs: float  # max |H - H_ref| over all tokens
    grad_rel: float  # per parameter ||g - g_ref|| / ||g_ref||, over the whole (unsharded) gradient
    noise_floor: dict  # the measurement each bound sits above

    def as_dict(self) -> dict:
        return asdict(self)


TOLERANCES = {
    "fp32": Tolerance(
        logprob_abs=1e-4, entropy_abs=1e-4, grad_rel=1e-4,
        noise_floor={"logprob_abs": 0.0, "entropy_abs": 1.9e-6, "grad_rel": 8.1e-7},
    ),
    "bf16-mixed": Tolerance(
        logprob_abs=1e-4, entropy_abs=1e-4, grad_rel=1e-4,
        noise_floor={},
    ),
}


def tolerance_for(precision: str) -> Tolerance:
    return TOLERANCES[precision]
