"""The reference policy's engine (loss.use_kl_loss), as verl's trainer runs it: a second TrainingWorker on the same
ranks, built from the ref's config objects (verl_config.ref_verl_config: forward only, offloaded as verl's FSDP2
engine offloads every forward-only engine), on the seeded weights, never updated. Per RL step the trainer's
compute_ref_log_prob: the global batch converted to no-padding, calculate_entropy False and compute_loss False,
infer_batch on each data-parallel group's share, the log-probs gathered back into the global batch; the update's
batch then carries them as its `ref_log_prob` column (engine.make_verl_batch).

What the KL term reads is verl's ref engine's log-probs plus each sample's fixed offset
(oracle/batch.ref_log_prob_offsets; the oracle adds the same to its frozen model's): the reference is a policy the
actor has moved away from. verl's own numbers are compared with the oracle's frozen model before the offset.
"""

from __future__ import annotations


def build_ref_engine(r, model_dir: str):
    """verl's ref TrainingWorker from the ref's config objects; the record keeps its configuration."""
    from harness.rank.verl_side.engine import build_engine
    from harness.rank.verl_side.verl_config import ref_verl_config

    config = ref_verl_config(r.scenario, r.world, model_dir)
    r.out.ref_verl_config = config.summary()
    handle = build_engine(config, r.device_type)
    r.out.ref_engine_init_s = round(handle.init_s, 3)
    return handle


def offsets_of(r, keys: list) -> list:
    """Every sample's offset of the reference's log-probs, in the global batch's order (keys: its micro-batches)."""
    from harness.rank.oracle.batch import ref_log_prob_offsets

    s = r.scenario
    return [o for key in keys for o in ref_log_prob_offsets(s.seed, key[0], key[1], r.batches[key])]


def ref_log_probs(r, handle, samples: list, group: int, groups: int, lengths: list) -> tuple[list, dict]:
    """compute_ref_log_prob on the global batch's samples: this group's share through verl's ref engine, the
    log-probs of every group gathered in the global batch's order. Returns (per global sample its log-probs,
    this group's result as infer returns it)."""
    import torch

    from harness.rank.verl_side.engine import infer, make_verl_batch, rank_share
    from harness.rank.verl_side.engine_update import gathered_log_probs

    data = make_verl_batch(
        samples,
        [torch.zeros(len(x.response_ids)) for x in samples],
        temperature=r.scenario.temperature,
        global_batch_size=len(samples),
        calculate_entropy=False,
        trainer=r.scenario.trainer,
    )
    result = infer(handle, rank_share(data, group, groups), calculate_entropy=False)
    gathered = gathered_log_probs(result, lengths, r.scenario.engine.ulysses_sequence_parallel_size)
    return gathered, result
