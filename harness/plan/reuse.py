"""A baseline cell's record reused from an earlier command on this host, when everything it was run from is the same.

`verify PATCH=b.diff` after `verify PATCH=a.diff` ran the none and upstream arms of every scenario again: 60 of its
90 cells, the same cells with the same inputs, for the same outcome and numbers. A cell's inputs are reduced to one
digest, its `reuse_key`, which every record written by a command carries:

- the scenario as it runs (the whole spec, seed included) and the device it was planned on;
- the arm: its name and the sha256 of each diff it applies;
- this checkout's harness code and tiny model configs (harness/, models/: their bytes, not the commit, so an edit
  not yet committed counts);
- the environment: the Python version, every installed distribution's name and version, and the installed verl's
  files (path, size, mtime: an edit of site-packages' verl in place counts);
- the host (its CPU and cores, as records name it) and the schema the record is written in.

Only `verify` reuses, and only the arms beside the patch (none, upstream); the patch under test always runs. A
record is reused when it was written by a command (not a test, which may set a fault up in ways the key does not
see) and its outcome is one the code gave (pass, mismatch, an error a rank raised): a hang, a timeout or a rank
killed by the host is a fact about that run, not about the cell. The reused record is appended to the new results
file as it was, with `reused_from` naming its line. `verify --fresh` runs every cell.

Only records this checkout's driver wrote are reused: each line carries an HMAC made with the driver's secret key
(records/signing.py). A line whose MAC does not verify (written into results/ by a pull request's code, or edited
since) and a line with none (from before records were signed) are never reused, and the command says so once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.records.history import history
from harness.records.reuse_key import SOURCE_DIRS, inputs_sha256, key_for
from harness.records.signing import MAC_FIELD, record_state

__all__ = ["SOURCE_DIRS", "Earlier", "earlier_records", "inputs_sha256", "key_for", "reusable"]

# Commands whose records may be reused; pytest's are left out (a test may inject a fault through its environment).
REUSED_FROM_COMMANDS = ("repro", "verify", "run", "matrix")
# Errors of the run, not of the code under test, never reused: the driver's (judge_cell/verdict.py) and torch's for a
# collective's or the rendezvous store's transport (a peer gone, a timeout).
RUN_ERRORS = ("Timeout", "RankKilled", "RankLost", "DistBackendError", "DistNetworkError", "DistStoreError")

_KEY_IN_LINE = re.compile(r'"reuse_key": "([0-9a-f]{64})"')


def reusable(data: dict) -> bool:
    """A record (as JSON, of any schema) another command may stand on: written by a command, with an outcome of the
    code."""
    from harness.records.record_head import record_head
    from harness.records.results import nested_shape

    head = record_head(nested_shape(data))
    if head is None or head.stamp.command not in REUSED_FROM_COMMANDS or head.stamp.reused_from:
        return False
    if head.outcome in ("pass", "mismatch"):
        return True
    error = head.verdict.error
    return head.outcome == "error" and (error.type if error else None) not in RUN_ERRORS


@dataclass
class Earlier:
    """What the history holds for the keys looked for: reuse_key -> (the newest reusable record with that key that
    this driver wrote, as JSON without its MAC; its FILE:N), and how many records with a key looked for were passed
    over for their MAC: forged (one that does not verify) and unsigned (none)."""

    found: dict[str, tuple[dict, str]] = field(default_factory=dict)
    forged: int = 0
    unsigned: int = 0

    def notes(self) -> list[str]:
        """The lines a command says once about the records it would not reuse for their MAC."""
        out = []
        if self.forged:
            out.append(f"{self.forged} record(s) in results/ not written by this harness: ignored for reuse")
        if self.unsigned:
            out.append(
                f"{self.unsigned} record(s) in results/ without a MAC (written before records were signed, or not by "
                "this harness): read by reports, not reused"
            )
        return out


def earlier_records(keys: set[str], directory: Path | None = None) -> Earlier:
    """The newest reusable record the driver wrote for each key found in the results history (records/history.py),
    newest file first. A file's keys are found with one pattern search before any line is parsed, and no older file
    is read once every key is found."""
    earlier = Earlier()
    found = earlier.found
    for text in history(directory):
        if keys <= found.keys():
            break
        wanted = (set(_KEY_IN_LINE.findall(text.text)) & keys) - found.keys()
        if not wanted:
            continue
        for number, line in text.lines(newest_first=True):
            match = _KEY_IN_LINE.search(line)
            if not match or match.group(1) not in wanted or match.group(1) in found:
                continue
            data = _driver_written(line, earlier)
            if data is not None and reusable(data):
                found[match.group(1)] = (data, text.where(number))
    return earlier


def _driver_written(line: str, earlier: Earlier) -> dict | None:
    """The line's record (nested shape, its MAC left out) where its MAC verifies; None otherwise (counted in
    earlier), and for a line cut short by a kill."""
    from harness.records.results import nested_shape

    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    state = record_state(data)
    if state != "signed":
        earlier.forged += state == "forged"
        earlier.unsigned += state == "unsigned"
        return None
    return nested_shape({k: v for k, v in data.items() if k != MAC_FIELD})
