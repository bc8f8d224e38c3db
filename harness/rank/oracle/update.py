"""The oracle of the training update: what verl's actor update over `steps` RL steps must do, from the definitions,
in plain torch and transformers, never verl (it runs before verl is imported, as rank/oracle/reference.py does).

It starts from the same seeded model, in fp32, and runs each sample alone, unpadded. Per RL step:
1. the old log-probs on the current weights (what the trainer's compute_log_prob returns), plus each sample's
   fixed rollout noise (rank/oracle/batch.py: the rollout policy is slightly off, so the PPO clip is exercised);
2. ppo_epochs x ppo_mini_batches optimizer steps. Mini-batch k holds, on every data-parallel group (a rank, or
   under Ulysses SP the sp ranks that share their group's data), that group's micro-batches k*A .. k*A + A - 1
   (A = grad_accum / ppo_mini_batches): the order verl's iterator takes them in without shuffling, which the
   verdict checks against the samples verl actually handed each micro-batch (judge_cell/micro_batching.py). Under
   dynamic bsz verl re-forms a mini-batch's micro-batches by token count; the loss below does not depend on that
   split (it is normalised over the whole mini-batch, as verl's global_batch_info does), and per sample the step
   keeps what the per-micro-batch metrics need, so the verdict averages them over verl's own split.
   The loss is the scenario's actor objective (rank/oracle/loss.py: the policy term of its loss_mode, the entropy
   bonus where the trainer asks for entropy, the KL term against the frozen initial model), each term aggregated
   by loss_agg_mode over the mini-batch of every rank; torch.nn.utils.clip_grad_norm_ clips it by the global norm;
   torch's own optimizer of the scenario's name takes the step;
3. the learning-rate schedule steps once, after the step's last mini-batch (verl's update_lr_scheduler).
Beside the weights after every optimizer step it keeps the numbers verl's trainer logs for each mini-batch,
each from its definition: grad_norm (before the clip), pg_loss, entropy_loss, kl_loss, loss, pg_clipfrac,
pg_clipfrac_lower, ppo_kl, lr.
After the last step, the log-probs on the final weights (the next step's old log-probs).
"""

from __future__ import annotations

import copy
import math
import sys
from dataclasses import dataclass, field

from harness.rank.oracle.reference import sample_forward


@dataclass
class UpdateReference:
    # per RL step s (0 .. steps; the last is after the final update): (dp_rank, micro) -> (B, R) log-probs and
    # entropy on the weights the step starts from, zeros past each response's end
    log_probs: list = field(default_factory=list)
    entropy: list = field(default_factory=list)
    # per optimizer step, in order: {"step", "epoch", "mini_batch", "params": {name: weights after},
    # "delta": {name: weights after - weights before}, "grad": {name: gradient before the clip}, "metrics": {...},
    # "clip_active": bool}
    optimizer_steps: list = field(default_factory=list)


def mini_batch_plan(scenario, groups: int) -> list[list[tuple[int, int]]]:
    """Per mini-batch, the (dp_rank, micro) keys it holds: on every rank, the next A of its micro-batches."""
    per = scenario.grad_accum // scenario.ppo_mini_batches
    return [
        [(rank, micro) for rank in range(groups) for micro in range(k * per, (k + 1) * per)]
        for k in range(scenario.ppo_mini_batches)
    ]


def global_index(key: tuple[int, int], i: int, scenario) -> int:
    """Sample i of key (dp_group, micro)'s place in the trainer's global batch: group by group, micro-batch by
    micro-batch (the sample_index column verl carries through its micro-batches)."""
    group, micro = key
    return (group * scenario.grad_accum + micro) * scenario.batch.micro_batch_size + i


def _optimizer(params, o):
    """torch's optimizer of the scenario's name with its values, as verl's build_optimizer passes them (betas to
    Adam-like optimizers only, momentum as an override)."""
    import torch

    kwargs = {"lr": o.lr, "weight_decay": o.weight_decay}
    if "adam" in o.optimizer.lower():
        kwargs["betas"] = o.betas
    if o.momentum:
        kwargs["momentum"] = o.momentum
    return getattr(torch.optim, o.optimizer)(params, **kwargs)


