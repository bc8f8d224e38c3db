"""The oracle of a scenario's training update, alone: the seeded model and every data-parallel rank's samples built
as the engine path builds them (rank/verl_side/engine_path.py build), then rank/oracle/update.py's update, in the
calling process, with no verl and no torchrun. `harness sensitivity` runs it once per changed setting."""

from __future__ import annotations

from harness.rank.oracle.sequence_parallel import data_parallel_size


def update_alone(scenario, model=None):
    """(UpdateReference, the seeded model): the scenario's update as the oracle computes it. Pass the model a
    previous call returned for the same model, seed and overrides to skip building it again."""
    from harness.rank.oracle.batch import make_samples
    from harness.rank.oracle.model import build_model
    from harness.rank.oracle.update import update_reference

    s = scenario
    if model is None:
        model = build_model(s.model, s.seed, s.model_overrides)
    groups = data_parallel_size(s.ranks, s.engine.ulysses_sequence_parallel_size)
    samples = {
        (dp_rank, micro): make_samples(model, s.batch, s.seed, dp_rank, micro)
        for dp_rank in range(groups)
        for micro in range(s.grad_accum)
    }
    return update_reference(model, samples, s, groups), model
