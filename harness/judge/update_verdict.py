"""Judge the training update (scenarios with `steps`): what every rank observed of verl's update
(rank/verl_side/engine_update.py) against the oracle's (rank/oracle/update.py), after every optimizer step.

Measured, in the order a step happens: the log-probs verl computed on the weights the RL step starts from (the
old log-probs; after the last step, the next step's), the samples verl's iterator put in each micro-batch (the
oracle's are fixed: a different order is reported, never assumed away), that every rank took every optimizer
step, then per optimizer step every parameter's update (weights after - before) and weights, and verl's metrics
for that mini-batch. The first number out of tolerance, in that order, is the why.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from harness.judge.micro_batching import micro_batch_order, micro_batching, per_micro_batch_metrics
from harness.judge.shard_stats import even_share_relative, merge_ranks
from harness.records.results import RankResult

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


def _merged_steps(results: list[RankResult], expected: int) -> tuple[list[dict], dict[int, list[str]], list[str]]:
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
                extra.append(f"rank {rank} took an optimizer step the update does not have ({_where(entry.step)})")
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


def _missing_steps(taken: dict[int, dict[int, int]], counts: dict[int, int]) -> dict[int, list[str]]:
    """RL step -> what its optimizer steps lacked: no rank took them (the weights never moved), or which ranks
    took fewer than the update has."""
    missing = {}
    for step, count in sorted(counts.items()):
        short = {rank: steps.get(step, 0) for rank, steps in sorted(taken.items()) if steps.get(step, 0) < count}
        if short and len(short) == len(taken) and not any(short.values()):
            missing[step] = [
                f"no rank took any of the {count} optimizer steps of {_where(step)}: the weights never moved"
                " (verl skipped every step)"
            ]
        elif short:
            missing[step] = [
                f"rank {rank} took {n} of the {count} optimizer steps of {_where(step)} (its shards stayed behind:"
                " verl skipped a step on some ranks only)"
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


def update_parity(scenario, results: list[RankResult], tol, update_tol) -> tuple[dict, list[str]]:
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
    failures: list[str] = [order] if order else []
    failures += settings_not_taken(scenario, results)
    log_probs = []
    for step in range(scenario.steps + 1):
        lp = max(_value(r.update.log_probs[step].log_probs.max_abs) for r in results)
        ent = max(_value(_entropy_max_abs(r.update.log_probs[step])) for r in results)
        log_probs.append({"step": step, "logprob_max_abs": _number(lp), "entropy_max_abs": _number(ent)})
        label = f"before {_where(step)}" if step < scenario.steps else f"after the last step ({_where(step - 1)})"
        # The first step's log-probs are on the seeded weights, as a one-step cell's; later ones on updated weights.
        lp_bound = tol.logprob_abs if step == 0 else update_tol.logprob_abs
        if lp > lp_bound:
            failures.append(
                f"log-probs {label}: differ by {lp:.3g} > {lp_bound:g}{_samples_wrong(results, step, lp_bound)}"
                f"{skipped_note(results, step)}"
            )
        if ent > tol.entropy_abs:
            failures.append(f"entropy {label}: differs by {ent:.3g} > {tol.entropy_abs:g}")
        failures += _ref_failures(results, step, tol)
        failures += missing.get(step, [])
        for entry in (e for e in steps if e["step"] == step):
            row = by_place.get((entry["step"], entry["index"]))
            mini_batch, epoch = (row.mini_batch, row.epoch) if row else (entry["index"], 0)
            where = _where(step, mini_batch, epoch, scenario.ppo_epochs)
            # The first optimizer step's gradient is on the seeded weights, as a one-step cell's; later ones on
            # weights that carry the update's rounding.
            grad_bound = tol.grad_rel if (entry["step"], entry["index"]) == (0, 0) else update_tol.grad_rel
            failures += _step_failures(entry, row, where, update_tol, grad_bound)
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
    """Where some samples' log-probs are wrong and others right: which (judge/diagnosis.py row_diagnosis), in
    parentheses; else nothing."""
    from harness.judge.diagnosis import row_diagnosis

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


def metric_alternative_why(rank0: RankResult, rows: list[MetricRow], update_tol, epochs: int) -> str | None:
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
                where = _where(row.step, row.mini_batch, row.epoch, epochs)
                return f"verl's loss computed with {name}: its {shown} match that at {where}"
        return None
    return None


def _ref_failures(results: list[RankResult], step: int, tol) -> list[str]:
    """verl's ref engine's log-probs of an RL step (loss.use_kl_loss) against the oracle's frozen initial model's:
    on the seeded weights, judged as the first step's log-probs are."""
    entries = [e for r in results for e in r.update.ref_log_probs if e.step == step]
    if not entries:
        return []
    worst = max(_value(e.log_probs.max_abs) for e in entries)
    if worst > tol.logprob_abs:
        where = _where(step)
        return [f"reference log-probs (verl's ref engine) before {where}: differ by {worst:.3g} > {tol.logprob_abs:g}"]
    return []


