"""Judge one launch: merge what the ranks wrote into the run's outcome and parity numbers.

Outcome order: skipped (could not run here) > hang (timeout) > error (any rank raised, or a rank vanished)
> mismatch (any number out of tolerance, a gradient missing or non-finite) > pass.
"""

from __future__ import annotations

import math

from pydantic import ValidationError

from harness.errors import first_error_line
from harness.inputs.tolerances import tolerance_for, update_tolerance_for
from harness.judge_cell.cell_cause import one_step_cause
from harness.judge_cell.diagnosis import diagnose, step_phase
from harness.judge_cell.head_step import head_outcome
from harness.judge_cell.shard_stats import even_share_relative, merge_ranks
from harness.judge_cell.update_verdict import update_parity
from harness.judge_cell.update_why import update_cause, update_why
from harness.launch.launch import RawRun
from harness.launch.run_dir import rank_progress
from harness.paths import shown_path
from harness.rank.phases import PHASES
from harness.records.measures import Diagnosis, HeadMemory, Parity, Residency, Settings
from harness.records.rank_measures import GradShard
from harness.records.results import Failure, FailureKind, GradientOf, RankError, RankResult, Record, merge_over_ranks


def _root_error(errors: list[RankError]) -> RankError:
    """The error that caused the others: the one raised at the earliest phase, then the lowest rank.

    A rank that fails in a collective because its peer died does so in the same phase or later, and its
    message is about the transport, so the earliest phase is the root cause's.
    """
    transport_words = ("connection", "timed out", "timeout", "closed", "broken pipe", "peer", "gloo", "nccl")

    def key(err):
        secondary = any(w in (err.message or "").lower() for w in transport_words)
        return (secondary, PHASES.index(err.phase) if err.phase in PHASES else 99, err.rank)

    return sorted(errors, key=key)[0]


def _placed(error: RankError) -> RankError:
    """A rank's error with the phase its traceback places it in (backward, optimizer: diagnosis.step_phase); the
    phase the rank announced is kept as rank_phase where they differ."""
    phase = step_phase(error)
    return error if phase == error.phase else error.model_copy(update={"phase": phase, "rank_phase": error.phase})


def _grad_parity(grads_by_rank: list[dict[str, GradShard]]) -> tuple[dict, list, dict]:
    """Per parameter ||g - g_ref|| / max(||g_ref||, its even share of the whole reference gradient's norm)
    (shard_stats.even_share_relative), the parameters missing a gradient and, per parameter, the other problems
    found (their words)."""
    merged = merge_ranks(grads_by_rank)
    rel = even_share_relative({name: (s.diff_sq, s.ref_sq, s.numel) for name, s in merged.items()})
    problems = {name: sums.problems for name, sums in merged.items() if sums.problems}
    missing = sorted(n for n, p in problems.items() if "missing" in p)
    other = {n: ", ".join(sorted(p - {"missing"})) for n, p in sorted(problems.items()) if p - {"missing"}}
    return rel, missing, other


def _gradient_failure(name: str, words: str, **numbers) -> Failure:
    """A one-step cell's failure of one parameter's gradient (its value and bound where a number is off)."""
    return Failure(
        kind=FailureKind.GRADIENT, gradient_of=GradientOf.STEP, subject=name, parameters=[name], words=words, **numbers
    )


