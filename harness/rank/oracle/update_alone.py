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
    """A scenario's update as the oracle computes it, run again under changed settings. What does not depend on the
    changed settings is done once and handed to each update (update_reference's reuse), each the number a fresh
    update would compute from the same weights, samples and settings: the seeded model and every rank's samples;
    a copy of the model that each update trains in place, its weights set back to the initial ones first (a deepcopy
    of the model per update cost a tenth of the check); the log-probs and entropy on the initial weights (an update's
    first numbers) once per temperature; and the first mini-batch's forward and backward (its gradients, metrics and
    per-sample counts: the optimizer has not acted yet) once per scenario apart from its optimizer and steps, so a
    change of an optimizer setting starts at its first optimizer step; and the first RL step once per scenario apart
    from its steps, where its learning rate does not depend on them (an update over every RL step, run where the
    first alone does not show a change, goes on from the first's weights and optimizer state)."""

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
        self._trained = None  # the copy each update trains in place
        self._start: dict = {}  # temperature -> (log-probs, entropy) on the initial weights
        self._first: dict = {}  # the scenario but its optimizer and steps -> the first mini-batch's results
        self._after_first: dict = {}  # the scenario but its steps -> its state and records after its first RL step

    def __call__(self, scenario):
        """The UpdateReference of this scenario: the one given, or one changed in its optimizer, loss, temperature
        or steps."""
        from harness.rank.oracle.update import update_reference

        assert _built_from(scenario) == self.built_from, "another model or other samples: build another UpdateAlone"
        ref = update_reference(self.model, self.samples, scenario, self.groups, reuse=self)
        self._start.setdefault(scenario.temperature, (ref.log_probs[0], ref.entropy[0]))
        return ref

    def trained_copy(self):
        """The model to train, on its initial weights (copied into the one copy, as load_state_dict copies, without
        its key matching) with no gradients."""
        import copy

        import torch

        if self._trained is None:
            self._trained = copy.deepcopy(self.model).float()
            initial = self.model.state_dict()
            self._restore = [(t, initial[name]) for name, t in self._trained.state_dict().items()]
        with torch.no_grad():
            for trained, initial in self._restore:
                trained.copy_(initial)
        for p in self._trained.parameters():
            p.grad = None
        return self._trained

    def start(self, scenario):
        """(log-probs, entropy) on the initial weights at the scenario's temperature, where an earlier update has
        them; else None."""
        return self._start.get(scenario.temperature)

    def first_mini_batch(self, scenario, params, compute, args):
        """The first mini-batch's (metrics, per-sample counts), its gradients left in params' grad: computed
        (compute(*args)) for the first scenario that differs from the others only in its optimizer and steps, copied
        for the others."""
        import copy

        key = _but(scenario, "optim", "steps")
        if key not in self._first:
            results = compute(*args)
            self._first[key] = (copy.deepcopy(results), [None if p.grad is None else p.grad.clone() for p in params])
            return results
        results, grads = self._first[key]
        for p, grad in zip(params, grads):
            p.grad = None if grad is None else grad.clone()
        return copy.deepcopy(results)

    def first_step_done(self, scenario, params, optimizer, ref):
        """Keeps what an update of this scenario but another length resumes from: the weights and the optimizer's
        state after the first RL step, that step's records, and the log-probs before and after it."""
        key = _but(scenario, "steps")
        if key not in self._after_first:
            state = ([p.detach().clone() for p in params], _copied(optimizer.state_dict()))
            records = (ref.log_probs[:2], ref.entropy[:2], list(ref.optimizer_steps))
            self._after_first[key] = (scenario.steps, state, records)

    def resume(self, scenario, params, optimizer, scheduler, ref) -> int:
        """The RL steps done for this update (0 or 1): its first, where an update of the same scenario but another
        length kept it (first_step_done) and ran that step at the same learning rate (the schedule at step 0 is the
        same whatever the length, unless a warmup is a ratio of it). The step's last record gets this update's own
        learning rate after it (the schedule's next value, which depends on the length)."""
        import warnings

        import torch

        from harness.rank.oracle.update import lr_factor

        kept = self._after_first.get(_but(scenario, "steps"))
        if kept is None or lr_factor(scenario.optim, kept[0], 0) != lr_factor(scenario.optim, scenario.steps, 0):
            return 0
        _, (weights, state), (log_probs, entropy, records) = kept
        with torch.no_grad():
            for p, w in zip(params, weights):
                p.copy_(w)
        optimizer.load_state_dict(_copied(state))  # loaded as given, then stepped in place: a copy
        with warnings.catch_warnings():  # it warns of a step before any optimizer step: that step was the kept one
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
            scheduler.step()
        ref.log_probs += log_probs
        ref.entropy += entropy
        ref.optimizer_steps += [dict(r) for r in records]
        last = ref.optimizer_steps[-1]
        last["metrics"] = {**last["metrics"], "lr": scheduler.get_last_lr()[0]}
        return 1


def _but(scenario, *fields: str) -> str:
    """The scenario but these fields, as a key: two scenarios that differ only there get the same one."""
    return repr(scenario.model_copy(update=dict.fromkeys(fields)))


def _copied(optimizer_state: dict) -> dict:
    """An optimizer's state_dict with its tensors cloned (a deepcopy of it walked every tensor in Python: 19 ms an
    update)."""
    import copy

    import torch

    return {
        "state": {
            i: {k: v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for k, v in state.items()}
            for i, state in optimizer_state["state"].items()
        },
        "param_groups": copy.deepcopy(optimizer_state["param_groups"]),
    }
