"""The reference a run is judged against, computed without any of verl's code.

It must run before verl is imported: verl's apply_monkey_patch replaces forwards on the *class*, so afterwards
every instance, deep copies included, would run the code under test. The reference sees all ranks' micro-batches
and averages their gradients, which is what FSDP's reduce-scatter (ReduceOp.AVG) should produce.

Beside the reference it keeps, cheaply and in the same pass, what real defects would produce instead, so that a failing
run can be told *why* from numbers (judge_cell/diagnosis.py): per rank r the gradient of rank r's share of the global
loss (the reference gradient is their sum; W times one of them is what a rank holds when its gradient is never reduced
across ranks), the entropy bonus's part of the gradient (a bonus with the wrong sign moves the gradient by twice it),
and log-probs at other temperatures and against labels shifted by one. None of this changes the reference itself: it is
taken from the same graphs (torch.autograd.grad, which does not accumulate) or from clones, bit for bit the same numbers
either way (tests/unit/rank/oracle/test_reference_alternatives.py).
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field

from harness.rank.oracle.loss import logprobs_and_entropy_from_logits, micro_batch_loss, next_token_labels


class ReferenceGrads(dict):
    """parameter name -> reference gradient (None: gets none), carrying what compare_gradients also compares
    a shard with (rank/measures/parity.py): each an alternative a real defect produces.

    with_alternatives: whether compare_gradients compares each shard with the alternatives below and with the
    reference scaled (the oracle's, when it computed them); not the FSDP reference's (rank/oracle/unfused_fsdp.py).
    per_rank: rank -> {name: gradient of that rank's share of the global loss}; summed over ranks, the reference.
    entropy_part: {name: the entropy bonus's contribution to the reference gradient}.
    kl_part: {name: the KL loss's contribution}; agg_modes: {loss_agg_mode: {name: the whole loss's gradient
    aggregated that way}}, for the scenario's other modes (engine path, a mode other than token-mean).
    rank_token_scale: rank -> factor turning its share into its own token-mean's (engine path only; absent
    where every rank has the same token count, as the alternative is then the reference itself)."""

    with_alternatives: bool
    per_rank: dict
    entropy_part: dict
    rank_token_scale: dict

    def __init__(self, *args, with_alternatives: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.with_alternatives = with_alternatives
        self.per_rank, self.entropy_part, self.rank_token_scale = {}, {}, {}
        # the KL loss's part of the reference gradient (loss.use_kl_loss), and the whole loss's gradient under each
        # other loss_agg_mode (where the scenario's is not token-mean): {mode: {name: gradient}}
        self.kl_part, self.agg_modes = {}, {}


@dataclass
class Reference:
    log_probs: dict = field(default_factory=dict)  # (dp_rank, micro) -> (B, L)
    entropy: dict = field(default_factory=dict)  # (dp_rank, micro) -> (B, L)
    grads: ReferenceGrads = field(default_factory=ReferenceGrads)  # parameter name -> averaged gradient (None: none)
    # (dp_rank, micro) -> {alternative name: log-probs shaped like log_probs[key]}: what a defect would produce.
    log_prob_alternatives: dict = field(default_factory=dict)
    # (dp_rank, micro) -> [(r,) per sample]: the rollout policy's log-probs the engine path's batch carries.
    old_log_probs: dict = field(default_factory=dict)
    # (dp_rank, micro) -> (B, R): the frozen initial model's log-probs (loss.use_kl_loss), what verl's ref engine
    # must return; the KL's reference adds each sample's offset to them (batch.ref_log_prob_offsets).
    ref_log_probs: dict = field(default_factory=dict)


def _grads_of(model) -> dict:
    return {name: (None if p.grad is None else p.grad.detach().clone()) for name, p in model.named_parameters()}


def _autograd(loss, model) -> dict:
    """d loss / d every parameter, without touching .grad (retain_graph: the reference's backward follows)."""
    import torch

    names, params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad])
    grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    return {n: (None if g is None else g.detach()) for n, g in zip(names, grads)}