def lr_factor(o, steps: int, step: int) -> float:
    """The multiplier of lr after `step` scheduler steps, from the schedules' definitions: a linear warmup over
    the warmup steps (lr_warmup_steps, else lr_warmup_steps_ratio x total steps), then constant, or a cosine
    from 1 down to min_lr_ratio over the remaining steps (num_cycles half-waves x 2)."""
    warmup = o.lr_warmup_steps if o.lr_warmup_steps > 0 else int(o.lr_warmup_steps_ratio * steps)
    if step < warmup:
        return step / max(1, warmup)
    if o.lr_scheduler_type == "constant":
        return 1.0
    floor = o.min_lr_ratio or 0.0
    progress = (step - warmup) / max(1, steps - warmup)
    wave = math.cos(math.pi * o.num_cycles * 2.0 * progress)
    return max(floor, floor + (1 - floor) * 0.5 * (1 + wave))


def pre_clip_gradients(names: list, params: list) -> dict:
    """Each parameter's gradient of a mini-batch before the clip rescales it (None: none flows): what a rank's
    gradient shards are compared with before verl's clip (rank/verl_side/engine_update.py), so that a wrong gradient
    is told from a right one the clip scaled by a wrong norm."""
    return {n: None if p.grad is None else p.grad.detach().clone() for n, p in zip(names, params)}


def _current_log_probs(model, samples: dict, temperature: float):
    import torch

    log_probs, entropy = {}, {}
    with torch.no_grad():
        for key, batch in sorted(samples.items()):
            width = max(len(s.response_ids) for s in batch)
            lp_rows, ent_rows = torch.zeros(len(batch), width), torch.zeros(len(batch), width)
            for i, s in enumerate(batch):
                lp, ent = sample_forward(model, s, temperature)
                lp_rows[i, : len(lp)], ent_rows[i, : len(ent)] = lp, ent
            log_probs[key], entropy[key] = lp_rows, ent_rows
    return log_probs, entropy


def _mini_batch_step(model, samples: dict, keys: list, old: dict, ref_log_probs: dict, scenario) -> tuple:
    """Forward every sample of the mini-batch alone, the actor objective over all of them (loss.sample_terms, each
    sample weighted as loss_agg_mode aggregates the mini-batch of every rank), backward; the metrics of this
    mini-batch as verl's loss reports them (pg_clipfrac, pg_clipfrac_lower and ppo_kl: the mean over micro-batches
    of each micro-batch's token mean; the losses: the mode's aggregate over the whole mini-batch). ref_log_probs:
    (dp_rank, micro) -> the reference's log-probs per sample (None without the KL loss)."""
    import torch

    from harness.rank.oracle.loss import sample_terms, sample_weights

    loss_cfg = scenario.loss
    lengths = [len(s.response_ids) for key in keys for s in samples[key]]
    # The trainer's global_batch_size is the mini-batch's sequences; the padded response width is the global
    # batch's longest response (the trainer pads the whole batch once).
    horizon = max(len(s.response_ids) for batch in samples.values() for s in batch)
    weights = iter(sample_weights(loss_cfg.loss_agg_mode, lengths, global_batch_size=len(lengths), horizon=horizon))
    parts = {"total": [], "pg": [], "entropy": [], "kl": []}
    alternatives: dict[str, float] = {}  # "<alternative>/<metric>" -> its weighted sum
    counts = {"clipped": [], "clipped_lower": [], "approx_kl": []}
    # global sample index -> [clipped tokens, sum of old - new log-prob, tokens, dual-clipped tokens]: the
    # per-micro-batch metrics over verl's own micro-batches under dynamic bsz (judge_cell/micro_batching.py)
    per_sample = {}
    for key in keys:
        micro = dict.fromkeys(counts, 0.0)
        micro_tokens = 0
        for i, s in enumerate(samples[key]):
            lp, ent = sample_forward(model, s, scenario.temperature)
            ref_lp = ref_log_probs[key][i] if ref_log_probs is not None else None
            terms = sample_terms(lp, ent, old[key][i], ref_lp, s.advantage, loss_cfg)
            w = next(weights)
            for name, value in _term_alternatives(lp, old[key][i], ref_lp, s.advantage, loss_cfg).items():
                alternatives[name] = alternatives.get(name, 0.0) + w * value
            for name in parts:
                if terms[name] is not None:
                    parts[name].append(w * terms[name].sum())
            sums = {name: float(terms[name].sum()) for name in counts}
            for name in counts:
                micro[name] += sums[name]
            per_sample[global_index(key, i, scenario)] = [
                sums["clipped"],
                sums["approx_kl"],
                len(lp),
                sums["clipped_lower"],
            ]
            micro_tokens += len(lp)
        for name in counts:
            counts[name].append(micro[name] / micro_tokens)
    loss = torch.stack(parts["total"]).sum()
    loss.backward()
    metrics = {
        "pg_loss": float(torch.stack(parts["pg"]).sum().detach()),
        "loss": float(loss.detach()),
        "pg_clipfrac": sum(counts["clipped"]) / len(keys),
        "pg_clipfrac_lower": sum(counts["clipped_lower"]) / len(keys),
        "ppo_kl": sum(counts["approx_kl"]) / len(keys),
    }
    if parts["entropy"]:
        metrics["entropy_loss"] = float(torch.stack(parts["entropy"]).sum().detach())
    if parts["kl"]:
        metrics["kl_loss"] = float(torch.stack(parts["kl"]).sum().detach())
    metrics["alternatives"] = _alternative_metrics(alternatives, metrics, loss_cfg)
    return metrics, per_sample


