"""The verdict of a head cell (`path: head`, `bench --real-size`): the ranks' figures of the lm_head unit alone
(rank/head_bench.py, RankResult.head_step) merged into the record's, and the gradient judged against the fp32
reference: ||g - g_ref|| / ||g_ref|| over the whole weight, from every rank's squared sums over its rows.

The merge (merged_head_step): the bytes are rank 0's, memory and times the largest rank's, the squared sums added over
the ranks' rows."""

from __future__ import annotations

import math

from harness.records.measures import HeadStep
from harness.records.results import Failure, FailureKind, GradientOf, RankResult

PARAM = "lm_head.weight"


def merged_head_step(steps: list[HeadStep]) -> HeadStep:
    """Bytes and element types: rank 0's (every rank moves the same); memory, times and what autograd holds: the
    largest rank's; the squared sums: added over the ranks' rows."""
    first = steps[0]
    peaks = [s.peak_rss_over_step for s in steps if s.peak_rss_over_step is not None]
    return HeadStep(
        way=first.way,
        hidden=first.hidden,
        vocab=first.vocab,
        tokens=first.tokens,
        step_s=max(s.step_s for s in steps),
        bytes=first.bytes,
        dtypes=first.dtypes,
        collective_ms=max(s.collective_ms for s in steps),
        held_fwd_to_bwd=max(s.held_fwd_to_bwd for s in steps),
        held_weight_sized=max(s.held_weight_sized for s in steps),
        peak_rss_over_step=max(peaks) if peaks else None,
        peak_rss_process=max(s.peak_rss_process for s in steps),
        ref_sq=sum(s.ref_sq for s in steps),
        diff_sq=sum(s.diff_sq for s in steps),
    )


def relative_error(step: HeadStep) -> float:
    return math.sqrt(step.diff_sq / step.ref_sq) if step.ref_sq else math.inf


def head_outcome(results: list[RankResult], tol) -> dict:
    """The record's fields of a head cell whose ranks all finished: its merged figures, the gradient's parity,
    the failure if it is over the tolerance (and as the verdict's cause), and the outcome: mismatch or pass."""
    step = merged_head_step([r.head_step for r in results])
    rel = relative_error(step)
    number = "inf" if math.isinf(rel) else rel
    over = {PARAM: number} if rel > tol.grad_rel else {}
    parity = {
        "grad_worst_rel": number,
        "grad_worst_param": PARAM,
        "grads_over_tolerance": over,
        "grad_rel": {PARAM: number},
    }
    fields = {"head_step": step, "parity": parity, "failures": [], "outcome": "pass"}
    if over:
        words = f"grad {PARAM}: relative error {rel:.3g} > {tol.grad_rel:g}"
        cause = Failure(
            kind=FailureKind.GRADIENT,
            gradient_of=GradientOf.HEAD_UNIT,
            subject=PARAM,
            value=number,
            bound=tol.grad_rel,
            parameters=[PARAM],
            words=words,
        )
        fields.update(failures=[cause], outcome="mismatch", cause=cause)  # the verdict's cause (records/results.py)
    return fields
