"""The oracle of a scenario's training update, alone: the seeded model and every data-parallel rank's samples built
as the engine path builds them (rank/verl_side/engine_path.py build), then rank/oracle/update.py's update, in the
calling process, with no verl and no torchrun. `harness sensitivity` runs it once per changed setting."""

from __future__ import annotations

from harness.rank.oracle.sequence_parallel import data_parallel_size


def _built_from(s) -> tuple:
    """What the model and the samples are made of: a scenario that differs only elsewhere (its optimizer, its loss,
    its temperature, its steps: the settings `harness sensitivity` changes) gets the same ones."""
    sp = s.engine.ulysses_sequence_parallel_size
    return (s.model, s.seed, repr(s.model_overrides), repr(s.batch), s.ranks, sp, s.grad_accum)


class UpdateAlone:
    """A scenario's update as the oracle computes it, run again under changed settings: the seeded model and every
    rank's samples are built once, and the log-probs and entropy on the initial weights (an update's first numbers)
    are computed once per temperature. The same weights, samples and temperature give the same numbers, so each run
    is the one a fresh build would give, without the build and the first forward of every sample (harness
    sensitivity: about a third of a scenario's check)."""

    def __init__(self, scenario):
        from harness.rank.oracle.batch import make_samples
        from harness.rank.oracle.model import build_model

        s = scenario
        self.built_from = _built_from(s)
        self.model = build_model(s.model, s.seed, s.model_overrides)
        self.groups = data_parallel_size(s.ranks, s.engine.ulysses_sequence_parallel_size)
        self.samples = {
            (dp_rank, micro): make_samples(self.model, s.batch, s.seed, dp_rank, micro)
            for dp_rank in range(self.groups)
            for micro in range(s.grad_accum)
        }
        self._start: dict = {}  # temperature -> (log-probs, entropy) on the initial weights

    def __call__(self, scenario):
        """The UpdateReference of this scenario: the one given, or one changed in its optimizer, loss, temperature
        or steps."""
        from harness.rank.oracle.update import update_reference

        assert _built_from(scenario) == self.built_from, "another model or other samples: build another UpdateAlone"
        start = self._start.get(scenario.temperature)
        ref = update_reference(self.model, self.samples, scenario, self.groups, start=start)
        self._start.setdefault(scenario.temperature, (ref.log_probs[0], ref.entropy[0]))
        return ref
