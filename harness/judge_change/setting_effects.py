"""Can the verdict see each setting of an update scenario? For the scenario's training update, the oracle alone
(rank/oracle/update_alone.py: no verl, no torchrun) runs once as the scenario says and once per change: each setting
set back to its library's default, each loss term turned off. For each change, every number the update verdict
judges (judge_cell/update_verdict.py: each parameter's update and weights after every optimizer step, verl's metrics,
the log-probs and entropy the later RL steps start from) moves by some amount; in units of that number's tolerance
(inputs/tolerances.py) the largest is the change's reach. A change whose reach is under SEES (10 tolerances) is one the
verdict cannot see: a verl that dropped the setting, or the term, would pass. A scenario declares those it knows of
(`cannot_see: {optim.clip_grad: why}`); any other is a finding, and so is a declared one that is seen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.inputs.tolerances import tolerance_for, update_tolerance_for
from harness.judge_cell.shard_stats import even_share_relative
from harness.judge_cell.update_verdict import METRICS

SEES = 10.0  # a change must move some judged number by this many tolerances

# Each setting's library default: what a verl that dropped it would run. The optimizer's keywords are torch's own
# (build_optimizer passes them to torch.optim; a dropped keyword is torch's default), the rest verl 0.9.1's config
# defaults (FSDPOptimizerConfig, ActorConfig, the rollout's temperature).
LIBRARY_DEFAULTS = {
    "optim.lr": ("verl's FSDPOptimizerConfig", 1e-6),
    "optim.weight_decay": ("torch.optim", {"AdamW": 0.01, "SGD": 0.0}),
    "optim.betas": ("torch.optim.AdamW", {"AdamW": (0.9, 0.999)}),
    "optim.momentum": ("torch.optim.SGD", {"SGD": 0.0}),
    "optim.clip_grad": ("verl's FSDPOptimizerConfig", 1.0),
    "optim.lr_scheduler_type": ("verl's FSDPOptimizerConfig", "constant"),
    "optim.lr_warmup_steps": ("verl's FSDPOptimizerConfig", -1),
    "optim.lr_warmup_steps_ratio": ("verl's FSDPOptimizerConfig", 0.0),
    "optim.min_lr_ratio": ("verl's FSDPOptimizerConfig", 0.0),
    "optim.num_cycles": ("verl's FSDPOptimizerConfig", 0.5),
    "loss.clip_ratio": ("verl's ActorConfig", 0.2),
    "loss.clip_ratio_low": ("verl's ActorConfig", 0.2),
    "loss.clip_ratio_high": ("verl's ActorConfig", 0.2),
    "loss.clip_ratio_c": ("verl's ActorConfig", 3.0),
    "loss.entropy_coeff": ("verl's ActorConfig", 0.0),
    "loss.calculate_entropy": ("verl's ActorConfig", False),
    "loss.loss_agg_mode": ("verl's ActorConfig", "token-mean"),
    "loss.loss_mode": ("verl's PolicyLossConfig", "vanilla"),
    "loss.use_kl_loss": ("verl's ActorConfig", False),
    "loss.kl_loss_coef": ("verl's ActorConfig", 0.001),
    "loss.kl_loss_type": ("verl's ActorConfig", "low_var_kl"),
    "temperature": ("verl's rollout config", 1.0),
}
# What verl's build_optimizer always passes: checked whether or not the scenario's file writes them.
ALWAYS = ("optim.lr", "optim.weight_decay", "optim.betas", "optim.momentum", "optim.clip_grad")
OFF = 1e9  # a clip this wide never engages
# Each loss term turned off: the fields it sets, and when the term is there to turn off.
TERMS = {
    "term.clip": ({"loss.clip_ratio": OFF, "loss.clip_ratio_low": OFF, "loss.clip_ratio_high": OFF}, None),
    "term.dual_clip": ({"loss.clip_ratio_c": OFF}, None),
    "term.entropy": ({"loss.entropy_coeff": 0.0}, ("loss.entropy_coeff", lambda v: v != 0)),
    "term.kl": ({"loss.use_kl_loss": False}, ("loss.use_kl_loss", bool)),
    "term.grad_clip": ({"optim.clip_grad": OFF}, None),
}


@dataclass
class SettingChange:
    name: str  # a dotted field (set back to its default) or a term (turned off)
    shown: str  # "0.1 -> 0.01 (torch.optim's default)"
    fields: dict  # dotted field -> value in the changed scenario


@dataclass
class Reach:
    change: SettingChange
    units: float  # the largest move of a judged number, in its tolerances (0: the change is no change)
    number: str  # which number moved most, and where

    @property
    def sees(self) -> bool:
        return self.units >= SEES


def _value(scenario, dotted: str):
    node = scenario
    for part in dotted.split("."):
        node = getattr(node, part, _ABSENT)
        if node is _ABSENT:
            return _ABSENT
    return node


_ABSENT = object()


def _set_in_file(scenario, dotted: str) -> bool:
    """Whether the scenario sets this field itself (its file, or its verl: block), not by the schema's default."""
    *parents, last = dotted.split(".")
    node = scenario
    for part in parents:
        if part not in node.model_fields_set:
            return False
        node = getattr(node, part)
    return last in node.model_fields_set