# What a slip in verl's loss would log instead, from the same log-probs: the KL under another estimator, the clip
# with clip-higher's bounds mixed up. Name -> how the update's why says it (judge_cell/update_verdict.py).
def _term_alternatives(lp, old_lp, ref_lp, advantage: float, loss) -> dict:
    """One sample's summed terms under each alternative: "<alternative>/kl" or "<alternative>/pg"."""
    import torch

    from harness.rank.oracle.loss import clip_bounds, kl_estimate, sample_terms

    out = {}
    with torch.no_grad():
        if getattr(loss, "use_kl_loss", False):
            base = loss.kl_loss_type.rstrip("+")
            for kind in ("k1", "abs", "k2", "k3"):
                if kind != _canonical_kl(base):
                    out[f"kl_loss_type {kind}/kl"] = float(kl_estimate(lp, ref_lp, kind).sum())
        low, high = clip_bounds(loss)
        if low != high and loss.loss_mode == "vanilla":
            variants = {
                "clip_ratio_high for both bounds": (high, high),
                "clip_ratio_low for both bounds": (low, low),
                "the clip bounds swapped": (high, low),
            }
            for name, (lo, hi) in variants.items():
                policy_only = loss.model_copy(
                    update={
                        "clip_ratio_low": lo,
                        "clip_ratio_high": hi,
                        "use_kl_loss": False,
                        "entropy_coeff": 0.0,
                        "calculate_entropy": False,
                    }
                )
                out[f"{name}/pg"] = float(sample_terms(lp, None, old_lp, None, advantage, policy_only)["pg"].sum())
    return out


def _canonical_kl(kind: str) -> str:
    return {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}.get(kind, kind)


def _alternative_metrics(sums: dict, metrics: dict, loss) -> dict:
    """alternative -> the metrics verl would log under it: kl_loss and loss for another KL estimator, pg_loss and
    loss for mixed-up clip bounds."""
    out: dict[str, dict[str, float]] = {}
    for key, value in sums.items():
        name, term = key.rsplit("/", 1)
        if term == "kl":
            out[name] = {"kl_loss": value, "loss": metrics["loss"] + loss.kl_loss_coef * (value - metrics["kl_loss"])}
        else:
            out[name] = {"pg_loss": value, "loss": metrics["loss"] + (value - metrics["pg_loss"])}
    return out


def reference_policy_log_probs(initial_log_probs: dict, samples: dict, scenario) -> dict | None:
    """(dp_rank, micro) -> per sample the KL's reference log-probs: the frozen initial model's (the log-probs the
    first RL step starts from, taken before any update) plus each sample's offset (batch.ref_log_prob_offsets);
    None without the KL loss."""
    from harness.rank.oracle.batch import ref_log_prob_offsets

    if not scenario.loss.use_kl_loss:
        return None
    out = {}
    for key, batch in samples.items():
        offsets = ref_log_prob_offsets(scenario.seed, key[0], key[1], batch)
        out[key] = [initial_log_probs[key][i, : len(s.response_ids)] + offsets[i] for i, s in enumerate(batch)]
    return out


