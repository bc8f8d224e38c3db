"""An update's why from its typed failures (judge_cell/update_verdict.py builds them, in the order the update happens):
the earliest wrong number in causal order, and how many more there are. Every reader here takes the failures'
fields (kind, subject, moment, value, verl's and the oracle's numbers); the words each failure carries are only
quoted, never read back.

`update_why` writes the why; `update_cause`, its lead, is the record's cause."""

from __future__ import annotations

from harness.records.measures import UpdateStepNumbers
from harness.records.results import Failure, FailureKind

# verl's metrics of the forward (the loss and its parts): before the backward, so before the gradient.
_FORWARD_METRICS = ("loss", "pg_loss", "entropy_loss", "pg_clipfrac", "ppo_kl")
# Where each kind sits in one optimizer step's causal order (metrics: _causal_rank); a kind not named comes last.
_CAUSAL_RANK = {
    FailureKind.LOSS_SLIP: -1,  # a slip in verl's loss that its metrics fit names the cause of every number after it
    FailureKind.OPTIMIZER_STEPS: 0,  # the batch and the steps taken
    FailureKind.MICRO_BATCHES: 0,
    FailureKind.LOG_PROBS: 1,  # the forward
    FailureKind.ENTROPY: 1,
    FailureKind.GRADIENT: 3,  # a parameter's gradient before the clip
    FailureKind.UPDATE: 5,  # the update the clip and optimizer made of it
    FailureKind.WEIGHTS: 6,
}


def shown(x) -> str:
    """A metric's number as a failure's words show it (4 significant digits; "none" where there is none)."""
    return x if isinstance(x, str) else "none" if x is None else f"{x:.4g}"


def _causal_rank(failure: Failure) -> int:
    """Where a failure sits in one optimizer step's causal order: the batch, the forward (log-probs, the loss; the
    entropy term with the entropy), a parameter's gradient before the clip, their norm (grad_norm), the update the
    clip and optimizer made of it, the weights, the schedule."""
    if failure.kind == FailureKind.METRIC:
        if failure.subject == "entropy_loss":
            return 1
        return 4 if failure.subject == "grad_norm" else 2 if failure.subject in _FORWARD_METRICS else 7
    return _CAUSAL_RANK.get(failure.kind, 7)


def _is_norm(failure: Failure) -> bool:
    return failure.kind == FailureKind.METRIC and failure.subject == "grad_norm"


def _first_moment(failures: list[Failure]) -> list[Failure]:
    """The failures of the earliest moment with one (failures come in the order the update happens), in causal
    order; a first failure of no moment (the batch, the last log-probs) is a moment of its own."""
    first = failures[0].moment
    moment = [f for f in failures if f.moment == first] if first else failures[:1]
    return sorted(moment, key=_causal_rank)


def update_cause(failures: list[Failure]) -> Failure | None:
    """The failure that explains the others: the lead of update_why; None for an update without failures."""
    return _first_moment(failures)[0] if failures else None


def update_why(
    failures: list[Failure], steps: list[UpdateStepNumbers] | None = None, clip_grad: float | None = None
) -> str:
    """The earliest wrong number in causal order, and how many more there are. The earliest moment with a failure
    (failures come in the order the update happens, update_parity), and within it the forward, then a parameter's
    gradient before the clip, then their norm (verl's grad_norm), then the clip's effect, then the updates. A wrong
    gradient leads, named first; a wrong grad_norm after it; every update of another parameter after them is named
    as dragged along by the clip (which engaged where the oracle's or verl's norm exceeded clip_grad; steps: the
    record's update steps, with clip_active and, where measured, the gradients' errors), not as a cause of its own."""
    if not failures:
        return ""
    moment = _first_moment(failures)
    lead = moment[0]
    if lead.kind == FailureKind.GRADIENT or _is_norm(lead):
        wrong = [f for f in moment if f.kind == FailureKind.GRADIENT]
        norm = next((f for f in moment if _is_norm(f)), None)
        updates = _updates_after(moment, failures)
        why = _gradient_why(wrong, norm, updates, steps, clip_grad)
        count = len(wrong) + (norm is not None) + len(updates)
    else:
        why, count = lead.words, 1
        # verl's grad_norm (a number every user watches) beside the first one, when it is off too.
        metric = next((f for f in failures if _is_norm(f) and f.words != lead.words), None)
        if metric:
            why, count = f"{lead.words}; {metric.words}", 2
    more = f" (+{len(failures) - count} more)" if len(failures) > count else ""
    return why + more


