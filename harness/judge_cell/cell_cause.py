"""The cause of a one-step cell, an error or a hang as data (records/results.py Failure): what its diagnosis
(judge_cell/diagnosis.py) found, read from the typed diagnosis, never from its words. verify groups a patch's failing
cells by the cause's kind and subject (judge_change/patch_verdict.py failures_by_cause); render/cause_words.py writes a
group's words. An update's cause is its why's lead (judge_cell/update_why.py update_cause).

The one function: `one_step_cause`."""

from __future__ import annotations

from harness.judge_cell.diagnosis import NO_PATTERN, close_to
from harness.records.measures import Diagnosis, GradDiagnosis
from harness.records.results import Failure, FailureKind, GradientOf, Record


def one_step_cause(record: Record) -> Failure | None:
    """The failure that explains a judged record's others: an error's class (a known failure's with its public
    reference), a hang, or a mismatch's first finding in the order diagnose says them (the log-probs, else the
    gradients' class shared by most failing parameters, else what the step left unsharded); None for a pass."""
    diagnosis, words = record.verdict.diagnosis or Diagnosis(), record.verdict.why or ""
    if record.outcome == "hang":
        return Failure(kind=FailureKind.HANG, words=words)
    if record.outcome == "error":
        return _error_cause(record, diagnosis)
    if record.outcome != "mismatch":
        return None
    if diagnosis.log_probs is not None:
        return Failure(kind=FailureKind.LOG_PROBS, subject=_log_probs_class(diagnosis), words=words)
    if diagnosis.grads:
        subject, names = _shared_gradient_class(diagnosis.grads, record.world_size or 1)
        return Failure(
            kind=FailureKind.GRADIENT, gradient_of=GradientOf.STEP, subject=subject, parameters=names, words=words
        )
    units = sorted((record.measures.residency.unsharded_units if record.measures.residency else {}) or {})
    if units:
        return Failure(kind=FailureKind.RESIDENCY, subject=units[0], words=words)
    if diagnosis.residency:
        return Failure(kind=FailureKind.RESIDENCY, subject="lm_head copies", words=words)
    return Failure(kind=FailureKind.MISMATCH, subject=NO_PATTERN, words=words)


def _error_cause(record: Record, diagnosis: Diagnosis) -> Failure:
    """An error's class and the object it concerns; a known failure's public reference; an error of no class by
    its root cause's type."""
    found, error = diagnosis.error, record.verdict.error
    text = found.text if found else record.verdict.why or ""
    if found and (found.error_class or found.reference):
        return Failure(
            kind=FailureKind.ERROR,
            subject=found.error_class or found.reference,
            known_issue=found.reference,
            parameters=[found.object] if found.object else [],
            words=text,
        )
    return Failure(
        kind=FailureKind.ERROR, subject=f"{NO_PATTERN}: {error.root_type() if error else 'error'}", words=text
    )


def _log_probs_class(diagnosis: Diagnosis) -> str:
    """What the log-probs' diagnosis found, in diagnose's order: rows the head skipped, where the errors sit
    under sequence parallelism, which samples, else the alternative they match (or none)."""
    found = diagnosis.log_probs
    if diagnosis.skipped_rows and found.pattern is None:
        return "skipped rows"
    if diagnosis.sp_positions is not None:
        return diagnosis.sp_positions.pattern or "sp positions"
    if diagnosis.rows is not None:
        return "some samples, the shorter ones" if diagnosis.rows.shorter_than_longest else "some samples"
    return found.pattern or NO_PATTERN


def _shared_gradient_class(grads: dict[str, GradDiagnosis], world: int) -> tuple[str, list[str]]:
    """The class of gradient shared by most failing parameters (lm_head.weight's where tied, as the why says it),
    and those parameters."""
    by_class: dict[str, list[str]] = {}
    for name, found in grads.items():
        by_class.setdefault(gradient_class(found, world), []).append(name)
    return max(by_class.items(), key=lambda kv: (len(kv[1]), "lm_head.weight" in kv[1]))


def gradient_class(found: GradDiagnosis, world: int) -> str:
    """A gradient's class: the alternative it matches and the named factor of its k (W, 1/W, -1; another k:
    "k"), the same at every world size; "zero"; or no known pattern and the closest alternative."""
    if found.pattern is None:
        return f"{NO_PATTERN} (closest: {found.closest})" if found.closest else NO_PATTERN
    if found.pattern == "zero" or found.k is None:
        return found.pattern
    factors = {"1": 1.0, "W": float(world), "1/W": 1 / world, "-1": -1.0}
    named = next((name for name, value in factors.items() if close_to(found.k, value)), "k")
    return found.pattern if named == "1" else f"{found.pattern} x {named}"
