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
from dataclasses import dataclass, field

from harness.driver.shard_stats import even_share_relative
from harness.spec.results import RankResult

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
        steps.append({"step": step, "index": index, "update_rel": update, "param_rel": weights})
    return steps, missing, extra


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


def _metric_rows(rank0: RankResult, per_rl_step: int) -> list[MetricRow]:
    """Per optimizer step: verl's value of each metric for that mini-batch beside the oracle's (lr: verl reports it
    on the RL step's last mini-batch only, after its scheduler step)."""
    metrics = rank0.update.metrics
    rows = []
    for k, o in enumerate(rank0.update.oracle):
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
            row.metrics[name] = {
                "verl": value,
                "oracle": o.metrics[name],
                "error": _number(_metric_error(kind, value, o.metrics[name])),
                "kind": kind,
            }
        rows.append(row)
    return rows


def _number(x: float):
    return "inf" if isinstance(x, float) and math.isinf(x) else x


def _value(x) -> float:
    return math.inf if x == "inf" else x


def update_parity(scenario, results: list[RankResult], tol, update_tol) -> tuple[dict, list[str]]:
    """The update's numbers (record field `update`) and the failures they imply, in the order they happen: the
    micro-batch order, then per RL step its log-probs, the optimizer steps a rank missed, and per optimizer step
    the updates, the weights and the metrics; last, the log-probs after the last step."""
    per_rl_step = scenario.ppo_mini_batches * scenario.ppo_epochs
    steps, missing, extra = _merged_steps(results, per_rl_step)
    rank0 = next(r for r in results if r.rank == 0)
    rows = _metric_rows(rank0, per_rl_step)
    by_place = {(row.step, row.index): row for row in rows}
    order = micro_batch_order(scenario, results)
    failures: list[str] = [order] if order else []
    log_probs = []
    for step in range(scenario.steps + 1):
        lp = max(_value(r.update.log_probs[step].log_probs.max_abs) for r in results)
        ent = max(_value(_entropy_max_abs(r.update.log_probs[step])) for r in results)
        log_probs.append({"step": step, "logprob_max_abs": _number(lp), "entropy_max_abs": _number(ent)})
        label = f"before {_where(step)}" if step < scenario.steps else f"after the last step ({_where(step - 1)})"
        # The first step's log-probs are on the seeded weights, as a one-step cell's; later ones on updated weights.
        lp_bound = tol.logprob_abs if step == 0 else update_tol.logprob_abs
        if lp > lp_bound:
            failures.append(f"log-probs {label}: differ by {lp:.3g} > {lp_bound:g}")
        if ent > tol.entropy_abs:
            failures.append(f"entropy {label}: differs by {ent:.3g} > {tol.entropy_abs:g}")
        failures += _ref_failures(results, step, tol)
        failures += missing.get(step, [])
        for entry in (e for e in steps if e["step"] == step):
            row = by_place.get((entry["step"], entry["index"]))
            mini_batch, epoch = (row.mini_batch, row.epoch) if row else (entry["index"], 0)
            failures += _step_failures(entry, row, _where(step, mini_batch, epoch, scenario.ppo_epochs), update_tol)
    failures += extra
    slip = metric_alternative_why(rank0, rows, update_tol, scenario.ppo_epochs)
    if slip and failures:
        failures.insert(0, slip)
    summary = _summary(steps, rows, log_probs)
    ref_entries = [_value(e.log_probs.max_abs) for r in results for e in r.update.ref_log_probs]
    if ref_entries:
        summary["ref_logprob_max_abs"] = _number(max(ref_entries))
    return {"log_probs": log_probs, "steps": _shown_steps(steps, by_place), **summary}, failures


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


def _step_failures(entry: dict, row: MetricRow | None, where: str, update_tol) -> list[str]:
    """One optimizer step's parameters over their bounds (worst first), then its metrics."""
    failures = []
    for measure, bound, what in (
        ("update_rel", update_tol.update_rel, "update"),
        ("param_rel", update_tol.param_rel, "weights"),
    ):
        if bound is None:
            continue
        over = sorted(((v, n) for n, v in entry[measure].items() if v > bound), reverse=True)
        failures += [f"{what} {name}: relative error {value:.3g} > {bound:g} at {where}" for value, name in over]
    for name, m in (row.metrics if row else {}).items():
        bound = update_tol.metric_rel if m["kind"] == "rel" else update_tol.metric_abs
        if _value(m["error"]) > bound:
            kind = "relative error" if m["kind"] == "rel" else "error"
            failures.append(
                f"{name}: verl {_shown(m['verl'])}, oracle {_shown(m['oracle'])} at {where}"
                f" ({kind} {_shown(m['error'])} > {bound:g})"
            )
    return failures


def micro_batch_order(scenario, results: list[RankResult]) -> str | None:
    """The samples verl put in each micro-batch against the oracle's mini-batch plan; a failure line if they
    differ anywhere (the oracle would have judged another update)."""
    per_key = scenario.batch.micro_batch_size
    for result in results:
        u = result.update
        rank = result.rank
        plan = u.plan
        mine = [[(r, m) for r, m in keys if r == rank] for keys in plan]
        # Global batch position of key (r, m): the trainer's order, group by group, micro-batch by micro-batch.
        expected_once = [
            list(range((r * scenario.grad_accum + m) * per_key, (r * scenario.grad_accum + m + 1) * per_key))
            for keys in mine
            for r, m in keys
        ]
        expected = expected_once * (scenario.ppo_epochs * scenario.steps)
        if u.micro_batches != expected:
            return (
                f"rank {rank}: verl's micro-batches held samples {u.micro_batches}, the oracle's plan {expected}"
                " (the mini-batch order the oracle assumed is not verl's)"
            )
    return None


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
                "param_worst_rel": _number(max(entry["param_rel"].values(), default=0.0)),
                "metrics": row.metrics if row else {},
            }
        )
    return out


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


def update_why(failures: list[str]) -> str:
    """The first number that left its tolerance, in the order the update happens (update_parity's order), and how
    many more did."""
    if not failures:
        return ""
    shown = [failures[0]]
    # verl's grad_norm (a number every user watches) beside the parameter that made it wrong, when it is off too.
    metric = next((f for f in failures[1:] if f.startswith(tuple(f"{m}:" for m, _ in METRICS.values()))), None)
    if metric:
        shown.append(metric)
    more = f" (+{len(failures) - len(shown)} more)" if len(failures) > len(shown) else ""
    return "; ".join(shown) + more


def _worst_metric(rows: list[MetricRow], name: str) -> float:
    return max((_value(row.metrics[name]["error"]) for row in rows if name in row.metrics), default=0.0)