def _add(total: dict, part: dict):
    for name, g in part.items():
        if g is not None:
            total[name] = g.clone() if total.get(name) is None else total[name] + g


def log_prob_alternatives(logits, labels, previous_labels, temperature: float) -> dict:
    """Log-probs that real defects produce, from the oracle's own logits: the temperature applied twice or
    not at all, and labels shifted the wrong way (each position scored against the token before it)."""
    from harness.rank.oracle.loss import logprobs_and_entropy_from_logits

    out = {
        "labels shifted: each position scored against the previous token": logprobs_and_entropy_from_logits(
            logits, previous_labels, temperature
        )[0].detach()
    }
    if temperature != 1.0:
        out[f"the temperature applied twice (logits / {temperature:g}^2)"] = logprobs_and_entropy_from_logits(
            logits, labels, temperature * temperature
        )[0].detach()
        out["the temperature not applied"] = logprobs_and_entropy_from_logits(logits, labels, 1.0)[0].detach()
    return out


def reference_forward(model, batch, temperature: float, alternatives: dict | None = None):
    """Log-probs and entropy; with `alternatives` (a dict), also fills it with log_prob_alternatives."""
    import torch

    logits = model(**batch.model_inputs(), use_cache=False).logits
    labels = next_token_labels(batch.input_ids)
    if alternatives is not None:
        with torch.no_grad():
            alternatives.update(
                log_prob_alternatives(
                    logits.detach(), labels, torch.roll(batch.input_ids, shifts=1, dims=-1), temperature
                )
            )
    return logprobs_and_entropy_from_logits(logits, labels, temperature)


def compute_reference(model, batches: dict, scenario, alternatives: bool = True) -> Reference:
    """batches: (dp_rank, micro) -> MicroBatch for every rank of the run. alternatives: also keep what real
    defects would produce (the reference's own numbers are the same either way)."""
    from harness.rank.oracle.loss import masked_mean, response_slice

    assert "verl" not in sys.modules, "the oracle must be computed before verl is imported"
    reference_model = copy.deepcopy(model).float()
    reference_model.train()
    ref = Reference(grads=ReferenceGrads(with_alternatives=alternatives))
    world = 1 + max(r for r, _ in batches)
    micro_steps = 1 + max(m for _, m in batches)
    before = {}  # the accumulated gradient before the current rank's micro-batches
    for key, batch in sorted(batches.items()):
        alt = {} if alternatives else None
        log_probs, entropy = reference_forward(reference_model, batch, scenario.temperature, alt)
        ref.log_probs[key] = log_probs.detach()
        ref.entropy[key] = entropy.detach()
        if alternatives:
            ref.log_prob_alternatives[key] = alt
        if scenario.forward_only:
            continue
        if alternatives and key[1] == 0 and key[0] > 0:
            before = _grads_of(reference_model)
        loss = micro_batch_loss(log_probs, entropy, batch, log_probs, scenario)
        if alternatives:
            # The entropy bonus's part of this micro-batch's loss, scaled as the loss is below.
            bonus = -scenario.loss.entropy_coeff * masked_mean(
                response_slice(entropy, scenario.batch.response_len).float(), batch.response_mask
            )
            if scenario.loss.entropy_coeff:
                _add(ref.grads.entropy_part, _autograd(bonus / (micro_steps * world), reference_model))
        # Each rank's micro-step loss is scaled by 1/micro_steps (gradient accumulation); FSDP averages ranks.
        (loss / (micro_steps * world)).backward()
        if alternatives and key[1] == micro_steps - 1:
            after = _grads_of(reference_model)
            ref.grads.per_rank[key[0]] = {
                n: (None if g is None else (g if before.get(n) is None else g - before[n])) for n, g in after.items()
            }
    if not scenario.forward_only:
        ref.grads.update(_grads_of(reference_model))
    return ref


