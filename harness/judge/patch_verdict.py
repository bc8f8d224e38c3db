"""verify's verdict on one patch: does it break, or leave broken, what it is judged on?

A scenario where upstream verl fails for a defect the patch does not touch (an upstream entry of
scenarios/expectations.yaml with `known_defect`) is not counted against a patch that fails there exactly as
upstream does: same outcome, and the same root-cause error or the same failing gradients. Upstream's outcome is
taken from its arm when it ran beside the patch (and only when that run is itself as expected), else from its
expectation (--alone). A patch that changes such an outcome, for better or worse, is reported as a change.
Head memory is compared with the bound of verl's fused head, one chunk of tokens (judge/head_memory.py): known
without running upstream, so the flag is the same with and without --alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.inputs.expectations import Expectation, drift
from harness.judge.head_memory import fused_head_chunk, head_memory_flag
from harness.records.results import Record

FAILING = ("error", "mismatch", "hang")


@dataclass
class PatchVerdict:
    arm: str
    ran: list = field(default_factory=list)  # the arm's records that ran (not skipped)
    failing: list = field(default_factory=list)  # (record, note): counted against the patch
    as_upstream: list = field(default_factory=list)  # (record, known defect, against what): not counted
    changes: list = field(default_factory=list)  # (record, text): a known upstream defect's outcome changed
    memory: list = field(default_factory=list)  # (record, text): more logits rows than the fused head's chunk
    memory_basis: str = ""  # what head memory was compared with, or why it was not

    @property
    def exit_code(self) -> int:
        return 1 if self.failing or not self.ran else 0


def _root(record: Record) -> tuple:
    err = record.error
    if err is None:
        return (None, None, None)
    root = err.root_cause
    return (err.type, (root.type if root else None) or err.type, (root.message if root else None) or err.message)


def _failing_params(record: Record) -> list[str]:
    return record.parity.failing_params() if record.parity else []


def fails_as(record: Record, upstream: Record) -> bool:
    """Same failing outcome, and the same root-cause error (error, hang) or failing gradients (mismatch)."""
    if record.outcome not in FAILING or record.outcome != upstream.outcome:
        return False
    if record.outcome == "mismatch":
        return _failing_params(record) == _failing_params(upstream) and bool(_failing_params(record))
    return _root(record) == _root(upstream)


def judge_patch(arm: str, records: list[Record], expected: dict[str, dict[str, Expectation]]) -> PatchVerdict:
    verdict = PatchVerdict(arm)
    upstream_runs = {r.scenario: r for r in records if r.arm == "upstream"}
    chunk = fused_head_chunk()
    verdict.memory_basis = (
        f"verl's fused head builds at most {chunk[0]} tokens x vocab at once: {chunk[1]}"
        if chunk
        else "not compared: verl's fused head chunk size was not found in the installed verl"
    )
    for record in records:
        if record.arm != arm or record.outcome == "skipped":
            continue
        verdict.ran.append(record)
        scenario = record.scenario
        upstream = upstream_runs.get(scenario)
        flag = head_memory_flag(record)
        if flag:
            verdict.memory.append((record, flag))
        entry = (expected.get(scenario) or {}).get("upstream")
        known = entry.known_defect if entry is not None and arm != "upstream" else None
        if known and upstream is not None and drift(upstream, entry):
            known = None  # upstream did not fail here as its expectation says: nothing known to compare with
        failed = record.outcome in FAILING
        if not known:
            if failed:
                verdict.failing.append((record, ""))
            continue
        if upstream is not None:
            same = fails_as(record, upstream)
            against = (
                f"upstream's arm, its record reused from {upstream.reused_from} (the same inputs)"
                if upstream.reused_from
                else "upstream's arm, run beside it"
            )
        else:
            same = failed and not drift(record, entry)
            against = "upstream's expected outcome in scenarios/expectations.yaml (upstream not run: --alone)"
        if same:
            verdict.as_upstream.append((record, known, against))
        elif failed:
            verdict.failing.append(
                (
                    record,
                    f"upstream fails here for a known defect ({known}); this patch fails "
                    "otherwise: a change for the worse",
                )
            )
        else:
            verdict.changes.append((record, f"upstream: {entry.outcome} ({known}); {arm}: {record.outcome}"))
    return verdict
