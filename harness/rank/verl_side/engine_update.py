"""verl's whole actor update on the engine path, as its trainer runs it for `steps` RL steps (scenario.steps > 0),
compared with the oracle's update (rank/oracle/update.py) after every optimizer step.

Per RL step: the old log-probs by verl on the current weights (FSDPEngine.infer_batch, as compute_log_prob runs
it), gathered into the global batch as the trainer holds it, each sample's rollout noise added (the oracle adds
the same), converted and cut as the trainer and dispatch do, then verl's TrainingWorker.train_mini_batch with the
keys ray_trainer._update_actor assigns (mini_batch_size, epochs, seed, dataloader_kwargs). verl does the rest:
its iterator, train_batch per mini-batch (forward_backward_batch, optimizer_step: fsdp2_clip_grad_norm_, the
non-finite skip, optimizer.step), lr_scheduler_step on the last mini-batch, its metrics.

What is observed, never changed: before verl's clip, every parameter's gradient shard against the matching slice of
the oracle's gradient before its clip (OptimizerWatch.watch_gradients); torch's optimizer step hooks on verl's
optimizer compare every parameter's local shard after each step with the matching slice of the oracle's weights and
of its update (weights after - before);
the loss function verl calls is verl's ppo_loss, wrapped to note which samples each micro-batch held (the
`sample_index` column the harness adds to the batch), so that the oracle's mini-batch order is checked, not
assumed.
"""

from __future__ import annotations

import torch

from harness.rank.measures.around_step import unmeasured
from harness.rank.measures.parity import compare_gradients, compare_outputs, local_view
from harness.rank.measures.rows import response_roles, skipped_rows
from harness.rank.oracle.reference import ReferenceGrads


class OptimizerWatch:
    """Torch's step hooks on verl's optimizer: per optimizer step, every parameter's local shard against the
    oracle's weights after that step and its update, as sums of squares the record stage adds over ranks.

    The oracle's slices for an RL step's optimizer steps are cut before the step starts (start_rl_step), so the
    hooks, which run inside the profiled update, do only arithmetic on local tensors."""

    def __init__(self, module, optimizer, reference_steps: list, steps_per_rl_step: int):
        self.params = list(module.named_parameters())
        self.chunks = {name: local_view(p)[1] for name, p in self.params}
        self.reference_steps = reference_steps
        self.per_rl_step = steps_per_rl_step
        self.rl_step = 0
        self.index = 0  # optimizer steps taken so far in this RL step
        self.expected: list = []  # per optimizer step of this RL step: name -> (weights after, update), this shard
        self.before: dict = {}
        self.compared: list = []
        self.gradients: dict | None = None  # this optimizer step's gradient shards before the clip (watch_gradients)
        optimizer.register_step_pre_hook(self._pre)
        optimizer.register_step_post_hook(self._post)

    def start_rl_step(self, rl_step: int):
        self.rl_step, self.index = rl_step, 0
        first = rl_step * self.per_rl_step
        self.expected = [
            {
                name: (chunk(ref["params"][name]).float().cpu(), chunk(ref["delta"][name]).float().cpu())
                for name, chunk in self.chunks.items()
            }
            for ref in self.reference_steps[first : first + self.per_rl_step]
        ]

    def release(self):
        """Drop the copies the watch holds (the weights before the last step, the oracle's slices): at one rank a
        shard is the whole lm_head weight, and a copy the harness keeps must not read as one the step left alive."""
        self.before, self.expected = {}, []

    def watch_gradients(self, engine):
        """Compare every parameter's gradient shard with the oracle's before verl's clip rescales it: the engine's
        own optimizer_step (clip, non-finite skip, optimizer.step) runs unchanged, the comparison just before it, on
        this engine object only. Sums as a one-backward cell's (rank/measures/parity.py compare_gradients), kept
        with the optimizer step they precede (_compare)."""
        step = engine.optimizer_step

        def optimizer_step(*args, **kwargs):
            with unmeasured():
                self._compare_gradients()
            return step(*args, **kwargs)

        engine.optimizer_step = optimizer_step

    def _compare_gradients(self):
        first = self.rl_step * self.per_rl_step
        if self.index >= self.per_rl_step or first + self.index >= len(self.reference_steps):
            self.gradients = None  # beyond the update's steps: nothing to compare with
            return
        grads = self.reference_steps[first + self.index].get("grad")
        self.gradients = compare_gradients(self.params, ReferenceGrads(grads)) if grads is not None else None

    def _pre(self, optimizer, args, kwargs):
        with unmeasured():
            self.before = {name: local_view(p)[0].detach().float().cpu().clone() for name, p in self.params}

    def _post(self, optimizer, args, kwargs):
        with unmeasured():
            self._compare()

    def _compare(self):
        entry = {"step": self.rl_step, "index": self.index, "params": {}}
        if self.gradients is not None:
            entry["grads"], self.gradients = self.gradients, None
        self.index += 1
        if self.index > len(self.expected):
            entry["extra"] = True  # more optimizer steps than the update has: nothing to compare with
            self.compared.append(entry)
            return
        expected = self.expected[self.index - 1]
        for name, p in self.params:
            after = local_view(p)[0].detach().float().cpu()
            expected_after, expected_delta = expected[name]
            delta = after - self.before[name]
            finite = bool(torch.isfinite(after).all())
            entry["params"][name] = {
                "theta_diff_sq": float((after - expected_after).pow(2).sum()) if finite else float("inf"),
                "theta_ref_sq": float(expected_after.pow(2).sum()),
                "delta_diff_sq": float((delta - expected_delta).pow(2).sum()) if finite else float("inf"),
                "delta_ref_sq": float(expected_delta.pow(2).sum()),
                "numel": expected_delta.numel(),
            }
        self.compared.append(entry)


