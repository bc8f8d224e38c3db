"""Judge the training update (scenarios with `steps`): what every rank observed of verl's update
(rank/verl_side/engine_update.py) against the oracle's (rank/oracle/update.py), after every optimizer step.

Measured, in the order a step happens: the log-probs verl computed on the weights the RL step starts from (the
old log-probs; after the last step, the next step's), the samples verl's iterator put in each micro-batch (the
oracle's are fixed: a different order is reported, never assumed away), that every rank took every optimizer
step, then per optimizer step every parameter's update (weights after - before) and weights, and verl's metrics
for that mini-batch. The first number out of tolerance, in that order, is the why.

Each failure is typed (records/results.py Failure); judge_cell/update_why.py writes the why from them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.judge_cell.micro_batching import micro_batch_order, micro_batching, per_micro_batch_metrics
from harness.judge_cell.shard_stats import even_share_relative, merge_ranks
from harness.judge_cell.update_why import shown
from harness.records.results import Failure, FailureKind, GradientOf, RankResult

# verl's metric name -> the oracle's (rank/oracle/update.py), and whether it is judged relative or absolute.
METRICS = {
    "grad_norm": ("grad_norm", "rel"),
    "lr": ("lr", "rel"),
    "loss": ("loss", "abs"),
    "actor/pg_loss": ("pg_loss", "abs"),
    "actor/entropy_loss": ("entropy_loss", "abs"),
    "actor/pg_clipfrac": ("pg_clipfrac", "abs"),
    "actor/pg_clipfrac_lower": ("pg_clipfrac_lower", "abs"),
    "actor/ppo_kl": ("ppo_kl", "abs"),
    # ppo_loss logs the KL term's value under its own name, without the actor/ prefix
    "kl_loss": ("kl_loss", "abs"),
}


@dataclass
class MetricRow:
    """One optimizer step's place (RL step, its k-th optimizer step, epoch, mini-batch), whether the clip engaged,
    and verl's metrics beside the oracle's (as the record keeps them: verl, oracle, error, kind)."""

    step: int
    index: int
    epoch: int
    mini_batch: int
    clip_active: bool
    metrics: dict[str, dict] = field(default_factory=dict)


def _where(step: int, mini_batch: int | None = None, epoch: int = 0, epochs: int = 1) -> str:
    """'step 2' / 'step 2, mini-batch 1' (1-based, as a person counts), with the epoch where there are several."""
    at = f"step {step + 1}"
    if epochs > 1:
        at += f", epoch {epoch + 1}"
    return at if mini_batch is None else f"{at}, mini-batch {mini_batch + 1}"


def moment(step: int, mini_batch: int | None = None, epoch: int = 0, epochs: int = 1, word: str = "at") -> dict:
    """A failure's moment as Failure's fields: the words ("at step 2, mini-batch 1", "before step 2") and the
    0-based numbers. Failures of one moment are one optimizer step's (judge_cell/update_why.py)."""
    return {"moment": f"{word} {_where(step, mini_batch, epoch, epochs)}", "step": step, "mini_batch": mini_batch}


def param_failure(what: FailureKind, name: str, value: float, bound: float, at: dict) -> Failure:
    """A parameter's gradient before the clip, update or weights (what) over its bound at a moment (at)."""
    gradient = what == FailureKind.GRADIENT
    before = " before the clip" if gradient else ""
    words = f"{what} {name}{before}: relative error {value:.3g} > {bound:g} {at['moment']}"
    of = {"gradient_of": GradientOf.UPDATE} if gradient else {}
    return Failure(
        kind=what, subject=name, value=_number(value), bound=bound, parameters=[name], words=words, **at, **of
    )


def metric_failure(name: str, m: dict, bound: float, at: dict) -> Failure:
    """verl's metric (m: verl, oracle, error, kind as the record keeps them) over its bound at a moment (at)."""
    kind = "relative error" if m["kind"] == "rel" else "error"
    words = (
        f"{name}: verl {shown(m['verl'])}, oracle {shown(m['oracle'])} {at['moment']}"
        f" ({kind} {shown(m['error'])} > {bound:g})"
    )
    return Failure(
        kind=FailureKind.METRIC, subject=name, value=m["error"], bound=bound, verl=m["verl"], reference=m["oracle"],
        words=words, **at,
    )  # fmt: skip


