"""A failing record's cause as data (Failure): the one its verdict holds (judge_cell/verdict.py sets it), or for a
record from before the field, its why as a cause of its own. What verify groups a patch's failures by
(judge_change/patch_verdict.py) and the pictures number them by (render/pictures.py), by the cause's key (Failure.key:
kind, what a gradient is of, subject); render/cause_words.py writes a group's words. It reads the record alone, so every
room may call it."""

from __future__ import annotations

from harness.records.results import Failure, Record


def cause_of(record: Record) -> Failure:
    """The failure that explains a failing record's others (verdict.cause); a record without one (written before
    the field, or a head bench's) is a cause of its own: its why, else its error, first failure or outcome."""
    if record.verdict.cause is not None:
        return record.verdict.cause
    why = record.verdict.why or ""
    if not why and record.verdict.error:
        why = f"{record.verdict.error.type}: {record.verdict.error.message}"
    if not why:
        why = record.verdict.failures[0].words if record.verdict.failures else record.outcome
    return Failure.of_words(why)