def _entropy_max_abs(entry) -> float:
    """An RL step's entropy difference; a rank that returned no entropy counts as infinitely far."""
    return entry.entropy.max_abs if entry.entropy is not None else math.inf


def _step_failures(entry: dict, row: MetricRow | None, where: str, update_tol, grad_rel: float | None = None) -> list:
    """One optimizer step's parameters over their bounds (worst first): the gradients before the clip (bound:
    the precision's one-backward gradient tolerance, grad_rel), the updates, the weights; then its metrics."""
    failures = []
    for measure, bound, what in (
        ("grad_rel", grad_rel, "gradient"),
        ("update_rel", update_tol.update_rel, "update"),
        ("param_rel", update_tol.param_rel, "weights"),
    ):
        if bound is None:
            continue
        over = sorted(((v, n) for n, v in entry.get(measure, {}).items() if v > bound), reverse=True)
        before = " before the clip" if what == "gradient" else ""
        failures += [
            f"{what} {name}{before}: relative error {value:.3g} > {bound:g} at {where}" for value, name in over
        ]
    for name, m in (row.metrics if row else {}).items():
        bound = update_tol.metric_rel if m["kind"] == "rel" else update_tol.metric_abs
        if _value(m["error"]) > bound:
            kind = "relative error" if m["kind"] == "rel" else "error"
            failures.append(
                f"{name}: verl {_shown(m['verl'])}, oracle {_shown(m['oracle'])} at {where}"
                f" ({kind} {_shown(m['error'])} > {bound:g})"
            )
    return failures


def _shown(x) -> str:
    return x if isinstance(x, str) else "none" if x is None else f"{x:.4g}"


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


# Where a failure happened ("at step 1, mini-batch 2", "before step 2"): failures of one place are one moment.
_PLACE = re.compile(r" ((?:at|before) step \d+(?:, epoch \d+)?(?:, mini-batch \d+)?)")
# verl's metrics of the forward (the loss and its parts): before the backward, so before the gradient.
_FORWARD_METRICS = ("loss", "pg_loss", "entropy_loss", "pg_clipfrac", "ppo_kl")


def _causal_rank(failure: str) -> int:
    """Where a failure sits in one optimizer step's causal order: the batch, the forward (log-probs, the loss), a
    parameter's gradient before the clip, their norm (grad_norm), the update the clip and optimizer made of it, the
    weights, the schedule. A slip in verl's loss that its metrics fit (metric_alternative_why) names the cause of
    every number after it, so it leads."""
    if failure.startswith("verl's loss computed with"):
        return -1
    if failure.startswith("rank ") or failure.startswith("no rank"):
        return 0
    if failure.startswith(("log-probs", "entropy")):
        return 1
    if failure.startswith(tuple(f"{m}:" for m in _FORWARD_METRICS)):
        return 2
    if failure.startswith("gradient "):
        return 3
    if failure.startswith("grad_norm:"):
        return 4
    if failure.startswith("update "):
        return 5
    if failure.startswith("weights "):
        return 6
    return 7


def _place(failure: str) -> str | None:
    found = _PLACE.search(failure)
    return found.group(1) if found else None


def update_why(failures: list[str], steps: list | None = None, clip_grad: float | None = None) -> str:
    """The earliest wrong number in causal order, and how many more there are. The earliest moment with a failure
    (failures come in the order the update happens, update_parity), and within it the forward, then a parameter's
    gradient before the clip, then their norm (verl's grad_norm), then the clip's effect, then the updates. A wrong
    gradient leads, named first; a wrong grad_norm after it; every update of another parameter after them is named
    as dragged along by the clip (which engaged where the oracle's or verl's norm exceeded clip_grad; steps: the
    record's update steps, with clip_active and, where measured, the gradients' errors), not as a cause of its own."""
    if not failures:
        return ""
    first = _place(failures[0])
    moment = [f for f in failures if _place(f) == first] if first else failures[:1]
    moment.sort(key=_causal_rank)
    lead = moment[0]
    if lead.startswith(("gradient ", "grad_norm:")):
        wrong = [f for f in moment if f.startswith("gradient ")]
        norm = next((f for f in moment if f.startswith("grad_norm:")), None)
        updates = _updates_after(moment, failures)
        why = _gradient_why(wrong, norm, updates, steps, clip_grad)
        shown = len(wrong) + (norm is not None) + len(updates)
    else:
        why, shown = lead, 1
        # verl's grad_norm (a number every user watches) beside the first one, when it is off too.
        metric = next((f for f in failures if f.startswith("grad_norm:") and f != lead), None)
        if metric:
            why, shown = f"{lead}; {metric}", 2
    more = f" (+{len(failures) - shown} more)" if len(failures) > shown else ""
    return why + more