def _updates_after(moment: list[Failure], failures: list[Failure]) -> list[Failure]:
    """The updates a wrong gradient made wrong: those of the same moment, else of the first later moment that has
    any."""
    updates = [f for f in moment if f.kind == FailureKind.UPDATE]
    if not updates:
        later = next((f.moment for f in failures if f.kind == FailureKind.UPDATE), None)
        updates = [f for f in failures if f.kind == FailureKind.UPDATE and f.moment == later]
    return updates


def _error_of(failure: Failure) -> str:
    """A per-parameter failure's relative error as its words show it."""
    return failure.value if isinstance(failure.value, str) else f"{failure.value:.3g}"


def _gradient_why(
    wrong: list[Failure],
    norm: Failure | None,
    updates: list[Failure],
    steps: list[UpdateStepNumbers] | None,
    clip_grad: float | None,
) -> str:
    """The gradient before the clip as the cause: the parameters whose gradient is wrong (wrong: their failures,
    worst first), then verl's grad_norm (norm: its failure, or None where within its bound) by how much, whether
    the clip engaged, and the updates (of one moment) of the others, dragged along by it."""
    parts = []
    if wrong:
        names = [f.subject for f in wrong]
        named = ", ".join(f"{n}'s" for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        errors = ", ".join(_error_of(f) for f in wrong[:3])
        noun = "gradient" if len(names) == 1 else "gradients"
        parts.append(f"{named} {noun} wrong before the clip (rel. {errors} {wrong[0].moment})")
    if norm:
        parts.append(norm.words + ("" if wrong else ": the gradient is already wrong before the clip") + _factor(norm))
    elif wrong:
        parts.append("grad_norm within its bound")
    own = {f.subject for f in wrong}
    dragged = [f for f in updates if f.subject not in own]
    off = [f for f in updates if f.subject in own]
    if off:
        parts.append(f"{len(off)} update(s) of those parameter(s) off (worst {_worst(off, norm or wrong[0])})")
    if dragged:
        engaged = _clip_engaged(norm, steps, clip_grad) if norm else False
        worst = _worst(dragged, norm or wrong[0])
        if engaged is False:
            parts.append(f"the clip did not engage: {len(dragged)} other parameter update(s) off (worst {worst})")
        else:
            how = "then scaled" if engaged else "(where it engaged) scales"
            parts.append(
                f"the clip {how} every parameter by that wrong norm: {len(dragged)} parameter update(s) dragged "
                f"along by the clip (worst {worst})"
            )
    if norm and not wrong and dragged and not _gradients_measured(steps, norm):
        parts[-1] += (
            "; which parameter's gradient is wrong is not measured in this record (a one-step scenario's "
            "diagnosis names it)"
        )
    elif norm and not wrong and _gradients_measured(steps, norm):
        parts.append("every parameter's gradient before the clip within its bound: the norm itself is computed wrong")
    return "; ".join(parts)


def _norms(norm: Failure) -> tuple[float, float] | None:
    """(verl's norm, the oracle's) as the failure's words show them (4 significant digits); None where either is
    not a number."""
    try:
        return float(shown(norm.verl)), float(shown(norm.reference))
    except ValueError:
        return None


def _factor(norm: Failure) -> str:
    numbers = _norms(norm)
    try:
        return f" (verl's norm x{numbers[0] / numbers[1]:.3g} the oracle's)" if numbers else ""
    except ZeroDivisionError:
        return ""


def _worst(updates: list[Failure], lead: Failure) -> str:
    """The first (worst) update's parameter and error, with its moment where it is not the lead's."""
    worst = f"{updates[0].subject} {_error_of(updates[0])}"
    return worst + (f" {updates[0].moment}" if updates[0].moment != lead.moment else "")


def _gradients_measured(steps: list[UpdateStepNumbers] | None, lead: Failure) -> bool:
    """Whether the record's step at the lead's moment holds the gradients' errors before the clip."""
    entry = _step_at(steps, lead)
    return entry is not None and bool(entry.grad_rel)


def _step_at(steps: list[UpdateStepNumbers] | None, lead: Failure) -> UpdateStepNumbers | None:
    """The record's optimizer step at the lead's moment (its RL step and mini-batch; the first mini-batch where the
    moment names none)."""
    if not (steps and lead.moment and lead.step is not None):
        return None
    step, mini_batch = lead.step, lead.mini_batch or 0
    return next((e for e in steps if e.step == step and e.mini_batch == mini_batch), None)


def _clip_engaged(lead: Failure, steps: list[UpdateStepNumbers] | None, clip_grad: float | None) -> bool | None:
    """Whether the clip engaged at that optimizer step in verl or the oracle: verl's norm or the oracle's above
    clip_grad, or the oracle's clip_active there; None: not known."""
    numbers = _norms(lead)
    if clip_grad and numbers:
        return max(numbers) > clip_grad
    entry = _step_at(steps, lead)
    if entry is None:
        return None
    return entry.clip_active