def _merged_steps(results: list[RankResult], expected: int) -> tuple[list[dict], dict[int, list], list[Failure]]:
    """Per optimizer step, every parameter's sums added over the ranks; the steps some rank never took, per RL
    step, and those it took beyond the update's, as failures. A rank's k-th observed step of an RL step is matched
    with the oracle's k-th."""
    extra = []
    merged: dict[tuple, dict] = {}
    grads: dict[tuple, list] = {}  # (RL step, optimizer step) -> every rank's gradient shards before the clip
    taken: dict[int, dict[int, int]] = {}  # rank -> RL step -> optimizer steps it took
    for result in results:
        rank = result.rank
        taken[rank] = {}
        for entry in result.update.optimizer_steps:
            if entry.extra:
                words = f"rank {rank} took an optimizer step the update does not have ({_where(entry.step)})"
                extra.append(
                    Failure(kind=FailureKind.OPTIMIZER_STEPS, subject=f"rank {rank}", step=entry.step, words=words)
                )
                continue
            taken[rank][entry.step] = taken[rank].get(entry.step, 0) + 1
            sums = merged.setdefault((entry.step, entry.index), {})
            if entry.grads:
                grads.setdefault((entry.step, entry.index), []).append(entry.grads)
            for name, e in entry.params.items():
                s = sums.setdefault(name, [0.0, 0.0, 0.0, 0.0, 0])
                s[0] += e.theta_diff_sq
                s[1] += e.theta_ref_sq
                s[2] += e.delta_diff_sq
                s[3] += e.delta_ref_sq
                s[4] += e.numel
    missing = _missing_steps(taken, expected_counts(results, expected))
    steps = []
    for (step, index), sums in sorted(merged.items()):
        update = even_share_relative({n: (s[2], s[3], s[4]) for n, s in sums.items()})
        weights = even_share_relative({n: (s[0], s[1], s[4]) for n, s in sums.items()})
        entry = {"step": step, "index": index, "update_rel": update, "param_rel": weights}
        # Judged only where every rank measured them (records from before, and ranks that did not, are not).
        shards = grads.get((step, index), [])
        if shards and len(shards) == len(results):
            entry["grad_rel"] = pre_clip_relative(shards)
        steps.append(entry)
    return steps, missing, extra


def pre_clip_relative(grads_by_rank: list[dict]) -> dict[str, float]:
    """Every rank's gradient shards before the clip -> parameter -> the whole gradient's relative error, as a
    one-backward cell's gradients are judged (shard_stats: merged over ranks, against the even share)."""
    merged = merge_ranks(grads_by_rank)
    return even_share_relative({name: (s.diff_sq, s.ref_sq, s.numel) for name, s in merged.items()})


def _missing_steps(taken: dict[int, dict[int, int]], counts: dict[int, int]) -> dict[int, list[Failure]]:
    """RL step -> what its optimizer steps lacked: no rank took them (the weights never moved), or which ranks
    took fewer than the update has."""
    missing = {}
    for step, count in sorted(counts.items()):
        short = {rank: steps.get(step, 0) for rank, steps in sorted(taken.items()) if steps.get(step, 0) < count}
        if short and len(short) == len(taken) and not any(short.values()):
            words = (
                f"no rank took any of the {count} optimizer steps of {_where(step)}: the weights never moved"
                " (verl skipped every step)"
            )
            missing[step] = [Failure(kind=FailureKind.OPTIMIZER_STEPS, subject="every rank", step=step, words=words)]
        elif short:
            missing[step] = [
                Failure(
                    kind=FailureKind.OPTIMIZER_STEPS,
                    subject=f"rank {rank}",
                    step=step,
                    words=f"rank {rank} took {n} of the {count} optimizer steps of {_where(step)} (its shards stayed"
                    " behind: verl skipped a step on some ranks only)",
                )
                for rank, n in short.items()
            ]
    return missing


def expected_counts(results: list[RankResult], per_rl_step: int) -> dict[int, int]:
    """RL step -> optimizer steps every rank must take in it."""
    rl_steps = len(results[0].update.log_probs) - 1
    return dict.fromkeys(range(rl_steps), per_rl_step)


def _metric_error(kind: str, value, expected) -> float:
    if value is None or expected is None:
        return math.inf
    if not (math.isfinite(value) and math.isfinite(expected)):
        return math.inf
    if kind == "abs":
        return abs(value - expected)
    return abs(value - expected) / abs(expected) if expected else abs(value)