def sample_logits(model, s):
    """(input ids, the logits at the positions that predict the response) of one sample run alone, unpadded,
    with its own M-RoPE position ids (the text row dropped: transformers builds it)."""
    import torch

    p, r = len(s.prompt_ids), len(s.response_ids)
    ids = torch.cat([s.prompt_ids, s.response_ids])[None]
    if s.position_ids.shape[0] == 1:  # a text-only model (dense_common.py's families): its one row
        inputs = {"position_ids": s.position_ids}
    else:
        inputs = {
            "position_ids": s.position_ids[1:, None],
            "pixel_values": s.pixel_values,
            "image_grid_thw": s.image_grid_thw,
        }
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False, **inputs).logits
    return ids, logits[0, p - 1 : p + r - 1]


def sample_forward(model, s, temperature: float):
    """One sample's response log-probs and entropy, from its logits in plain torch."""
    return logprobs_and_entropy_from_logits(sample_logits(model, s)[1], s.response_ids, temperature)


def sample_reference(model, samples: dict, scenario, alternatives: bool = True) -> Reference:
    """The oracle of the engine path. samples: (dp_rank, micro) -> [Sample] for every rank.

    Each sample runs alone, unpadded, through the plain fp32 model (never packed: packing is the code under
    test). Its rollout log-probs are set here: the oracle's own, slightly off, so the clip is exercised. The
    loss is the scenario's actor objective (oracle/loss.py sample_terms: the policy term, the entropy bonus where
    the trainer asks for entropy, the KL term against the frozen initial model's log-probs plus each sample's
    offset) over the whole global batch, each sample weighted as loss_agg_mode aggregates it over every rank
    (loss.sample_weights); its gradient is what one optimizer step of verl's actor must see. Log-probs and entropy
    are kept per (rank, micro) as (B, R) with zeros past each response's end. alternatives: also keep what real
    defects would produce (_SampleDefects), from the same graphs."""
    import torch

    assert "verl" not in sys.modules, "the oracle must be computed before verl is imported"
    reference_model = copy.deepcopy(model).float()
    reference_model.train()
    ref = Reference(grads=ReferenceGrads(with_alternatives=alternatives))
    weights = batch_weights(samples, scenario)
    defects = _SampleDefects(samples, scenario) if alternatives else None
    losses = []
    for key, batch in sorted(samples.items()):
        losses += _micro_batch_oracle(reference_model, key, batch, scenario, ref, defects, weights[key])
    if not scenario.forward_only:
        if defects is not None:
            defects.gradients(ref.grads, reference_model)
        torch.stack(losses).sum().backward()
        ref.grads.update(_grads_of(reference_model))
    return ref


# The seq-mean-token-sum-norm alternative that divides each micro-batch by its own padded response width.
MICRO_BATCH_WIDTH = "seq-mean-token-sum-norm/micro-batch width"


def batch_weights(samples: dict, scenario) -> dict:
    """(dp_rank, micro) -> each of its samples' weight in the loss (loss.sample_weights over the whole batch of
    every rank: the trainer's global_batch_size is every sample of it; the padded response width, the longest
    response, is seq-mean-token-sum-norm's divisor)."""
    from harness.rank.oracle.loss import sample_weights

    keys = sorted(samples)
    lengths = [len(s.response_ids) for key in keys for s in samples[key]]
    flat = sample_weights(
        scenario.loss.loss_agg_mode, lengths, global_batch_size=len(lengths), horizon=max(lengths, default=1)
    )
    out, i = {}, 0
    for key in keys:
        out[key] = flat[i : i + len(samples[key])]
        i += len(samples[key])
    return out


