"""The engine path: what verl 0.9.1's trainer does for one actor update (or one ref / old-log-prob pass), run by
verl's own engine (rank/verl_side/engine.py) built from the trainer's config objects (rank/verl_side/verl_config.py),
judged against the per-sample oracle (oracle.sample_reference). Phases as the direct path's: build, references, run.

Every rank builds every rank's samples (the oracle needs the global batch), writes the seeded model to a
directory verl loads it from, and then hands only its own samples to verl.
"""

from __future__ import annotations


def build(r):
    from harness.rank.oracle.batch import make_samples
    from harness.rank.oracle.model import build_model

    s = r.scenario
    r.model = build_model(s.model, s.seed, s.model_overrides)
    for dp_rank in range(_groups(s, r.world)):
        for micro in range(s.grad_accum):
            r.batches[(dp_rank, micro)] = make_samples(r.model, s.batch, s.seed, dp_rank, micro)


def references(r):
    if r.scenario.steps:
        from harness.rank.oracle.update import update_reference

        r.references["update"] = _computed_once(
            r, "update", lambda: update_reference(r.model, r.batches, r.scenario, _groups(r.scenario, r.world))
        )
        return
    from harness.rank.oracle.reference import sample_reference

    r.references["oracle"] = _computed_once(r, "sample", lambda: sample_reference(r.model, r.batches, r.scenario))


def _computed_once(r, kind: str, compute):
    """compute() on rank 0, its result sent to every rank, bit for bit. The oracle is the same on every rank (every
    rank's samples, one order of float sums, on the CPU; it leaves the model and the random state as it found them)
    and was computed by each: W copies of the same work on the host's cores, shared with the cell beside it
    (engine-update-hsdp x candidate, four ranks on 2 cores, back to back at load 1.8-2.1: the oracle phase 1.99 s ->
    0.75 s). Rank 0 takes it from an earlier cell of the same command where one computed it (_of_this_command).

    What is sent is the oracle's file, as bytes, and every rank (rank 0 too) reads its value from them: sent as the
    objects themselves, pickle wrote each of the oracle's tensors through a torch.save of its own and the receiver
    read each back through a torch.load, 35-230 ms a pair of ranks for oracles of 2.5-10 MB against 11-50 ms for
    the bytes and one torch.load (docs/TIME.md)."""
    import io

    import torch
    import torch.distributed as dist

    box = [_of_this_command(r, kind, compute) if r.rank == 0 else None]
    if r.world > 1:
        dist.broadcast_object_list(box, src=0)
    data, computed_here = box[0]
    value, computed_by = torch.load(io.BytesIO(data), weights_only=False)
    if r.rank == 0:
        r.out.oracle_from = "computed" if computed_here else computed_by
    return value


def _of_this_command(r, kind: str, compute) -> tuple[bytes, bool]:
    """(the oracle's file, whether this call computed it): compute()'s result, or what an earlier cell of this
    command computed for the same scenario, device and world size: the oracle runs before verl is imported and never
    sees the arm, so the arms of a scenario (none, upstream, the candidate, ...) would compute the same numbers
    again. The cells of one command share a directory (the run batch, run/runner.py); the file there holds the
    numbers and the run that computed them, which the record names (oracle_from). Written whole or not at all
    (os.replace); two cells at once both compute it. A sandboxed cell (its code from outside the installed verl)
    reads one but never writes it: the file is a pickle, which the next cell would load (docs/SANDBOX.md)."""
    import hashlib
    import io
    import json
    import os

    import torch

    from harness.rank.environment import SANDBOXED

    key = json.dumps([kind, r.launch["scenario"], r.launch["device"], r.world], sort_keys=True)
    path = r.out_dir.parent / f"oracle-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"
    if path.is_file():
        return path.read_bytes(), False
    buffer = io.BytesIO()
    torch.save((compute(), f"computed by {r.out_dir.name}"), buffer)
    data = buffer.getvalue()
    if os.environ.get(SANDBOXED) == "1":
        return data, True
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)
    return data, True