def _default(dotted: str, optimizer: str):
    source, value = LIBRARY_DEFAULTS[dotted]
    if isinstance(value, dict):
        return (source, value[optimizer]) if optimizer in value else (source, _ABSENT)
    return source, value


def changes(scenario) -> list[SettingChange]:
    """Each setting the scenario sets (those build_optimizer always passes, and any other its file writes) back to
    its library's default, then each loss term that is there turned off."""
    optimizer = scenario.optim.optimizer
    found = []
    for dotted in LIBRARY_DEFAULTS:
        value = _value(scenario, dotted)
        if value is _ABSENT or not (dotted in ALWAYS or _set_in_file(scenario, dotted)):
            continue
        source, default = _default(dotted, optimizer)
        if default is _ABSENT:
            continue  # not this optimizer's keyword (betas for SGD, momentum for AdamW)
        found.append(
            SettingChange(dotted, f"{_shown(value)} -> {_shown(default)} ({source}'s default)", {dotted: default})
        )
    for name, (fields, present) in TERMS.items():
        fields = {f: v for f, v in fields.items() if _value(scenario, f) is not _ABSENT}
        if present and (_value(scenario, present[0]) is _ABSENT or not present[1](_value(scenario, present[0]))):
            continue
        if fields:
            found.append(
                SettingChange(name, "off (" + ", ".join(f"{f}={_shown(v)}" for f, v in fields.items()) + ")", fields)
            )
    return found


def _shown(value) -> str:
    if isinstance(value, float) and value >= OFF:
        return "1e9"
    return repr(tuple(value)) if isinstance(value, (list, tuple)) else repr(value)


def changed(scenario, fields: dict):
    """The scenario with these dotted fields replaced (nested models copied, not validated: a value a change sets,
    a clip of 1e9, say, is meant)."""
    top: dict = {}
    for dotted, value in fields.items():
        *parents, last = dotted.split(".")
        if not parents:
            top[last] = value
            continue
        nested = top.setdefault(parents[0], {})
        nested[last] = value
    update = {}
    for name, value in top.items():
        if isinstance(value, dict):
            update[name] = getattr(scenario, name).model_copy(update=value)
        else:
            update[name] = value
    return scenario.model_copy(update=update)


# -- how far a changed update moves each judged number -----------------------------------------------------------
def reach(scenario, base, other) -> tuple[float, str]:
    """The largest move from `base` to `other` (two UpdateReferences) of a number the update verdict judges, in
    its tolerances, and which number (the update verdict's own measures and bounds)."""
    tol, update_tol = tolerance_for(scenario.precision), update_tolerance_for(scenario.precision)
    worst = (0.0, "nothing moved")

    def consider(units: float, what: str):
        nonlocal worst
        if units > worst[0] or (math.isinf(units) and not math.isinf(worst[0])):
            worst = (units, what)

    for k, (a, b) in enumerate(zip(base.optimizer_steps, other.optimizer_steps)):
        where = f"optimizer step {k + 1}"
        for measure, bound, what in (
            ("delta", update_tol.update_rel, "update"),
            ("params", update_tol.param_rel, "weights"),
        ):
            if bound is None:
                continue  # not judged at this precision
            rel = even_share_relative(_sums(a[measure], b[measure]))
            name, value = max(rel.items(), key=lambda kv: kv[1])
            consider(value / bound, f"{what} {name} at {where}")
        for _, (name, kind) in METRICS.items():
            if name not in a["metrics"] or name not in b["metrics"]:
                continue
            x, ref = b["metrics"][name], a["metrics"][name]
            error = abs(x - ref) if kind == "abs" else abs(x - ref) / abs(ref) if ref else abs(x)
            bound = update_tol.metric_abs if kind == "abs" else update_tol.metric_rel
            consider(error / bound, f"{name} at {where}")
    for step in range(1, len(base.log_probs)):
        lp = _max_abs(base.log_probs[step], other.log_probs[step])
        consider(lp / update_tol.logprob_abs, f"log-probs before RL step {step + 1}")
        ent = _max_abs(base.entropy[step], other.entropy[step])
        consider(ent / tol.entropy_abs, f"entropy before RL step {step + 1}")
    return worst