def _updates_after(moment: list[str], failures: list[str]) -> list[str]:
    """The updates a wrong gradient made wrong: those of the same moment, else of the first later moment that has
    any."""
    updates = [f for f in moment if f.startswith("update ")]
    if not updates:
        later = next((_place(f) for f in failures if f.startswith("update ")), None)
        updates = [f for f in failures if f.startswith("update ") and _place(f) == later]
    return updates


def _named(failure: str, kind: str) -> str:
    """The parameter a per-parameter failure names ('update X: ...', 'gradient X before the clip: ...')."""
    return failure.split(":", 1)[0].removeprefix(f"{kind} ").removesuffix(" before the clip")


def _error_of(failure: str) -> str:
    return failure.split("relative error ", 1)[-1].split(" >", 1)[0]


def _gradient_why(
    wrong: list[str], norm: str | None, updates: list[str], steps: list | None, clip_grad: float | None
) -> str:
    """The gradient before the clip as the cause: the parameters whose gradient is wrong (wrong: their failures,
    worst first), then verl's grad_norm (norm: its failure, or None where within its bound) by how much, whether
    the clip engaged, and the updates (of one moment) of the others, dragged along by it."""
    parts = []
    if wrong:
        names = [_named(f, "gradient") for f in wrong]
        shown = ", ".join(f"{n}'s" for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        errors = ", ".join(_error_of(f) for f in wrong[:3])
        noun = "gradient" if len(names) == 1 else "gradients"
        parts.append(f"{shown} {noun} wrong before the clip (rel. {errors} {_place(wrong[0])})")
    if norm:
        parts.append(norm + ("" if wrong else ": the gradient is already wrong before the clip") + _factor(norm))
    elif wrong:
        parts.append("grad_norm within its bound")
    own = {_named(f, "gradient") for f in wrong}
    dragged = [f for f in updates if _named(f, "update") not in own]
    off = [f for f in updates if _named(f, "update") in own]
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


def _factor(norm: str) -> str:
    numbers = re.search(r"verl (\S+), oracle (\S+)", norm)
    try:
        return (
            f" (verl's norm x{float(numbers.group(1)) / float(numbers.group(2)):.3g} the oracle's)" if numbers else ""
        )
    except (ValueError, ZeroDivisionError):
        return ""


def _worst(updates: list[str], lead: str) -> str:
    """The first (worst) update's parameter and error, with its place where it is not the lead's."""
    worst = f"{_named(updates[0], 'update')} {_error_of(updates[0])}"
    return worst + (f" {_place(updates[0])}" if _place(updates[0]) != _place(lead) else "")


def _gradients_measured(steps: list | None, lead: str) -> bool:
    """Whether the record's step at the lead's place holds the gradients' errors before the clip."""
    entry = _step_at(steps, lead)
    grads = None if entry is None else (entry.get("grad_rel") if isinstance(entry, dict) else entry.grad_rel)
    return bool(grads)


def _step_at(steps: list | None, lead: str):
    found = re.search(r"step (\d+)(?:, epoch \d+)?(?:, mini-batch (\d+))?", _place(lead) or "")
    if not (steps and found):
        return None
    step, mini_batch = int(found.group(1)) - 1, int(found.group(2) or 1) - 1
    for entry in steps:
        get = entry.get if isinstance(entry, dict) else lambda k, e=entry: getattr(e, k, None)
        if get("step") == step and get("mini_batch") == mini_batch:
            return entry
    return None


def _clip_engaged(lead: str, steps: list | None, clip_grad: float | None) -> bool | None:
    """Whether the clip engaged at that optimizer step in verl or the oracle: verl's norm or the oracle's above
    clip_grad, or the oracle's clip_active there; None: not known."""
    numbers = re.search(r"verl (\S+), oracle (\S+)", lead)
    if clip_grad and numbers:
        try:
            return max(float(numbers.group(1)), float(numbers.group(2))) > clip_grad
        except ValueError:
            pass
    entry = _step_at(steps, lead)
    if entry is None:
        return None
    active = entry.get("clip_active") if isinstance(entry, dict) else entry.clip_active
    return None if active is None else bool(active)


def _worst_metric(rows: list[MetricRow], name: str) -> float:
    return max((_value(row.metrics[name]["error"]) for row in rows if name in row.metrics), default=0.0)
