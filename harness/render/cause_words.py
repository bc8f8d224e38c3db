"""A cause's words (records/results.py Failure): what verify's closing block and the pictures' legend say of a
group of failing cells that share one cause. Written here from the causes' kind, subject and parameters, never
parsed from a why, and the same for every cell of the group whatever its world size, step or numbers. verify
groups by the causes' key (judge_change/patch_verdict.py failures_by_cause), so rewording here changes no grouping.

Per failure kind; an error's words are its error class's (records/error_classes.py)."""

from __future__ import annotations

from harness.records.error_classes import class_named
from harness.records.results import Failure, FailureKind, GradientOf

CAUSE_CHARS = 140  # a cause in verify's closing block, one line

# A one-step gradient's class (judge_cell/cell_cause.py gradient_class: the alternative it matches, the factor of its
# k).
GRADIENT_WORDS = {
    "reference x W": "the sum over ranks instead of the mean (x W)",
    "reference x 1/W": "divided by the world size once too often (x 1/W)",
    "reference x -1": "the right gradient with the wrong sign",
    "reference x k": "the right gradient times a constant",
    "reference": "the right gradient",
    "unreduced": "this rank's gradient only, not reduced across ranks",
    "unreduced x 1/W": "this rank's gradient only, divided by W: not reduced across ranks",
    "zero": "no gradient at all",
    "entropy_sign": "the entropy bonus with the wrong sign",
    "even_cut": "the right gradient on rows cut as if FSDP2's shards were equal",
    "kl_sign": "the KL loss with the wrong sign",
    "rank_token_mean": "each rank's own token-mean averaged over ranks, not the mean over the global token count",
    "agg:seq-mean-token-sum-norm/micro-batch width": "seq-mean-token-sum-norm divided by each micro-batch's own "
    "longest response, not the global batch's",
}
# What the log-probs' diagnosis found (judge_cell/cell_cause.py _log_probs_class); an alternative's name is said as is.
LOG_PROBS_WORDS = {
    "skipped rows": "wrong: rows the head skipped (exactly zero where the oracle's are not)",
    "sp-shard-end": "wrong at the last position of each SP shard only, as when labels are rolled within the shard",
    "sp-whole-shards": "wrong throughout some SP shards: their positions scored against labels not theirs",
    "sp positions": "wrong at some positions of the SP shards",
    "some samples": "wrong in some samples",
    "some samples, the shorter ones": "wrong in some samples: exactly the responses shorter than the batch's longest",
}


def _names(names: list[str]) -> str:
    return ", ".join(names[:2]) + ("…" if len(names) > 2 else "")


def _error(cause: Failure, names: list[str]) -> str:
    """An error's class in the table's words (records/error_classes.py), with what it concerns; a known failure by
    its public reference and class; an error of no class by its subject (no known pattern and its type)."""
    if cause.known_issue:
        return f"{cause.known_issue} ({cause.subject})"
    found = class_named(cause.subject)
    return found.said(_names(names)) if found else cause.subject or "an error"


def _gradient(cause: Failure, names: list[str]) -> str:
    """A gradient's words by what it is the gradient of: a one-step cell's class, an update's parameters before the
    clip, the lm_head unit's parameter."""
    if cause.gradient_of == GradientOf.UPDATE:
        return f"{_names(names)}'s gradient wrong before the clip"
    if cause.gradient_of == GradientOf.HEAD_UNIT:
        return f"the lm_head unit's {cause.subject} gradient wrong"
    who = f"grad {names[0]}" if len(names) == 1 else f"grads of {_names(names)}"
    return f"{who}: {GRADIENT_WORDS.get(cause.subject, cause.subject)}"


def _metric(cause: Failure, names: list[str]) -> str:
    return f"verl's {cause.subject} wrong"


# The words of each kind of cause: (the group's first cause, the parameters every cause of the group names).
KIND_WORDS = {
    FailureKind.ERROR: _error,
    FailureKind.GRADIENT: _gradient,
    FailureKind.HANG: lambda c, n: "a hang: no result before the timeout",
    FailureKind.LOG_PROBS: lambda c, n: (
        f"log-probs {LOG_PROBS_WORDS.get(c.subject, c.subject)}" if c.subject else "log-probs wrong"
    ),
    FailureKind.MISMATCH: lambda c, n: f"a mismatch: {c.subject}",
    FailureKind.RESIDENCY: lambda c, n: f"FSDP unit {c.subject} left unsharded after the step",
    # an update's first wrong number in causal order (judge_cell/update_why.py)
    FailureKind.METRIC: _metric,
    FailureKind.UPDATE: lambda c, n: f"update {c.subject} off",
    FailureKind.WEIGHTS: lambda c, n: f"weights {c.subject} off",
    FailureKind.ENTROPY: lambda c, n: "entropy wrong",
    FailureKind.REFERENCE_LOG_PROBS: lambda c, n: "reference log-probs (verl's ref engine) wrong",
    FailureKind.OPTIMIZER_STEPS: lambda c, n: f"optimizer steps not taken ({c.subject})",
    FailureKind.MICRO_BATCHES: lambda c, n: "verl's micro-batches not the oracle's plan",
    FailureKind.SETTING: lambda c, n: f"{c.subject} did not take effect",
    FailureKind.LOSS_SLIP: lambda c, n: f"verl's loss computed with {c.subject}",
    # a record from before causes were kept: its why
    FailureKind.WHY: lambda c, n: c.subject,
}


def cause_words(causes: list[Failure]) -> str:
    """The words of a group of causes of one key: the first one's kind and subject, and every parameter any of them
    names; one line."""
    first = causes[0]
    names = list(dict.fromkeys(n for c in causes for n in c.parameters))
    words = KIND_WORDS[first.kind](first, names) or first.kind
    return words if len(words) <= CAUSE_CHARS else words[: CAUSE_CHARS - 1] + "…"


def grouped(items: list, cause_of) -> list[tuple[str, list]]:
    """items grouped by their cause's key (cause_of: item -> Failure), each group with its words, in the order the
    groups first appear."""
    groups: dict[tuple, list] = {}
    for item in items:
        groups.setdefault(cause_of(item).key(), []).append(item)
    return [(cause_words([cause_of(i) for i in group]), group) for group in groups.values()]