def _metric_rows(rank0: RankResult, per_rl_step: int, split: list | None = None) -> list[MetricRow]:
    """Per optimizer step: verl's value of each metric for that mini-batch beside the oracle's (lr: verl reports it
    on the RL step's last mini-batch only, after its scheduler step). split: per optimizer step, the oracle's
    per-micro-batch metrics over verl's own micro-batches (dynamic bsz), in place of the plan's."""
    metrics = rank0.update.metrics
    rows = []
    for k, o in enumerate(rank0.update.oracle):
        over_split = (split[k] if split and k < len(split) else None) or {}
        step, index = o.step, k % per_rl_step
        verl = (metrics[step].verl or {}) if step < len(metrics) else {}
        row = MetricRow(step, index, o.epoch, o.mini_batch, o.clip_active)
        for verl_name, (name, kind) in METRICS.items():
            values = verl.get(verl_name)
            position = 0 if name == "lr" else index
            value = values[position] if isinstance(values, list) and len(values) > position else None
            if name not in o.metrics:
                if value is not None and name != "lr":
                    # A term the oracle's loss has none of (entropy asked where the trainer asks none, a KL term
                    # without use_kl_loss): verl computed something the update should not have.
                    row.metrics[name] = {"verl": value, "oracle": None, "error": "inf", "kind": kind}
                continue
            expected = over_split.get(name, o.metrics[name])
            row.metrics[name] = {
                "verl": value,
                "oracle": expected,
                "error": _number(_metric_error(kind, value, expected)),
                "kind": kind,
            }
        rows.append(row)
    return rows


def _number(x: float):
    return "inf" if isinstance(x, float) and math.isinf(x) else x


def _value(x) -> float:
    return math.inf if x == "inf" else x


def update_parity(scenario, results: list[RankResult], tol, update_tol) -> tuple[dict, list[Failure]]:
    """The update's numbers (the record's `measures.update`) and the failures they imply, in the order they happen: the
    micro-batch order, then per RL step its log-probs, the optimizer steps a rank missed, and per optimizer step
    the updates, the weights and the metrics; last, the log-probs after the last step."""
    per_rl_step = scenario.ppo_mini_batches * scenario.ppo_epochs
    steps, missing, extra = _merged_steps(results, per_rl_step)
    rank0 = next(r for r in results if r.rank == 0)
    split = per_micro_batch_metrics(scenario, results, rank0.update.oracle) if scenario.engine.use_dynamic_bsz else None
    rows = _metric_rows(rank0, per_rl_step, split)
    by_place = {(row.step, row.index): row for row in rows}
    order = micro_batch_order(scenario, results)
    failures = [Failure(kind=FailureKind.MICRO_BATCHES, words=order)] if order else []
    failures += [
        Failure(kind=FailureKind.SETTING, subject="engine.gradient_checkpointing", words=words)
        for words in settings_not_taken(scenario, results)
    ]
    log_probs = []
    for step in range(scenario.steps + 1):
        lp = max(_value(r.update.log_probs[step].log_probs.max_abs) for r in results)
        ent = max(_value(_entropy_max_abs(r.update.log_probs[step])) for r in results)
        log_probs.append({"step": step, "logprob_max_abs": _number(lp), "entropy_max_abs": _number(ent)})
        before = step < scenario.steps
        label = f"before {_where(step)}" if before else f"after the last step ({_where(step - 1)})"
        # the log-probs an RL step starts from are that step's moment; after the last step there is none
        at = moment(step, word="before") if before else {"step": step}
        # The first step's log-probs are on the seeded weights, as a one-step cell's; later ones on updated weights.
        lp_bound = tol.logprob_abs if step == 0 else update_tol.logprob_abs
        if lp > lp_bound:
            words = (
                f"log-probs {label}: differ by {lp:.3g} > {lp_bound:g}{_samples_wrong(results, step, lp_bound)}"
                f"{skipped_note(results, step)}"
            )
            failures.append(Failure(kind=FailureKind.LOG_PROBS, value=_number(lp), bound=lp_bound, words=words, **at))
        if ent > tol.entropy_abs:
            words = f"entropy {label}: differs by {ent:.3g} > {tol.entropy_abs:g}"
            failures.append(
                Failure(kind=FailureKind.ENTROPY, value=_number(ent), bound=tol.entropy_abs, words=words, **at)
            )
        failures += _ref_failures(results, step, tol)
        failures += missing.get(step, [])
        for entry in (e for e in steps if e["step"] == step):
            row = by_place.get((entry["step"], entry["index"]))
            mini_batch, epoch = (row.mini_batch, row.epoch) if row else (entry["index"], 0)
            at = moment(step, mini_batch, epoch, scenario.ppo_epochs)
            # The first optimizer step's gradient is on the seeded weights, as a one-step cell's; later ones on
            # weights that carry the update's rounding.
            grad_bound = tol.grad_rel if (entry["step"], entry["index"]) == (0, 0) else update_tol.grad_rel
            failures += _step_failures(entry, row, at, update_tol, grad_bound)
    failures += extra
    slip = metric_alternative_why(rank0, rows, update_tol, scenario.ppo_epochs)
    if slip and failures:
        failures.insert(0, slip)
    summary = _summary(steps, rows, log_probs)
    ref_entries = [_value(e.log_probs.max_abs) for r in results for e in r.update.ref_log_probs]
    if ref_entries:
        summary["ref_logprob_max_abs"] = _number(max(ref_entries))
    shown = {"log_probs": log_probs, "steps": _shown_steps(steps, by_place), **summary}
    split_record = micro_batching(scenario, results)
    if split_record is not None:
        shown["micro_batching"] = split_record
    return shown, failures