def run(r):
    """verl builds the engine (its monkey patch and FSDP2 wrapping included), then one update or one pass."""
    import torch.distributed as dist
    import verl

    from harness.rank.measures.around_step import measured_step
    from harness.rank.verl_side.engine import (
        actor_update,
        batch_layout,
        build_engine,
        infer,
        make_verl_batch,
        rank_share,
    )
    from harness.rank.verl_side.ref_engine import build_ref_engine
    from harness.rank.verl_side.verl_config import calculate_entropy, shared_model_dir, verl_config

    s = r.scenario
    r.out.verl_file = verl.__file__
    model_dir = shared_model_dir(r, r.model)
    config = verl_config(s, r.world, model_dir)
    r.out.verl_config = config.summary()
    r.phase.enter("wrap")
    handle = build_engine(config, r.device_type)
    # The KL loss's reference: verl's own ref engine, a second TrainingWorker on these ranks (ref_engine.py).
    ref_handle = build_ref_engine(r, model_dir) if s.loss.use_kl_loss else None
    r.out.adapters = (r.out.adapters or []) + handle.adapters  # after any transformers 4.x ones (build)
    r.out.engine_init_s = round(handle.init_s, 3)
    r.out.lm_head_shape = list(r.model.lm_head.weight.shape)
    r.out.gradient_checkpointing = bool(getattr(handle.engine.module, "is_gradient_checkpointing", False))
    if s.compile:
        from harness.rank.verl_side.torch_compile import compile_in_place

        r.phase.enter("compile")
        r.out.compiled_modules = compile_in_place(handle.engine.module, s.compile_scope, s.compile_backend)
    if s.steps:
        run_update(r, handle, ref_handle)
        return
    groups, group = _groups(s, r.world), _group(s, r.rank)
    samples = [x for micro in range(s.grad_accum) for x in r.batches[(group, micro)]]
    oracle = r.references["oracle"]
    keys = _global_keys(r)
    global_samples = [x for key in keys for x in r.batches[key]]

    r.phase.enter("forward")
    ref_result, ref_rows = None, None
    if ref_handle is not None:
        ref_rows, ref_result = _ref_pass(r, ref_handle, global_samples, samples)
    global_batch = make_verl_batch(
        global_samples,
        [lp for key in keys for lp in oracle.old_log_probs[key]],
        temperature=s.temperature,
        global_batch_size=groups * len(samples),
        calculate_entropy=calculate_entropy(config.actor),
        ref_log_probs=ref_rows,
        trainer=s.trainer,
    )
    r.out.batch_layout = batch_layout(s.trainer, global_batch)
    data = rank_share(global_batch, group, groups)
    dist.barrier()
    step = (lambda: infer(handle, data)) if s.forward_only else (lambda: actor_update(handle, data))
    result = measured_step(r, step, r.out.lm_head_shape[0])
    r.out.adapters = r.out.adapters + result.pop("adapters", [])  # the step's own (engine.py: keep-grads-on-exit)
    if not s.forward_only and "log_probs" not in result:
        _log_probs_by_infer(r, handle, data, result)

    r.phase.enter("compare")
    _compare(r, handle, result, samples, ref_result)
    dist.barrier()


# verl from #6984 (2026-07-08) to #7109 (2026-07-23) drops the training step's per-micro-batch output after backward
# and has no `return_model_output` to keep it: its log-probs are then read from verl's own infer_batch on the same
# weights and batch, after the measured step (no optimizer step ran; its gathers are not counted), and the record
# names this in its adapters.
LOG_PROBS_BY_INFER = "log-probs-by-infer"


