"""Which samples verl handed each micro-batch of the training update, against the oracle's mini-batch plan
(rank/oracle/update.py mini_batch_plan), and the per-micro-batch metrics over the micro-batches verl formed.

Fixed micro-batches (micro_batch_size_per_gpu) are taken in order: verl's must be the plan's, micro-batch by
micro-batch. Under dynamic bsz verl re-forms the micro-batches of each mini-batch by token count
(prepare_micro_batches -> rearrange_micro_batches: how many from the token budget, which samples by balanced
workload, reordered); what it must keep is each mini-batch's samples, so those are compared as sets per mini-batch.
The loss verl sums over them does not depend on that split (agg_loss divides by the global batch's tokens or
sequences, global_batch_info); the metrics verl averages per micro-batch (pg_clipfrac, ppo_kl, pg_clipfrac_lower:
each micro-batch's token mean, then the mean over micro-batches) do, so the oracle's per-sample sums are averaged
over verl's own micro-batches here.

A rank of a Ulysses SP group holds its group's data: rank r's samples are those of data-parallel group r // sp.
"""

from __future__ import annotations

import math

# The metrics verl averages per micro-batch (AggregationType.MEAN in ppo_loss): the oracle's per-sample sums give
# them over any split, sample -> [clipped tokens, sum of old - new log-prob, response tokens, dual-clipped tokens].
# pg_clipfrac_lower is a micro-batch mean as pg_clipfrac is: left to the plan's split, a dual clip that engages under
# dynamic bsz with several micro-batches reads 0.012 off on a correct update (recipe-qwen3-vl-8b-grpo-sensitive).
PER_MICRO_BATCH = {"pg_clipfrac": 0, "ppo_kl": 1, "pg_clipfrac_lower": 3}


def group_of(scenario, rank: int) -> int:
    """The data-parallel group of a rank: every sp consecutive ranks share one (sequence_parallel.py)."""
    return rank // scenario.engine.ulysses_sequence_parallel_size


def planned_samples(scenario, plan: list, group: int) -> list[list[list[int]]]:
    """Per mini-batch of the plan, this group's micro-batches as global sample indices (the trainer's order: group
    by group, micro-batch by micro-batch)."""
    per_key = scenario.batch.micro_batch_size
    return [
        [
            list(range((g * scenario.grad_accum + m) * per_key, (g * scenario.grad_accum + m + 1) * per_key))
            for g, m in keys
            if g == group
        ]
        for keys in plan
    ]


def _by_step(update) -> dict[int, list[list[int]]]:
    """The observed micro-batches grouped by the optimizer step they fed (counted over the whole update)."""
    out: dict[int, list[list[int]]] = {}
    for samples, step in zip(update.micro_batches, update.micro_batch_steps, strict=False):
        out.setdefault(step, []).append(samples)
    return out


def _where(scenario, g: int) -> str:
    per_rl = scenario.ppo_mini_batches * scenario.ppo_epochs
    index = g % per_rl
    at = f"step {g // per_rl + 1}"
    if scenario.ppo_epochs > 1:
        at += f", epoch {index // scenario.ppo_mini_batches + 1}"
    return f"{at}, mini-batch {index % scenario.ppo_mini_batches + 1}"


def micro_batch_order(scenario, results) -> str | None:
    """A failure line where verl's micro-batches did not hold the samples the oracle's plan gives them (fixed
    micro-batches: in order; dynamic bsz: each mini-batch's samples as a set, each once); None where they did."""
    dynamic = scenario.engine.use_dynamic_bsz
    optimizer_steps = scenario.steps * scenario.ppo_epochs * scenario.ppo_mini_batches
    for result in results:
        u, rank = result.update, result.rank
        planned = planned_samples(scenario, u.plan, group_of(scenario, rank))
        if not dynamic:
            expected = [m for mini in planned for m in mini] * (scenario.ppo_epochs * scenario.steps)
            if u.micro_batches != expected:
                return (
                    f"rank {rank}: verl's micro-batches held samples {u.micro_batches}, the oracle's plan {expected}"
                    " (the mini-batch order the oracle assumed is not verl's)"
                )
            continue
        if len(u.micro_batch_steps) != len(u.micro_batches):
            return f"rank {rank}: the record does not say which optimizer step each micro-batch fed (dynamic bsz)"
        observed = _by_step(u)
        for g in range(optimizer_steps):
            got = sorted(i for micro in observed.get(g, []) for i in micro)
            expected = sorted(i for micro in planned[g % scenario.ppo_mini_batches] for i in micro)
            if got != expected:
                return (
                    f"rank {rank}: verl's micro-batches of {_where(scenario, g)} held samples {got}, the oracle's"
                    f" mini-batch {expected} (the mini-batch order the oracle assumed is not verl's)"
                )
    return None