def _samples_wrong(results: list[RankResult], step: int, bound: float) -> str:
    """Where some samples' log-probs are wrong and others right: which (judge_cell/diagnosis.py row_diagnosis), in
    parentheses; else nothing."""
    from harness.judge_cell.diagnosis import row_diagnosis

    rank0 = next(r for r in results if r.rank == 0)
    rows = row_diagnosis([r.update.log_probs[step] for r in results], bound, rank0.batch_layout)
    return f" ({rows.text.removeprefix('log-probs ')})" if rows else ""


def settings_not_taken(scenario, results: list[RankResult]) -> list[str]:
    """Settings whose effect no number of the update shows, checked on what verl built: gradient checkpointing
    recomputes the same values in fp32, so only the module's own flag tells it ran (a rank that did not say is not
    judged)."""
    if not scenario.engine.gradient_checkpointing:
        return []
    off = [r.rank for r in results if r.gradient_checkpointing is False]
    if not off:
        return []
    return [
        f"engine.gradient_checkpointing: the module verl built on rank {off[0]} does not recompute its layers"
        " (is_gradient_checkpointing False)"
    ]


def metric_alternative_why(rank0: RankResult, rows: list[MetricRow], update_tol, epochs: int) -> Failure | None:
    """At the first optimizer step whose loss metrics are off, the slip they fit: verl's kl_loss / pg_loss (and
    loss) within tolerance of what the oracle computes on the same log-probs under another KL estimator or with
    clip-higher's bounds mixed up (rank/oracle/update.py _term_alternatives). None where no alternative fits."""
    for row, oracle in zip(rows, rank0.update.oracle or [], strict=False):
        off = [
            n
            for n in ("kl_loss", "pg_loss")
            if n in row.metrics and _value(row.metrics[n]["error"]) > update_tol.metric_abs
        ]
        if not off:
            continue
        for name, values in oracle.metric_alternatives.items():
            judged = {m: v for m, v in values.items() if m in row.metrics and row.metrics[m]["verl"] is not None}
            if off[0] in judged and all(
                abs(row.metrics[m]["verl"] - v) <= update_tol.metric_abs for m, v in judged.items()
            ):
                shown = ", ".join(
                    f"{m} {row.metrics[m]['verl']:.4g} (oracle {row.metrics[m]['oracle']:.4g})" for m in judged
                )
                at = moment(row.step, row.mini_batch, row.epoch, epochs)
                words = f"verl's loss computed with {name}: its {shown} match that {at['moment']}"
                return Failure(kind=FailureKind.LOSS_SLIP, subject=name, words=words, **at)
        return None
    return None


def _ref_failures(results: list[RankResult], step: int, tol) -> list[Failure]:
    """verl's ref engine's log-probs of an RL step (loss.use_kl_loss) against the oracle's frozen initial model's:
    on the seeded weights, judged as the first step's log-probs are."""
    entries = [e for r in results for e in r.update.ref_log_probs if e.step == step]
    if not entries:
        return []
    worst = max(_value(e.log_probs.max_abs) for e in entries)
    if worst > tol.logprob_abs:
        at = moment(step, word="before")
        words = f"reference log-probs (verl's ref engine) {at['moment']}: differ by {worst:.3g} > {tol.logprob_abs:g}"
        return [
            Failure(
                kind=FailureKind.REFERENCE_LOG_PROBS, value=_number(worst), bound=tol.logprob_abs, words=words, **at
            )
        ]
    return []