def _micro_batch_oracle(reference_model, key, batch, scenario, ref: Reference, defects, weights: list) -> list:
    """One (rank, micro) batch of the engine path's oracle, sample by sample: its log-probs, entropy, rollout and
    reference log-probs into ref, and each sample's weighted loss returned."""
    import torch

    from harness.rank.oracle.batch import ref_log_prob_offsets
    from harness.rank.oracle.loss import sample_terms

    loss_cfg = scenario.loss
    width = max(len(s.response_ids) for s in batch)
    log_probs, entropy = torch.zeros(len(batch), width), torch.zeros(len(batch), width)
    offsets = ref_log_prob_offsets(scenario.seed, key[0], key[1], batch) if loss_cfg.use_kl_loss else None
    losses, alternatives = [], {}
    for i, s in enumerate(batch):
        r = len(s.response_ids)
        ids, response_logits = sample_logits(reference_model, s)
        lp, ent = logprobs_and_entropy_from_logits(response_logits, s.response_ids, scenario.temperature)
        if defects is not None:
            defects.log_probs(alternatives, i, (len(batch), width), ids, response_logits, s, scenario.temperature)
        old_log_probs = lp.detach() + s.old_log_prob_noise
        ref.old_log_probs.setdefault(key, []).append(old_log_probs)
        log_probs[i, :r], entropy[i, :r] = lp.detach(), ent.detach()
        if not scenario.forward_only:
            # One backward, no update: the model is still the initial one, the reference policy's own weights.
            ref_lp = lp.detach() + offsets[i] if offsets is not None else None
            terms = sample_terms(lp, ent, old_log_probs, ref_lp, s.advantage, loss_cfg)
            losses.append(weights[i] * terms["total"].sum())
            if defects is not None:
                bonus = None if terms["entropy"] is None else -loss_cfg.entropy_coeff * terms["entropy"]
                defects.loss(key, weights[i] * terms["total"], None if bonus is None else weights[i] * bonus.sum())
                kl = None if terms["kl"] is None else weights[i] * loss_cfg.kl_loss_coef * terms["kl"].sum()
                defects.terms(terms["total"].sum(), r, kl)
    ref.log_probs[key], ref.entropy[key] = log_probs, entropy
    if loss_cfg.use_kl_loss:
        ref.ref_log_probs[key] = log_probs.clone()
    if defects is not None:
        ref.log_prob_alternatives[key] = alternatives
    return losses


