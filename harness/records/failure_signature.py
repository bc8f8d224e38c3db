"""One reading of "the same failure": a record's failure signature, and the named comparisons each command makes of
two of them (docs/PR.md "Which command compares what").

The signature holds everything a failure is told apart by: the outcome; for an error or a hang, the outer error's
type, the root cause's type and its message without this host's paths and addresses (the patch's copy of verl lives
elsewhere than the base's, so the same error names another file); for a mismatch, the failing parameters and the
cause's key (which gradients, and what is wrong with them: unreduced is not x W). Each comparison says which of
those it reads:

- same_failure (`pr`, `verify --differential`: judge_change/base_change.py): all that the outcome has;
- same_ignoring_message (`bisect`: plan/bisect_search.py): the outcome, root type and failing parameters: a number
  or a message that moves within the same failure is not the change bisect looks for;
- same_outcome (`verify`'s recipe lines: judge_change/recipe_verdict.py; `rerun`: commands/rerun.py): the outcome alone.

`verify --alone` compares a record with its expectation, not with another record (inputs/expectations.py drift):
outcome, error class or words, failing gradients (the signature's parameters), failure words.

The signature is FailureSignature.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from harness.records.record_cause import cause_of
from harness.records.results import FAILING_OUTCOMES, Record

PARAMETERS_SHOWN = 3  # the failing parameters a signature names in a line; all of them: the record


def portable(text: str | None) -> str | None:
    """A message without this host's paths to verl (kept from verl/ on) and without addresses."""
    if text is None:
        return None
    text = re.sub(r"(?:/[^\s'\"():,]+)*/(verl/)", r"\1", text)
    return re.sub(r"0x[0-9a-fA-F]+", "0x…", text)


def failing_parameters(record: Record) -> tuple[str, ...]:
    """The parameters a record fails on: those whose gradient is over tolerance or missing where the record compared
    gradients (parity), else those its cause names (an update's parameter, an error's object)."""
    parity = record.measures.parity
    if parity is not None:
        return tuple(parity.failing_params())
    cause = record.verdict.cause
    return tuple(sorted(cause.parameters)) if cause is not None else ()


@dataclass(frozen=True)
class FailureSignature:
    """What a failure is told apart by (the module's docstring); `pass` and `skipped` have the outcome alone. The
    first three fields are bisect's (same_ignoring_message), in the order `harness bisect` shows them."""

    outcome: str
    root_type: str | None = None
    parameters: tuple[str, ...] = ()
    root_message: str | None = None
    error_type: str | None = None
    cause: tuple | None = None  # the cause's key (records/results.py Failure.key) of a mismatch

    @classmethod
    def of(cls, record: Record) -> FailureSignature:
        err = record.verdict.error
        if record.outcome not in FAILING_OUTCOMES:
            return cls(record.outcome)
        if record.outcome == "mismatch":
            return cls(record.outcome, parameters=failing_parameters(record), cause=tuple(cause_of(record).key()))
        return cls(
            record.outcome,
            root_type=err.root_type() if err else None,
            parameters=failing_parameters(record),
            root_message=portable(err.root_message()) if err else None,
            error_type=err.type if err else None,
        )

    @property
    def failing(self) -> bool:
        return self.outcome in FAILING_OUTCOMES

    def same_outcome(self, other: FailureSignature) -> bool:
        """The outcome alone (the recipe lines, rerun)."""
        return self.outcome == other.outcome

    def same_failure(self, other: FailureSignature) -> bool:
        """Both fail, alike: the same outcome; for a mismatch the same failing parameters and cause; for an error or a
        hang the same outer and root error types and root message (without paths). The failing parameters of an
        error are not compared: what it names of them is in its message."""
        if not (self.failing and self.same_outcome(other)):
            return False
        if self.outcome == "mismatch":
            return (self.parameters, self.cause) == (other.parameters, other.cause)
        return (self.error_type, self.root_type, self.root_message) == (
            other.error_type,
            other.root_type,
            other.root_message,
        )

    def ignoring_message(self) -> FailureSignature:
        """The outcome, root type and failing parameters alone: what bisect keeps of a cell."""
        return replace(self, root_message=None, error_type=None, cause=None)

    def same_ignoring_message(self, other: FailureSignature) -> bool:
        """The same outcome, root error type and failing parameters, whatever the message, the outer error and the
        cause say (bisect): a message that names another line, or a number that moves, is the same outcome."""
        return self.ignoring_message() == other.ignoring_message()

    def words(self, shown: int = PARAMETERS_SHOWN) -> str:
        """'error (RuntimeError; lm_head.weight)', 'mismatch (lm_head.weight)', 'pass'; at most `shown` parameters
        named, then how many more."""
        names = ", ".join(self.parameters[:shown])
        if len(self.parameters) > shown:
            names += f", +{len(self.parameters) - shown} more"
        detail = "; ".join(part for part in (self.root_type, names) if part)
        return f"{self.outcome} ({detail})" if detail else self.outcome