def update_reference(model, samples: dict, scenario, groups: int, reuse=None) -> UpdateReference:
    """The oracle's `steps` RL steps over samples ((dp_rank, micro) -> [Sample], every rank's). reuse: what earlier
    updates of the same model and samples under other settings leave for this one (rank/oracle/update_alone.py
    UpdateAlone: a copy of the model to train in place, the log-probs on its initial weights, the first mini-batch's
    gradients, the state after a first RL step that is this one's), each the number this update would compute; None:
    everything computed here."""
    import torch

    assert "verl" not in sys.modules, "the oracle must be computed before verl is imported"
    o = scenario.optim
    model = copy.deepcopy(model).float() if reuse is None else reuse.trained_copy()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    optimizer = _optimizer(params, o)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(o, scenario.steps, step))
    ref = UpdateReference()
    done = reuse.resume(scenario, params, optimizer, scheduler, ref) if reuse is not None else 0  # RL steps
    if not done:
        start = reuse.start(scenario) if reuse is not None else None
        log_probs, entropy = start or _current_log_probs(model, samples, scenario.temperature)
        ref.log_probs.append(log_probs)
        ref.entropy.append(entropy)
    # The reference policy is frozen: the weights before any update.
    ref_log_probs = reference_policy_log_probs(ref.log_probs[0], samples, scenario)
    plan = mini_batch_plan(scenario, groups)
    for step in range(done, scenario.steps):
        old = {
            key: [ref.log_probs[step][key][i, : len(s.response_ids)] + s.old_log_prob_noise for i, s in enumerate(b)]
            for key, b in samples.items()
        }
        for epoch in range(scenario.ppo_epochs):
            for k, keys in enumerate(plan):
                optimizer.zero_grad(set_to_none=True)
                args = (model, samples, keys, old, ref_log_probs, scenario)
                if reuse is not None and (step, epoch, k) == (0, 0, 0):
                    metrics, per_sample = reuse.first_mini_batch(scenario, params, _mini_batch_step, args)
                else:
                    metrics, per_sample = _mini_batch_step(*args)
                record, grad_norm = _optimizer_step(names, params, optimizer, o, metrics, per_sample)
                if epoch == scenario.ppo_epochs - 1 and k == len(plan) - 1:  # the step's last mini-batch
                    scheduler.step()
                    metrics["lr"] = scheduler.get_last_lr()[0]
                metrics["grad_norm"] = grad_norm
                ref.optimizer_steps.append({"step": step, "epoch": epoch, "mini_batch": k, **record})
        # The log-probs on the weights after this RL step: the next step's old log-probs, or after the last, the final.
        log_probs, entropy = _current_log_probs(model, samples, scenario.temperature)
        ref.log_probs.append(log_probs)
        ref.entropy.append(entropy)
        if step == 0 and reuse is not None:
            reuse.first_step_done(scenario, params, optimizer, ref)
    return ref


def _optimizer_step(names: list, params: list, optimizer, o, metrics: dict, per_sample: dict) -> tuple[dict, float]:
    """The gradient of a mini-batch (left in params' grad) clipped by its global norm, the optimizer's step: what the
    step's record keeps of them, and the norm before the clip."""
    import torch

    alternatives = metrics.pop("alternatives")
    grads = pre_clip_gradients(names, params)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, o.clip_grad))
    before = [p.detach().clone() for p in params]
    optimizer.step()
    record = {
        "params": {n: p.detach().clone() for n, p in zip(names, params)},
        "delta": {n: p.detach() - b for n, p, b in zip(names, params, before)},
        "grad": grads,
        "metrics": metrics,
        "metric_alternatives": alternatives,
        # torch's clip scales when the norm exceeds max_norm (its clip_coef < 1)
        "clip_active": grad_norm > o.clip_grad,
        "samples": {str(i): v for i, v in sorted(per_sample.items())},
    }
    return record, grad_norm