def _speakers(scenario, results) -> list:
    """One rank per data-parallel group (verl gathers metrics over the data-parallel group only)."""
    sp = scenario.engine.ulysses_sequence_parallel_size
    return [r for r in sorted(results, key=lambda r: r.rank) if r.rank % sp == 0]


def per_micro_batch_metrics(scenario, results, oracle_steps: list) -> list[dict[str, float] | None]:
    """Per optimizer step (in order), the oracle's pg_clipfrac, ppo_kl and pg_clipfrac_lower averaged over the
    micro-batches verl formed on every data-parallel group: each micro-batch's token mean, then their mean (verl's
    Metric MEAN over micro-batches after the mean over data-parallel ranks: the same where every rank ran as many,
    which same_micro_num_in_dp makes so). None for a step without the oracle's per-sample sums or verl's
    micro-batches."""
    observed = [_by_step(r.update) for r in _speakers(scenario, results)]
    out = []
    for g, oracle in enumerate(oracle_steps):
        micros = [micro for by_step in observed for micro in by_step.get(g, [])]
        sums = oracle.samples
        if not micros or not sums or any(str(i) not in sums for micro in micros for i in micro):
            out.append(None)
            continue
        values = {}
        for name, column in PER_MICRO_BATCH.items():
            if any(len(sums[str(i)]) <= column for micro in micros for i in micro):
                continue  # a record from before the oracle kept this column: the plan's value stands
            means = []
            for micro in micros:
                tokens = sum(sums[str(i)][2] for i in micro)
                means.append(sum(sums[str(i)][column] for i in micro) / tokens)
            values[name] = sum(means) / len(means)
        out.append(values)
    return out


def micro_batching(scenario, results) -> dict | None:
    """What the record keeps under dynamic bsz: per optimizer step and rank, how many micro-batches verl ran, their
    tokens, and the fewest that rank's own tokens need (ceil(tokens / max_token_len), at most one per sample:
    where that differs between ranks, same_micro_num_in_dp raised the others to the largest)."""
    if not scenario.engine.use_dynamic_bsz:
        return None
    limit = scenario.engine.max_token_len_per_gpu * scenario.engine.ulysses_sequence_parallel_size
    steps: dict[int, dict] = {}
    for result in sorted(results, key=lambda r: r.rank):
        u = result.update
        tokens = u.micro_batch_tokens or [None] * len(u.micro_batches)
        for samples, n, g in zip(u.micro_batches, tokens, u.micro_batch_steps, strict=False):
            entry = steps.setdefault(g, {}).setdefault(str(result.rank), {"micro_batches": 0, "tokens": [], "n": 0})
            entry["micro_batches"] += 1
            entry["tokens"].append(n)
            entry["n"] += len(samples)
    for ranks in steps.values():
        for entry in ranks.values():
            total = sum(t for t in entry["tokens"] if t is not None)
            entry["own_need"] = min(entry.pop("n"), math.ceil(total / limit)) if total else None
    differ = any(len({v["own_need"] for v in ranks.values()}) > 1 for ranks in steps.values())
    return {
        "max_token_len": limit,
        "steps": [{"step": g, "ranks": ranks} for g, ranks in sorted(steps.items())],
        "own_need_differs_between_ranks": differ,
    }