def observed(loss_fn, seen: list, tokens: list | None = None, steps: list | None = None, step_of=None):
    """verl's loss function, unchanged, noting per micro-batch it is called on: its samples (seen), its tokens
    (prompt and response, what verl's dynamic bsz counts against max_token_len) and the optimizer step it feeds
    (step_of(): the watch's count of optimizer steps taken so far; under dynamic bsz the number of micro-batches
    of a mini-batch is verl's, so the record says which mini-batch each belongs to)."""

    def loss(**kwargs):  # the engine calls it with model_output=, data=, dp_group=
        data = kwargs.get("data")
        if data is not None and "sample_index" in data:
            seen.append([int(i) for i in data["sample_index"].reshape(-1).tolist()])
            if tokens is not None:
                tokens.append(micro_batch_tokens(data))
            if steps is not None and step_of is not None:
                steps.append(step_of())
        return loss_fn(**kwargs)

    return loss


def micro_batch_tokens(data) -> int | None:
    """A micro-batch's tokens as verl's rearrange_micro_batches counts them: the packed (nested) input_ids'
    lengths, or the attention mask's ones of a padded batch."""
    ids = data.get("input_ids", None)
    if ids is not None and getattr(ids, "is_nested", False):
        return int(ids.offsets().diff().sum())
    if "attention_mask" in data:
        return int(data["attention_mask"].sum())
    return None


def rows_of(table: dict, keys: list, batches: dict) -> torch.Tensor:
    """The oracle's per-micro-batch (B, R_micro) rows of these keys as one (B, R) table, zeros past each end."""
    rows = [table[key][i, : len(x.response_ids)] for key in keys for i, x in enumerate(batches[key])]
    out = torch.zeros(len(rows), max(len(x) for x in rows))
    for i, x in enumerate(rows):
        out[i, : len(x)] = x
    return out


def compare_log_probs(
    result: dict, expected_lp: torch.Tensor, expected_ent: torch.Tensor, lengths: list, first: int = 0
) -> dict:
    """verl's log-probs and entropy of this rank's samples against the oracle's, positions past a response's end
    zero on both sides; the log-probs also per sample ([its place in the global batch (first: this group's first),
    its response length, max |diff|]), so that a why can name the samples wrong."""
    width = expected_lp.shape[1]
    mask = torch.zeros(len(lengths), width)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    actual = result["log_probs"][:, :width].float().cpu() * mask
    out = {"log_probs": compare_outputs(actual, expected_lp)}
    diff = (actual - expected_lp.float()).abs()
    out["log_probs"]["rows"] = [
        [first + i, n, float(diff[i].max()) if bool(diff[i].isfinite().all()) else float("inf")]
        for i, n in enumerate(lengths)
    ]
    entropy = None
    if "entropy" in result:
        entropy = result["entropy"][:, :width] * mask
        out["entropy"] = compare_outputs(entropy, expected_ent)
    roles, read = response_roles(mask)
    out["skipped_rows"] = skipped_rows(
        result["log_probs"][:, :width] * mask, entropy, expected_lp, expected_ent, roles, read
    )
    return out


def gathered_log_probs(result: dict, lengths: list, sp: int) -> list[torch.Tensor]:
    """Every sample's log-probs from every data-parallel group, in the global batch's order (the trainer collects
    the old log-probs of all ranks before the update)."""
    import torch.distributed as dist

    mine = [result["log_probs"][i, :n].clone() for i, n in enumerate(lengths)]
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return global_rows(everyone, sp)


def global_rows(rows_by_rank: list[list], sp: int) -> list:
    """The global batch's rows from every rank's: under Ulysses SP the sp ranks of a group (consecutive ranks,
    sequence_parallel.data_parallel_rank) hold the same gathered rows of that group's samples, so one rank of each
    group speaks for it; without SP (sp = 1) every rank is a group."""
    return [x for rank, rows in enumerate(rows_by_rank) if rank % sp == 0 for x in rows]


def plain(value):
    """verl's metrics as it returns them (floats, 0-d tensors or arrays, lists and dicts of them) as JSON data."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def oracle_summary(ref) -> list[dict]:
    """What the record keeps of the oracle's update: per optimizer step its place, its metrics and whether the
    clip engaged (the weights stay on the rank)."""
    keep = ("step", "epoch", "mini_batch", "clip_active", "metrics", "samples", "metric_alternatives")
    return [{k: o[k] for k in keep if k in o} for o in ref.optimizer_steps]
