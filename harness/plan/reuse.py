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
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.records.history import ResultsText, history
from harness.records.reuse_key import SOURCE_DIRS, inputs_sha256, key_for

__all__ = ["SOURCE_DIRS", "earlier_records", "inputs_sha256", "key_for", "reusable"]

# Commands whose records may be reused; pytest's are left out (a test may inject a fault through its environment).
REUSED_FROM_COMMANDS = ("repro", "verify", "run", "matrix")
# Errors of the run, not of the code under test, never reused: the driver's (judge/verdict.py) and torch's for a
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


def earlier_records(keys: set[str], directory: Path | None = None) -> dict[str, tuple[dict, str]]:
    """reuse_key -> (the newest reusable record with that key, as JSON; its FILE:N), for the keys found in the
    results history (records/history.py), newest file first. A file's keys are found with one pattern search before
    any line is parsed, and no older file is read once every key is found."""
    found: dict[str, tuple[dict, str]] = {}
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
            for _, data in ResultsText(text.path, line).records():  # none for a line cut short by a kill
                if reusable(data):
                    found[match.group(1)] = (data, text.where(number))
    return found