def _log_probs_by_infer(r, handle, data, result: dict):
    from harness.rank.verl_side.engine import infer
    from harness.rank.verl_side.verl_config import calculate_entropy

    inferred = infer(handle, data, calculate_entropy=calculate_entropy(handle.config.actor))
    result.update({k: v for k, v in inferred.items() if k in ("log_probs", "entropy")})
    r.out.adapters = (r.out.adapters or []) + [LOG_PROBS_BY_INFER]


def _ref_pass(r, ref_handle, global_samples: list, samples: list) -> tuple[list, dict]:
    """verl's ref engine on the global batch (compute_ref_log_prob): the KL's reference log-probs of every sample
    (verl's, plus each sample's offset) and this group's result as verl returned it."""
    from harness.rank.verl_side.ref_engine import offsets_of, ref_log_probs

    s = r.scenario
    gathered, result = ref_log_probs(
        r,
        ref_handle,
        global_samples,
        _group(s, r.rank),
        _groups(s, r.world),
        [len(x.response_ids) for x in samples],
    )
    rows = [lp + offset for lp, offset in zip(gathered, offsets_of(r, _global_keys(r)), strict=True)]
    return rows, result


def run_update(r, handle, ref_handle=None):
    """`steps` RL steps of verl's actor update (rank/verl_side/engine_update.py), the first one's train_mini_batch under
    the profiler and the head-memory watch; every infer's log-probs and every optimizer step compared."""
    import torch.distributed as dist

    from harness.rank.measures.residency import residency_after_step, tensors_held_by
    from harness.rank.oracle.update import mini_batch_plan
    from harness.rank.verl_side.engine_update import OptimizerWatch, observed, oracle_summary

    s, ref = r.scenario, r.references["update"]
    inputs = _UpdateInputs(r, handle)
    watch = OptimizerWatch(
        handle.engine.module, handle.engine.optimizer, ref.optimizer_steps, s.ppo_mini_batches * s.ppo_epochs
    )
    watch.watch_gradients(handle.engine)
    seen, tokens, fed = [], [], []
    handle.worker.set_loss_fn(
        observed(handle.loss_fn, seen, tokens, fed, lambda: watch.rl_step * watch.per_rl_step + watch.index)
    )
    update = {
        "log_probs": [],
        "metrics": [],
        "micro_batches": seen,
        "micro_batch_tokens": tokens,
        "micro_batch_steps": fed,
        "optimizer_steps": watch.compared,
    }
    if ref_handle is not None:
        update["ref_log_probs"] = []
    for step in range(s.steps):
        _rl_step(r, handle, ref_handle, inputs, watch, update, step)
    r.phase.enter("compare")
    watch.release()
    inputs.current_log_probs(s.steps, update["log_probs"])
    update["plan"] = [[list(key) for key in keys] for keys in mini_batch_plan(s, _groups(s, r.world))]
    if r.rank == 0:
        update["oracle"] = oracle_summary(ref)
    r.out.update = update
    r.out.saved_lm_head_bytes = None
    # The optimizer's moments are verl's trainer's own between steps (at one rank an lm_head moment is lm_head-sized).
    held = tensors_held_by(r.references, r.batches, handle.engine.optimizer.state)
    r.out.residency = residency_after_step(handle.engine.module, tuple(r.out.lm_head_shape), held)
    dist.barrier()


