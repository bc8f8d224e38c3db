"""What a patch changes against its base: per scenario, the patch's record beside the base's (upstream: the verl the
command runs on, run beside it), in one of six classes (docs/PR.md): new, fixed, same as the base, not judged here
(cannot run here: a package), unchanged, no base.

The classes:

- new: the patch fails where the base passes, or fails otherwise (another outcome, another root error, other failing
  parameters or another cause): the patch's own effect, the only class that counts against it in a pull request's
  verdict;
- fixed: the base fails, the patch passes;
- same: both fail alike: the base's failure, which the patch leaves as it is (#6659's unreduced lm_head on verl's
  history; a `known_defect` of scenarios/expectations.yaml is one of these);
- not judged: the cell cannot run in this environment: the base stops on an import (an optional GPU package such as
  flash_attn, or any import outside what the patch changes), or the patch's arm stops on importing an optional GPU
  package (records/known_failures.py OPTIONAL_GPU_PACKAGES): "cannot run here: <package>", never the patch's failure;
- unchanged: both pass;
- no base: nothing of the base beside it (verify --alone, or its cell was skipped).

judge_change/patch_verdict.py keeps the list on its verdict; render/differential.py writes the lines and the comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.records.failure_signature import FailureSignature
from harness.records.known_failures import OPTIONAL_GPU_PACKAGES
from harness.records.record_cause import cause_of
from harness.records.results import FAILING_OUTCOMES, IMPORT_ERRORS, ChangeKind, Record

FAILING = FAILING_OUTCOMES

# The kinds by their short names (judge_change/patch_verdict.py reads them so).
NEW, FIXED, SAME, NOT_JUDGED, UNCHANGED, NO_BASE = ChangeKind


@dataclass
class Change:
    """One scenario: the patch's record against the base's, its class and, in words, how they differ (new), what
    stops the cell here (not judged: `blocked`, the package or import)."""

    scenario: str
    kind: ChangeKind
    patch: Record
    base: Record | None
    how: str = ""
    blocked: str | None = None


def fails_as(record: Record, base: Record) -> bool:
    """Both fail alike (records/failure_signature.py same_failure): the same failing outcome and root-cause error
    (error, hang), or the same failing parameters and cause (mismatch: which gradients, and what is wrong with them:
    unreduced is not x W)."""
    return FailureSignature.of(record).same_failure(FailureSignature.of(base))


def how_it_differs(record: Record, base: Record) -> str:
    """Why a failing record is not the base's failure, in words: the first of outcome, root error, failing
    parameters, cause that differs."""
    if base.outcome == "pass":
        return "the base passes"
    if record.outcome != base.outcome:
        return f"another outcome (the base: {base.outcome})"
    mine_signature, base_signature = FailureSignature.of(record), FailureSignature.of(base)
    if record.outcome != "mismatch" and not mine_signature.same_failure(base_signature):
        root_type, message = base_signature.root_type, base_signature.root_message
        return f"another error (the base: {root_type or 'none'}: {(message or '')[:80]})"
    mine, theirs = list(mine_signature.parameters), list(base_signature.parameters)
    if mine != theirs:
        added, gone = sorted(set(mine) - set(theirs)), sorted(set(theirs) - set(mine))
        parts = ([f"also {', '.join(added[:3])}"] if added else []) + ([f"not {', '.join(gone[:3])}"] if gone else [])
        return f"other failing parameters ({'; '.join(parts)})"
    return f"another cause (the base: {cause_of(base).words or cause_of(base).subject})"


def import_blocker(record: Record) -> str | None:
    """The module a record's error stops on importing, as "<package>" (No module named ...) or "<module> (cannot
    import name X)"; None for any other record."""
    err = record.verdict.error
    if record.outcome != "error" or err is None:
        return None
    kind, message = err.root_type(), err.root_message() or ""
    if kind not in IMPORT_ERRORS:
        return None
    missing = re.search(r"No module named '([^']+)'", message)
    if missing:
        return missing.group(1).split(".")[0]
    name = re.search(r"cannot import name '([^']+)' from '([^']+)'", message)
    if name:
        return f"{name.group(2)} (cannot import name {name.group(1)})"
    return message.split("\n")[0][:80] or kind


def cannot_run_here(record: Record, *, base: bool) -> str | None:
    """What stops a cell in this environment: for the base, any import it fails on (nothing of the patch is in it);
    for the patch's arm, only an optional GPU package (any other import it fails on is the patch's to answer)."""
    blocker = import_blocker(record)
    if blocker is None:
        return None
    if base or blocker in OPTIONAL_GPU_PACKAGES:
        return blocker
    return None


def change_against(record: Record, base: Record | None) -> Change:
    """The patch's record of one scenario against its base's record (None: no base beside it)."""
    scenario = record.scenario
    if base is None or base.outcome == "skipped":
        return Change(scenario, NO_BASE, record, None)
    base_blocked = cannot_run_here(base, base=True)
    if base_blocked:
        if record.outcome == "pass":
            return Change(scenario, FIXED, record, base, how=f"runs where its base cannot: {base_blocked}")
        # the patch's arm failing otherwise is said, never counted: nothing of the base ran to compare it with
        other = (
            ""
            if import_blocker(record) == base_blocked
            else f"the patch's arm: {record.outcome}, the base's did not run"
        )
        return Change(scenario, NOT_JUDGED, record, base, how=other, blocked=base_blocked)
    mine_blocked = cannot_run_here(record, base=False)
    if mine_blocked:
        return Change(scenario, NOT_JUDGED, record, base, how=f"the base: {base.outcome}", blocked=mine_blocked)
    failed, base_failed = record.outcome in FAILING, base.outcome in FAILING
    if not failed:
        return Change(scenario, FIXED if base_failed else UNCHANGED, record, base)
    if base_failed and fails_as(record, base):
        return Change(scenario, SAME, record, base)
    return Change(scenario, NEW, record, base, how=how_it_differs(record, base))


def against_base(arm: str, records: list[Record], base_arm: str = "upstream") -> list[Change]:
    """Every scenario the arm ran (not skipped), against the base's record of it, in the records' order."""
    bases = {r.scenario: r for r in records if r.arm == base_arm}
    return [change_against(r, bases.get(r.scenario)) for r in records if r.arm == arm and r.outcome != "skipped"]