def _sums(ref: dict, other: dict) -> dict:
    return {
        n: (float((other[n] - t).double().pow(2).sum()), float(t.double().pow(2).sum()), t.numel())
        for n, t in ref.items()
    }


def _max_abs(ref: dict, other: dict) -> float:
    return max((float((other[k] - v).abs().max()) for k, v in ref.items()), default=0.0)


def first_step_alone(scenario):
    """The scenario cut to its first RL step, where that is exactly the first RL step of the whole update (the lr
    factor at the schedule's step 0 does not depend on the run's length unless the warmup is a ratio of it), else
    None. A change the verdict sees there, it sees in the whole update (the same numbers, judged the same way)."""
    if scenario.steps <= 1 or scenario.optim.lr_warmup_steps_ratio:
        return None
    return scenario.model_copy(update={"steps": 1})


def sensitivity(scenario, only=None) -> list[Reach]:
    """Every change of the scenario (or those named in `only`) and how far it reaches. Runs the oracle (torch,
    transformers) in this process, on one thread as each rank does: each change first on the first RL step alone
    (first_step_alone), and over the whole update only where that step does not show it."""
    import torch

    from harness.rank.oracle.update_alone import UpdateAlone

    torch.set_num_threads(1)
    short = first_step_alone(scenario)
    bases: dict = {}
    update_alone = None  # built at the first change that runs: a scenario whose every value is the default builds none

    def base(s):
        nonlocal update_alone
        update_alone = update_alone or UpdateAlone(scenario)
        if s.steps not in bases:
            bases[s.steps] = update_alone(s)
        return bases[s.steps]

    out = []
    for change in changes(scenario):
        if only and change.name not in only:
            continue
        if all(_same(_value(scenario, f), v) for f, v in change.fields.items()):
            out.append(Reach(change, 0.0, "the scenario's value is the default: nothing to change"))
            continue
        for s in (short, scenario) if short else (scenario,):
            reference = base(s)
            other = update_alone(changed(s, change.fields))
            units, number = reach(s, reference, other)
            if units >= SEES:
                break
        out.append(Reach(change, units, number))
    return out


def _same(a, b) -> bool:
    return (tuple(a) if isinstance(a, (list, tuple)) else a) == (tuple(b) if isinstance(b, (list, tuple)) else b)


def findings(scenario, reaches: list[Reach]) -> list[str]:
    """What the check holds against the scenario: a change it cannot see and does not declare, and a declaration
    whose change is seen after all (or is no change of this scenario)."""
    declared = dict(getattr(scenario, "cannot_see", {}) or {})
    lines = []
    for r in reaches:
        if not r.sees and r.change.name not in declared:
            lines.append(
                f"{scenario.name}: {r.change.name} {r.change.shown} moves the verdict's numbers by "
                f"{r.units:.3g} tolerances at most ({r.number}), under {SEES:g}: choose a value the verdict can see, "
                "or declare it in `cannot_see` with why"
            )
        if r.sees and r.change.name in declared:
            lines.append(
                f"{scenario.name}: cannot_see declares {r.change.name}, but it moves {r.number} by {r.units:.3g} "
                "tolerances: remove the declaration"
            )
    names = {r.change.name for r in reaches}
    lines += [
        f"{scenario.name}: cannot_see declares {name}, which is no change this scenario's check makes"
        for name in declared
        if name not in names
    ]
    return lines