def _rl_step(r, handle, ref_handle, inputs, watch, update: dict, step: int):
    """One RL step as the trainer runs it: the old log-probs on the current weights (compared with the oracle's),
    the ref's where the KL loss has one, then verl's train_mini_batch on the batch with the trainer's keys, the
    first step's under the profiler; its metrics kept in `update`."""
    import torch.distributed as dist
    from verl.utils import tensordict_utils as tu

    from harness.rank.verl_side.engine_update import gathered_log_probs, plain
    from harness.rank.verl_side.verl_config import calculate_entropy

    s, actor = r.scenario, handle.config.actor
    r.phase.enter("forward")
    result = inputs.current_log_probs(step, update["log_probs"])
    gathered = gathered_log_probs(result, inputs.lengths, s.engine.ulysses_sequence_parallel_size)
    old = [lp + x.old_log_prob_noise for lp, x in zip(gathered, inputs.samples, strict=True)]
    ref_rows = None
    if ref_handle is not None:
        # compute_ref_log_prob, after the old log-probs as the trainer runs them; the ref's weights never move.
        ref_rows, ref_result = _ref_pass(r, ref_handle, inputs.samples, [x for k in inputs.mine for x in r.batches[k]])
        update["ref_log_probs"].append({"step": step, **inputs.compare_ref(ref_result)})
    # The keys ray_trainer._update_actor assigns, from the actor config its trainer reads them from.
    data = inputs.batch(
        old,
        ref_log_probs=ref_rows,
        calculate_entropy=calculate_entropy(actor),
        mini_batch_size=actor.ppo_mini_batch_size * actor.rollout_n,
        epochs=actor.ppo_epochs,
        seed=actor.data_loader_seed,
        dataloader_kwargs={"shuffle": actor.shuffle},
        compute_loss=True,
    )
    watch.start_rl_step(step)
    dist.barrier()
    output = _train_mini_batch(r, handle, data, profile=step == 0)
    update["metrics"].append({"step": step, "verl": plain(tu.get(output, "metrics")) if output is not None else None})


class _UpdateInputs:
    """What the trainer hands verl in each RL step of the update: the global batch (every group's samples in
    the trainer's order) with the old log-probs given, this group's share of it; and verl's log-probs on the
    current weights, compared with the oracle's for the same step."""

    def __init__(self, r, handle):
        s = r.scenario
        self.r, self.handle = r, handle
        self.groups, self.group = _groups(s, r.world), _group(s, r.rank)
        self.samples = [x for key in _global_keys(r) for x in r.batches[key]]
        self.mine = [(self.group, m) for m in range(s.grad_accum)]
        self.lengths = [len(x.response_ids) for key in self.mine for x in r.batches[key]]

    def batch(self, old_log_probs, *, ref_log_probs=None, calculate_entropy: bool = True, **trainer_keys):
        """The global batch as the trainer holds it, its keys assigned before dispatch cuts this group's share
        (ref_log_probs: the KL's reference column; calculate_entropy: what the trainer asks of the update)."""
        from verl.utils import tensordict_utils as tu

        from harness.rank.verl_side.engine import batch_layout, make_verl_batch, rank_share

        actor = self.handle.config.actor
        data = make_verl_batch(
            self.samples,
            old_log_probs,
            temperature=self.r.scenario.temperature,
            global_batch_size=actor.ppo_mini_batch_size * actor.rollout_n,
            sample_index=True,
            calculate_entropy=calculate_entropy,
            ref_log_probs=ref_log_probs,
            trainer=self.r.scenario.trainer,
        )
        tu.assign_non_tensor(data, **trainer_keys)
        if self.r.out.batch_layout is None:  # the first batch the trainer hands verl (the layout is the same after)
            self.r.out.batch_layout = batch_layout(self.r.scenario.trainer, data)
        return rank_share(data, self.group, self.groups)

    def compare_ref(self, result: dict) -> dict:
        """verl's ref engine's log-probs of this group's samples against the oracle's frozen initial model's (the
        log-probs the first RL step starts from)."""
        from harness.rank.verl_side.engine_update import rows_of

        expected = rows_of(self.r.references["update"].log_probs[0], self.mine, self.r.batches)
        return {"log_probs": _masked_compare(result["log_probs"], expected, self.lengths)}

    def current_log_probs(self, step: int, log: list):
        """verl's infer_batch on the current weights (compute_log_prob's pass), its comparison appended to log."""
        import torch

        from harness.rank.verl_side.engine import infer
        from harness.rank.verl_side.engine_update import compare_log_probs, rows_of

        ref = self.r.references["update"]
        result = infer(self.handle, self.batch([torch.zeros(len(x.response_ids)) for x in self.samples]))
        expected = [rows_of(table[step], self.mine, self.r.batches) for table in (ref.log_probs, ref.entropy)]
        first = self.group * len(self.lengths)  # this group's first sample in the global batch (_global_keys)
        log.append({"step": step, **compare_log_probs(result, *expected, self.lengths, first)})
        return result