def _parity_against(results: list[RankResult], ref_name: str, tol) -> tuple[dict, list[Failure]]:
    """Parity numbers against one reference (merged over ranks) and the failures they imply."""
    per_rank = [r.parity[ref_name] for r in results]
    outputs = [o for p in per_rank for o in p.outputs.values()]
    lp = max(o.log_probs.max_abs for o in outputs)
    # No entropy where none was asked (an update with entropy_coeff 0, the reference's pass): nothing to judge.
    ent = max((o.entropy.max_abs for o in outputs if o.entropy is not None), default=0.0)
    has_grads = all(p.grads is not None for p in per_rank)
    rel, missing, grad_problems = _grad_parity([p.grads for p in per_rank]) if has_grads else ({}, [], {})
    worst_param = max(rel, key=rel.get) if rel else None
    parity = {
        "logprob_max_abs": _json_number(lp),
        "entropy_max_abs": _json_number(ent),
        "grad_worst_rel": _json_number(rel[worst_param]) if worst_param else None,
        "grad_worst_param": worst_param,
        "missing_grads": missing,
        "grad_problems": [f"{name}: {words}" for name, words in grad_problems.items()],
        "grads_over_tolerance": {n: _json_number(v) for n, v in sorted(rel.items()) if v > tol.grad_rel},
        # Every parameter's relative error, for the per-parameter picture (render/pictures.py).
        "grad_rel": {n: _json_number(v) for n, v in sorted(rel.items())},
    }
    label = "" if ref_name == "oracle" else f" (vs {ref_name})"
    failures = []
    # Where the ranks also compared the rows verl's trainer reads alone, those are the ones judged.
    read = read_rows(outputs)
    lp_judged, ent_judged = read or (lp, ent)
    parity.update(
        logprob_read_max_abs=_json_number(read[0]) if read else None,
        entropy_read_max_abs=_json_number(read[1]) if read else None,
        unread_rows_remark=unread_rows_remark(lp, ent, *read, tol) if read else None,
    )
    if lp_judged > tol.logprob_abs:
        words = f"log-probs differ by {lp_judged:.3g} > {tol.logprob_abs:g}{label}"
        failures.append(
            Failure(kind=FailureKind.LOG_PROBS, value=_json_number(lp_judged), bound=tol.logprob_abs, words=words)
        )
    if ent_judged > tol.entropy_abs:
        words = f"entropy differs by {ent_judged:.3g} > {tol.entropy_abs:g}{label}"
        failures.append(
            Failure(kind=FailureKind.ENTROPY, value=_json_number(ent_judged), bound=tol.entropy_abs, words=words)
        )
    for name, value in parity["grads_over_tolerance"].items():
        shown = value if isinstance(value, str) else f"{value:.3g}"
        words = f"grad {name}: relative error {shown} > {tol.grad_rel:g}{label}"
        failures.append(_gradient_failure(name, words, value=value, bound=tol.grad_rel))
    failures += [_gradient_failure(name, f"grad {name}: missing{label}") for name in missing]
    failures += [_gradient_failure(name, f"grad {name}: {words}{label}") for name, words in grad_problems.items()]
    return parity, failures


def read_rows(outputs: list) -> tuple[float, float] | None:
    """(log-prob, entropy) differences over the rows verl's trainer reads (rank/measures/rows.py: the rows scoring
    the response; never the prompt's before its last, nor the sequence's last) where every comparison also holds
    them (the direct path, which compares every row); None where they are what was compared (the engine path)."""
    if not outputs or any(o.log_probs_read is None for o in outputs):
        return None
    lp = max(o.log_probs_read.max_abs for o in outputs)
    ent = max((o.entropy_read.max_abs for o in outputs if o.entropy is not None and o.entropy_read), default=0.0)
    return lp, ent


def unread_rows_remark(lp: float, ent: float, lp_read: float, ent_read: float, tol) -> str | None:
    """The remark where the rows never read differ beyond a bound the rows read are within; None otherwise."""
    unread = [
        f"{what} by {whole:.3g} > {bound:g}"
        for what, whole, read, bound in (
            ("log-probs differ", lp, lp_read, tol.logprob_abs),
            ("entropy differs", ent, ent_read, tol.entropy_abs),
        )
        if whole > bound >= read
    ]
    if not unread:
        return None
    return (
        f"{' and '.join(unread)} only at rows verl's trainer never reads (prompt rows, the last row: it keeps "
        f"[:, -response_length - 1 : -1]); at the rows it reads within tolerance ({lp_read:.3g}, {ent_read:.3g}): "
        "not counted"
    )