def _entropy_max_abs(entry) -> float:
    """An RL step's entropy difference; a rank that returned no entropy counts as infinitely far."""
    return entry.entropy.max_abs if entry.entropy is not None else math.inf


def _step_failures(entry: dict, row: MetricRow | None, at: dict, update_tol, grad_rel: float | None = None) -> list:
    """One optimizer step's parameters over their bounds (worst first) at its moment (at): the gradients before the
    clip (bound: the precision's one-backward gradient tolerance, grad_rel), the updates, the weights; then its
    metrics."""
    failures = []
    for measure, bound, what in (
        ("grad_rel", grad_rel, FailureKind.GRADIENT),
        ("update_rel", update_tol.update_rel, FailureKind.UPDATE),
        ("param_rel", update_tol.param_rel, FailureKind.WEIGHTS),
    ):
        if bound is None:
            continue
        over = sorted(((v, n) for n, v in entry.get(measure, {}).items() if v > bound), reverse=True)
        failures += [param_failure(what, name, value, bound, at) for value, name in over]
    for name, m in (row.metrics if row else {}).items():
        bound = update_tol.metric_rel if m["kind"] == "rel" else update_tol.metric_abs
        if _value(m["error"]) > bound:
            failures.append(metric_failure(name, m, bound, at))
    return failures


def _shown_steps(steps: list[dict], by_place: dict[tuple[int, int], MetricRow]) -> list[dict]:
    """Per optimizer step, what the record keeps: the worst parameters' errors and every metric (by_place: the
    metric rows by (RL step, optimizer step within it))."""
    out = []
    for entry in steps:
        row = by_place.get((entry["step"], entry["index"]))
        worst = sorted(entry["update_rel"].items(), key=lambda kv: -kv[1])[:5]
        out.append(
            {
                "step": entry["step"],
                "epoch": row.epoch if row else 0,
                "mini_batch": row.mini_batch if row else entry["index"],
                "clip_active": row.clip_active if row else None,
                "update_worst": {n: _number(v) for n, v in worst},
                "update_rel": {n: _number(v) for n, v in sorted(entry["update_rel"].items())},
                "grad_rel": {n: _number(v) for n, v in sorted(entry.get("grad_rel", {}).items())},
                "param_worst_rel": _number(max(entry["param_rel"].values(), default=0.0)),
                "metrics": row.metrics if row else {},
            }
        )
    return out


def skipped_note(results: list, step: int) -> str:
    """Where verl wrote exactly 0 log-prob and entropy on rows the oracle scored (rank/measures/rows.py), the
    words for the failure: how many rows, and how many of them the loss weighs."""
    found = [s for r in results if (s := r.update.log_probs[step].skipped_rows) is not None]
    count = sum(s.count for s in found)
    if not count:
        return ""
    in_loss = sum(s.in_loss for s in found)
    return f" (rows the head skipped: {count} of {sum(s.of for s in found)}, {in_loss} of them the loss's)"


def _summary(steps: list[dict], rows: list[MetricRow], log_probs: list[dict]) -> dict:
    worst_update = max(
        ((v, n, e["step"]) for e in steps for n, v in e["update_rel"].items()), default=(None, None, None)
    )
    return {
        "optimizer_steps": len(steps),
        "update_worst_rel": _number(worst_update[0]) if worst_update[0] is not None else None,
        "update_worst_param": worst_update[1],
        "param_worst_rel": _number(max((v for e in steps for v in e["param_rel"].values()), default=0.0)),
        "clip_active": [row.clip_active for row in rows],
        # only the metrics judged somewhere: one no row has (entropy_loss with no entropy asked) is not judged
        "metric_worst": {
            name: _number(_worst_metric(rows, name))
            for name, _ in METRICS.values()
            if any(name in row.metrics for row in rows)
        },
        "logprob_max_abs": _number(max(_value(x["logprob_max_abs"]) for x in log_probs)),
        "entropy_max_abs": _number(max(_value(x["entropy_max_abs"]) for x in log_probs)),
    }


def _worst_metric(rows: list[MetricRow], name: str) -> float:
    return max((_value(row.metrics[name]["error"]) for row in rows if name in row.metrics), default=0.0)