def _train_mini_batch(r, handle, data, *, profile: bool):
    """verl's TrainingWorker.train_mini_batch on a copy of the share, as the batch arrives at a worker through Ray
    (consolidate() locks the share; verl pops keys). profile: under the profiler and the head-memory watch (the
    first RL step's update: its collectives, step time and largest logits go in the record)."""
    from harness.rank.measures.around_step import measured_step

    def train():
        return handle.worker.train_mini_batch(data.clone())

    if not profile:
        return train()
    return measured_step(r, train, r.out.lm_head_shape[0])


def _groups(scenario, world: int) -> int:
    """Data-parallel groups: every rank, or under sequence parallelism every sp ranks together."""
    from harness.rank.oracle.sequence_parallel import data_parallel_size

    return data_parallel_size(world, scenario.engine.ulysses_sequence_parallel_size)


def _group(scenario, rank: int) -> int:
    from harness.rank.oracle.sequence_parallel import data_parallel_rank

    return data_parallel_rank(rank, scenario.engine.ulysses_sequence_parallel_size)


def _global_keys(r) -> list:
    """The trainer's global batch order: group 0's samples, then group 1's, ... (the order verl's dispatch splits;
    without sequence parallelism each rank is a group)."""
    return [
        (dp_rank, micro) for dp_rank in range(_groups(r.scenario, r.world)) for micro in range(r.scenario.grad_accum)
    ]


def _masked_compare(actual, expected, lengths: list) -> dict:
    """actual (B, >= R) against expected (B, R), positions past each response's end zero on both sides."""
    import torch

    from harness.rank.measures.parity import compare_outputs

    width = expected.shape[1]
    mask = torch.zeros(len(lengths), width)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    return compare_outputs(actual[:, :width] * mask, expected * mask)


def _compare(r, handle, result, samples, ref_result=None):
    """Log-probs and entropy per response token (positions past a response's end are zero on both sides),
    every parameter's gradient shard, and what the step left resident."""
    import torch

    from harness.rank.measures.parity import compare_gradients, compare_outputs
    from harness.rank.measures.residency import residency_after_step, tensors_held_by

    s = r.scenario
    oracle = r.references["oracle"]
    group = _group(s, r.rank)
    expected_lp = [oracle.log_probs[(group, m)] for m in range(s.grad_accum)]
    expected_ent = [oracle.entropy[(group, m)] for m in range(s.grad_accum)]
    width = max(len(x.response_ids) for x in samples)
    mask = torch.zeros(len(samples), width)
    for i, x in enumerate(samples):
        mask[i, : len(x.response_ids)] = 1

    def padded(parts):
        out = torch.zeros(len(samples), width)
        row = 0
        for part in parts:
            out[row : row + part.shape[0], : part.shape[1]] = part
            row += part.shape[0]
        return out

    alternatives = oracle.log_prob_alternatives.get((group, 0)) or {}
    log_probs = compare_outputs(
        result["log_probs"][:, :width] * mask,
        padded(expected_lp),
        {
            name: padded([oracle.log_prob_alternatives[(group, m)][name] for m in range(s.grad_accum)])
            for name in alternatives
        },
    )
    log_probs["rows"] = sample_rows(result["log_probs"][:, :width] * mask, padded(expected_lp), samples, group)
    entry = {
        "outputs": {
            "0": {
                "log_probs": log_probs,
                "entropy": _entropy_comparison(r, handle, result, width, mask, padded(expected_ent)),
            }
        }
    }
    ends = _shard_ends(samples, s.batch.micro_batch_size, s.engine.ulysses_sequence_parallel_size)
    entry["outputs"]["0"]["skipped_rows"] = _skipped(
        result, width, mask, padded(expected_lp), padded(expected_ent), ends
    )
    if ref_result is not None:
        # verl's ref engine against the oracle's frozen initial model (before the KL's offsets).
        expected_ref = padded([oracle.ref_log_probs[(group, m)] for m in range(s.grad_accum)])
        entry["outputs"]["ref"] = {
            "log_probs": compare_outputs(ref_result["log_probs"][:, :width] * mask, expected_ref),
            "entropy": None,
        }
    sp = s.engine.ulysses_sequence_parallel_size
    if sp > 1:
        from harness.rank.oracle.sequence_parallel import logprob_errors_by_position

        # Where the log-prob errors sit relative to the SP shards (judge_cell/diagnosis.py reads it).
        entry["outputs"]["0"]["log_probs"]["sp_positions"] = logprob_errors_by_position(
            result["log_probs"][:, :width] * mask, padded(expected_lp), samples, s.batch.micro_batch_size, sp, group
        )
    if not s.forward_only:
        entry["grads"] = compare_gradients(handle.engine.module.named_parameters(), oracle.grads)
    r.out.parity = {"oracle": entry}
    r.out.saved_lm_head_bytes = None
    r.out.residency = residency_after_step(
        handle.engine.module, tuple(r.out.lm_head_shape), tensors_held_by(r.references, r.batches)
    )