def _residency_failures(results: list[RankResult]) -> tuple[dict, list[Failure]]:
    merged = {"unsharded_units": {}, "lm_head_copies": 0, "lm_head_copy_bytes": 0}
    for r in results:
        res = r.residency or Residency()
        for unit, nbytes in res.unsharded_units.items():
            merged["unsharded_units"][unit] = max(nbytes, merged["unsharded_units"].get(unit, 0))
        merged["lm_head_copies"] = max(merged["lm_head_copies"], res.lm_head_copies)
        merged["lm_head_copy_bytes"] = max(merged["lm_head_copy_bytes"], res.lm_head_copy_bytes)
    failures = [
        Failure(
            kind=FailureKind.RESIDENCY,
            subject=unit,
            words=f"{unit} left unsharded after the step ({nbytes} bytes per rank)",
        )
        for unit, nbytes in sorted(merged["unsharded_units"].items())
    ]
    if merged["lm_head_copies"]:
        words = (
            f"{merged['lm_head_copies']} full lm_head weight copy(ies) alive after the step "
            f"({merged['lm_head_copy_bytes']} bytes per rank)"
        )
        # the subject judge_cell/cell_cause.py gives the same finding as a cause
        failures.append(Failure(kind=FailureKind.RESIDENCY, subject="lm_head copies", words=words))
    return merged, failures


_STACK_CHARS = 6000  # a rank's stacks in the record: the main thread's is last in faulthandler's dump


def innermost_frame(stacks: str) -> str | None:
    """The main thread's innermost frame ('File "...", line N in f'): faulthandler dumps the current thread (the
    one the signal interrupted, the main thread) last, each thread's innermost frame first."""
    blocks = [b for b in stacks.split("\n\n") if b.strip()]
    last = blocks[-1] if blocks else ""
    current = next((b for b in reversed(blocks) if b.lstrip().startswith("Current thread")), last)
    frames = [line.strip() for line in current.splitlines()[1:] if line.strip().startswith("File ")]
    # importlib's own frames ("<frozen importlib._bootstrap>") say only that an import is running: skip them.
    real = [f for f in frames if not f.startswith('File "<frozen ')]
    return (real or frames or [None])[0]


def merged_warnings(results: list[RankResult]) -> list[dict]:
    """The warnings every rank raised, once each: which ranks raised it and how often in all."""
    merged: dict[tuple, dict] = {}
    for result in results:
        for w in result.warnings:
            key = (w["category"], w["message"], w["where"])
            entry = merged.setdefault(key, {**w, "count": 0, "ranks": []})
            entry["count"] += w["count"]
            entry["ranks"].append(result.rank)
    return list(merged.values())


def _head_memory(results: list[RankResult]) -> HeadMemory | None:
    """The largest logits-shaped tensor and the largest tensor of the step over all ranks
    (rank/measures/around_step.py)."""
    memories = [r.head_memory for r in results if r.head_memory]
    measured = [m for m in memories if m.measured]
    if not measured:
        return memories[0] if memories else None
    vocab = max(measured, key=lambda m: m.largest_vocab_tensor_bytes or 0)
    largest = max(measured, key=lambda m: m.largest_tensor_bytes or 0)
    merged = measured[0].written() | vocab.with_prefix("largest_vocab_tensor_") | largest.with_prefix("largest_tensor_")
    return HeadMemory.model_validate({**merged, "ranks_measured": len(measured)})


def _json_number(x: float):
    return None if x is None else ("inf" if math.isinf(x) else x)


def judge(raw: RawRun) -> Record:
    """The record of one launch, step by step in the order of the outcome rules (module docstring). The fields are
    gathered flat; Record puts the measures (parity, comm, ...) and the verdict's (error, failures, ...) in their
    groups (records/results.py nested_shape)."""
    tol = tolerance_for(raw.scenario.precision)
    results = _validated_results(raw)
    fields = _run_fields(raw, results, tol)
    if raw.skipped_reason:
        return Record.model_validate({**fields, "outcome": "skipped", "skipped_reason": raw.skipped_reason})
    errors = [_placed(r.error) for r in results if r.error]
    fields["rank_errors"] = sorted(errors, key=lambda e: e.rank)
    fields.update(_failed_outcome(raw, errors))
    fields.update(_merged_measures(raw, results, fields["run_dir"]))
    if fields["outcome"]:
        record = Record.model_validate(fields)
        record.verdict.diagnosis, record.verdict.why = diagnose(record, results, tol, [])
        record.verdict.cause = one_step_cause(record)
        return record
    if raw.scenario.path == "head":
        fields.update(head_outcome(results, tol))
        record = Record.model_validate(fields)
        record.verdict.diagnosis, record.verdict.why = Diagnosis(), "; ".join(record.verdict.failure_words())
        return record
    if raw.scenario.steps:
        outcome, failures = _update_outcome(raw.scenario, results, tol)
        record = Record.model_validate(fields | outcome)
        steps = record.measures.update.steps if record.measures.update else None
        why = update_why(failures, steps, raw.scenario.optim.clip_grad)
        record.verdict.diagnosis, record.verdict.why = Diagnosis(), with_known_defect(raw.scenario, record, why)
        record.verdict.cause = update_cause(failures)
        return record
    fields.update(_parity_outcome(raw.scenario, results, tol))
    record = Record.model_validate(fields)
    failing = _failing_params(record.measures.parity)
    diagnosis, why = diagnose(record, results, tol, failing)
    record.verdict.diagnosis, record.verdict.why = diagnosis, with_known_defect(raw.scenario, record, why, failing)
    record.verdict.cause = one_step_cause(record)
    return record