class _SampleDefects:
    """What real defects would give on the engine path, kept beside the oracle from its own graphs: each rank's
    share of the loss (under Ulysses SP, the tokens of its shard), the entropy bonus's part, the rank's own
    token-mean's scale, and the log-probs at another temperature or against labels rolled the wrong way."""

    def __init__(self, samples: dict, scenario):
        self.entropy_coeff = scenario.loss.entropy_coeff
        # A rank's own token-mean is an alternative of the token-mean loss only.
        self.token_mean = scenario.loss.loss_agg_mode == "token-mean"
        self.sp = scenario.engine.ulysses_sequence_parallel_size
        self.owners, self.seen = None, {}
        self.rank_losses, self.bonuses = {}, []
        # per sample, in the oracle's order: its summed loss (unweighted) and response length; the KL parts
        self.sample_totals, self.lengths, self.kl_parts = [], [], []
        self.keys = []  # per sample, in the same order: its (rank, micro)
        self.agg_mode = scenario.loss.loss_agg_mode
        self.rank_tokens = {}  # data-parallel rank -> its response tokens, over all its micro-batches
        for (rank, _), batch in sorted(samples.items()):
            self.rank_tokens[rank] = self.rank_tokens.get(rank, 0) + sum(len(s.response_ids) for s in batch)
        if self.sp > 1:
            from harness.rank.oracle.sequence_parallel import token_ranks

            # Under SP a rank computes only the tokens of its shard: its share of the loss is theirs.
            self.owners = token_ranks(samples, scenario.batch.micro_batch_size, self.sp)

    def log_probs(self, alt: dict, i: int, shape: tuple, ids, response_logits, s, temperature: float):
        """Sample i's log-probs under each alternative, into alt (name -> a (B, R) tensor of its micro-batch)."""
        import torch

        p, r = len(s.prompt_ids), len(s.response_ids)
        with torch.no_grad():
            # Rolled the wrong way, position t's label is the token at t - 1.
            previous = ids[0, p - 2 : p + r - 2]
            found = log_prob_alternatives(response_logits.detach(), s.response_ids, previous, temperature)
            for name, value in found.items():
                alt.setdefault(name, torch.zeros(*shape))[i, :r] = value

    def loss(self, key, weighted_tokens, weighted_bonus):
        """One sample's per-token losses, each times the sample's weight, and its weighted entropy bonus (None
        where the loss has none)."""
        import torch

        self.keys.append(key)
        if self.owners is None:
            self.rank_losses.setdefault(key[0], []).append(weighted_tokens.sum())
        else:
            first = self.seen.get(key[0], 0)
            ranks = torch.tensor(self.owners[key[0]][first : first + len(weighted_tokens)])
            self.seen[key[0]] = first + len(weighted_tokens)
            for rank in ranks.unique().tolist():
                self.rank_losses.setdefault(rank, []).append(weighted_tokens[ranks == rank].sum())
        if weighted_bonus is not None:
            self.bonuses.append(weighted_bonus)

    def terms(self, total, length: int, weighted_kl):
        """One sample's summed loss and length (for the other aggregations), and its weighted KL part (or None)."""
        self.sample_totals.append(total)
        self.lengths.append(length)
        if weighted_kl is not None:
            self.kl_parts.append(weighted_kl)

    def _micro_batch_width_total(self):
        """seq-mean-token-sum-norm divided by each micro-batch's own longest response, not the global batch's: what
        verl's agg_loss (horizon = loss_mask.shape[-1]) does where response_mask is padded per micro-batch, as the
        v1 trainer's nested batch is (ppo_loss's to_padded_tensor)."""
        import torch

        widths = {}
        for key, n in zip(self.keys, self.lengths, strict=True):
            widths[key] = max(widths.get(key, 0), n)
        n = len(self.lengths)
        return torch.stack([t / (n * widths[k]) for k, t in zip(self.keys, self.sample_totals, strict=True)]).sum()

    def gradients(self, grads: ReferenceGrads, reference_model):
        """Each rank's share's gradient, the entropy bonus's, the KL loss's, the other aggregations' and the
        token-mean scales, into grads."""
        import torch

        from harness.rank.oracle.loss import AGG_MODES, sample_weights

        if self.kl_parts:
            grads.kl_part = _autograd(torch.stack(self.kl_parts).sum(), reference_model)
        if self.agg_mode != "token-mean" and self.sample_totals:
            # A slip in one aggregation gives another's weights (e.g. a sequence's mean over the padded width):
            # the whole loss under each other mode, from the same graph.
            for mode in AGG_MODES:
                if mode == self.agg_mode:
                    continue
                w = sample_weights(mode, self.lengths, global_batch_size=len(self.lengths), horizon=max(self.lengths))
                total = torch.stack([wi * t for wi, t in zip(w, self.sample_totals, strict=True)]).sum()
                grads.agg_modes[mode] = _autograd(total, reference_model)
        if self.agg_mode == "seq-mean-token-sum-norm" and self.sample_totals:
            grads.agg_modes[MICRO_BATCH_WIDTH] = _autograd(self._micro_batch_width_total(), reference_model)

        for rank, parts in sorted(self.rank_losses.items()):
            grads.per_rank[rank] = _autograd(torch.stack(parts).sum(), reference_model)
        if self.owners is not None and grads.per_rank:
            # A rank whose shard holds no response token has no share of the loss: a zero gradient.
            some = next(iter(grads.per_rank.values()))
            for rank in range(len(self.owners) * self.sp):
                grads.per_rank.setdefault(
                    rank, {n: None if g is None else torch.zeros_like(g) for n, g in some.items()}
                )
        if self.entropy_coeff and self.bonuses:
            grads.entropy_part = _autograd(torch.stack(self.bonuses).sum(), reference_model)
        world = len(self.rank_tokens)
        total_tokens = sum(self.rank_tokens.values())
        if self.token_mean and len(set(self.rank_tokens.values())) > 1 and self.owners is None:
            # Each rank's own token-mean, averaged over ranks: rank r's share times T / (W T_r).
            grads.rank_token_scale = {r: total_tokens / (world * t) for r, t in self.rank_tokens.items()}