def sample_rows(actual, expected, samples: list, group: int) -> list[list]:
    """Per sample of this group: [its place in the global batch (group-major, as _global_keys orders it), its response
    length, the largest |actual - expected| over its response]."""
    first = group * len(samples)
    rows = []
    for i, x in enumerate(samples):
        diff = (actual[i].float().cpu() - expected[i].float().cpu()).abs()
        rows.append(
            [first + i, len(x.response_ids), float(diff.max()) if bool(diff.isfinite().all()) else float("inf")]
        )
    return rows


def _shard_ends(samples: list, micro_batch_size: int, sp: int) -> set:
    """(sample, token) of the response rows computed last in their Ulysses SP shard; none without SP."""
    if sp <= 1:
        return set()
    from harness.rank.oracle.sequence_parallel import response_positions

    where = iter(response_positions(samples, micro_batch_size, sp))
    ends = set()
    for i, x in enumerate(samples):
        for t in range(len(x.response_ids)):
            _, offset, shard_len = next(where)
            if offset == shard_len - 1:
                ends.add((i, t))
    return ends


def _skipped(result, width, mask, expected_lp, expected_ent, shard_ends: set) -> dict | None:
    """The response rows verl's head skipped (rank/measures/rows.py): log-prob and entropy exactly 0."""
    from harness.rank.measures.rows import response_roles, skipped_rows

    entropy = result["entropy"][:, :width] * mask if "entropy" in result else None
    roles, read = response_roles(mask, shard_ends)
    return skipped_rows(result["log_probs"][:, :width] * mask, entropy, expected_lp, expected_ent, roles, read)


def _entropy_comparison(r, handle, result, width, mask, expected):
    """verl's entropy against the oracle's; None where the trainer asks for none (the update with entropy_coeff 0
    and calculate_entropy False: verl returns none, and its fused head runs the entropy-free backward); a missing
    entropy that was asked counts as infinitely far."""
    from harness.rank.measures.parity import compare_outputs
    from harness.rank.verl_side.verl_config import calculate_entropy

    asked = r.scenario.forward_only or calculate_entropy(handle.config.actor)
    if "entropy" in result:
        return compare_outputs(result["entropy"][:, :width] * mask, expected)
    return {"max_abs": float("inf"), "missing": True} if asked else None