def with_known_defect(scenario, record: Record, why: str | None, failing=()) -> str | None:
    """The why, with the words of the known defect a mismatch is (records/known_failures.py KNOWN_MISMATCHES): the
    Qwen3.5 packed-samples defect is named wherever it shows, an imported recipe's cells too."""
    from harness.inputs.models import type_and_tie
    from harness.records.known_failures import known_mismatch

    if record.outcome != "mismatch" or not why:
        return why
    model_type = type_and_tie(scenario.model, scenario.model_overrides)[0]
    text = " ".join([why, *record.verdict.failure_words(), *map(str, failing)])
    known = known_mismatch(model_type, scenario.use_remove_padding, text)
    return f"{why}; {known['why']}" if known else why


def _run_fields(raw: RawRun, results: list[RankResult], tol) -> dict:
    """What every record has, whatever the ranks did: the cell, how it ran, its tolerances and settings."""
    scenario = raw.scenario
    return {
        "scenario": scenario.name,
        "arm": raw.arm_name,
        "world_size": raw.world_size,
        "device": raw.device,
        "backend": next((r.backend for r in results if r.backend), "nccl" if raw.device == "cuda" else "gloo"),
        "outcome": None,
        "error": None,
        # Every record's measures name these two, a skipped cell's too.
        "parity": None,
        "comm": None,
        "wall_s": raw.wall_s,
        "rank_start": raw.rank_start,
        "sandbox": raw.sandbox or None,
        "run_dir": shown_path(raw.run_dir) if raw.run_dir else None,
        "failures": [],
        "rank_errors": [],
        "tolerance": tol.as_dict(),
        "settings": scenario.model_dump(include=set(Settings.model_fields)),
    }


def _validated_results(raw: RawRun) -> list[RankResult]:
    """The ranks' results by rank, each checked against RankResult: a field a rank writes that the model does not
    declare is a harness bug, caught here rather than lost or misread downstream."""
    results = []
    for rank, result in sorted(raw.rank_results.items()):
        try:
            results.append(RankResult.model_validate(result))
        except ValidationError as exc:
            where = f"{shown_path(raw.run_dir)}/rank{rank}.json" if raw.run_dir else f"rank{rank}.json"
            raise ValueError(f"{first_error_line(where, exc)} (harness/records/results.py)") from None
    return results


def _failed_outcome(raw: RawRun, errors: list[RankError]) -> dict:
    """outcome and error of a run that hung, lost a rank or had a rank raise; nothing for one that finished."""
    killed = {r: s for r, s in raw.rank_signals.items() if r not in raw.rank_results and s != "SIGTERM"}
    if raw.timed_out:
        return {"outcome": "hang", "error": _hang_error(raw, errors)}
    if killed or not errors and (len(raw.rank_results) < raw.world_size or raw.returncode):
        return {"outcome": "error", "error": _lost_rank_error(raw, killed)}
    if errors:
        return {"outcome": "error", "error": _root_error(errors)}
    return {}


def _hang_error(raw: RawRun, errors: list[RankError]) -> dict:
    """Which ranks never wrote a result and the phase each was in; where each waits (its stacks)."""
    progress = rank_progress(raw.run_dir)
    stuck = {r: progress.get(r, "not started") for r in range(raw.world_size) if r not in raw.rank_results}
    error = {
        "type": "Timeout",
        "phase": None,
        "rank": sorted(stuck) or None,
        "message": f"no result after {raw.scenario.timeout_s:g}s; ranks still running (last phase): "
        + ", ".join(f"{r}: {p}" for r, p in sorted(stuck.items())),
    }
    if errors:
        error["root_cause_candidate"] = _root_error(errors)
    # Where each stuck rank waits: every thread's Python stack, innermost frame first (rank/stacks.py).
    error["stacks"] = {str(r): text[-_STACK_CHARS:] for r, text in sorted(raw.rank_stacks.items())}
    error["waits_in"] = {str(r): innermost_frame(text) for r, text in sorted(raw.rank_stacks.items())}
    return error


def _lost_rank_error(raw: RawRun, killed: dict) -> dict:
    """A rank that a signal ended wrote nothing (SIGKILL: what the kernel's OOM killer sends). It is the root
    cause, not its peers' transport errors nor the SIGTERM torchrun then sent them."""
    lost = sorted(set(range(raw.world_size)) - set(raw.rank_results))
    progress = rank_progress(raw.run_dir)
    root = min(killed) if killed else (lost[0] if lost else None)
    how = (
        f"rank {root} was killed by {killed[root]} in phase {progress.get(root)}"
        if killed
        else f"rank(s) {lost} ended without a result (torchrun exit {raw.returncode})"
    )
    return {
        "type": "RankKilled" if killed else "RankLost",
        "phase": progress.get(root) if root is not None else None,
        "rank": root,
        "signal": killed.get(root),
        "message": f"{how}; log tail: {raw.log_tail.strip().splitlines()[-1] if raw.log_tail.strip() else ''}",
    }


def _merged_measures(raw: RawRun, results: list[RankResult], run_dir: str | None) -> dict:
    """What the ranks measured, merged over them: every measure of RankMeasures by its own rule, and the warnings,
    the rank logs and the head memory."""
    return {
        "warnings": merged_warnings(results),
        "rank_logs": {str(r): [f"{run_dir}/{name}" for name in names] for r, names in sorted(raw.rank_logs.items())},
        **merge_over_ranks(results),
        "head_memory": _head_memory(results),
    }


def _parity_outcome(scenario, results: list[RankResult], tol) -> dict:
    """Parity against the oracle and every other reference the ranks measured, what is left gathered after the
    step, the failures of both, and the outcome they make: mismatch if any, else pass."""
    parity, failures = _parity_against(results, "oracle", tol)
    for ref_name in sorted(set(results[0].parity) - {"oracle"}):
        parity[ref_name], extra = _parity_against(results, ref_name, tolerance_for(scenario.precision, ref_name))
        failures += extra
    residency, extra = _residency_failures(results)
    failures += extra
    return {
        "parity": parity,
        "residency": residency,
        "failures": failures,
        "outcome": "mismatch" if failures else "pass",
    }


def _update_outcome(scenario, results: list[RankResult], tol) -> tuple[dict, list[Failure]]:
    """A training update's numbers (judge_cell/update_verdict.py) against its tolerances, what is left gathered after
    it, and the outcome they make; and the failures, typed (the record keeps their words). The parity fields every
    record has hold the log-probs over all steps; the per-step numbers are the record's `measures.update`."""
    update_tol = update_tolerance_for(scenario.precision)
    update, failures = update_parity(scenario, results, tol, update_tol)
    residency, extra = _residency_failures(results)
    failures += extra
    parity = {
        "logprob_max_abs": update["logprob_max_abs"],
        "entropy_max_abs": update["entropy_max_abs"],
        "grad_worst_rel": None,
        "grad_worst_param": None,
        "missing_grads": [],
        "grad_problems": [],
        "grads_over_tolerance": {},
        "grad_rel": {},
    }
    return {
        "parity": parity,
        "update": update,
        "tolerance": {**tol.as_dict(), "update": update_tol.as_dict()},
        "residency": residency,
        "failures": failures,
        "outcome": "mismatch" if failures else "pass",
    }, failures


def _failing_params(parity: Parity) -> list[str]:
    """Parameters whose gradient is over tolerance or missing against any reference: what diagnosis explains."""
    return sorted({n for ref in [parity, *parity.references.values()] for n in ref.failing_params()})
