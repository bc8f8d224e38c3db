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

import functools
import hashlib
import json
import os
import re
import sys
from importlib import metadata
from pathlib import Path

from harness.paths import RESULTS_DIR, ROOT, shown_path

# What the harness runs a cell from, besides the scenario and the arm (which the key names on their own).
SOURCE_DIRS = ("harness", "models")
# Commands whose records may be reused; pytest's are left out (a test may inject a fault through its environment).
REUSED_FROM_COMMANDS = ("repro", "verify", "run", "matrix")
# Errors of the run, not of the code under test, never reused: the driver's (judge/verdict.py) and torch's for a
# collective's or the rendezvous store's transport (a peer gone, a timeout).
RUN_ERRORS = ("Timeout", "RankKilled", "RankLost", "DistBackendError", "DistNetworkError", "DistStoreError")

_KEY_IN_LINE = re.compile(r'"reuse_key": "([0-9a-f]{64})"')


@functools.lru_cache(maxsize=1)
def inputs_sha256() -> str:
    """The digest of this checkout's harness code and of the environment it runs in (the parts of a cell's inputs
    that are the same for every cell of a command), computed once per process."""
    digest = hashlib.sha256()
    for top in SOURCE_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(f"{path.relative_to(ROOT)}\0".encode())
                digest.update(path.read_bytes())
    digest.update(sys.version.encode())
    digest.update("\n".join(_installed_distributions()).encode())
    digest.update(_installed_verl_files().encode())
    return digest.hexdigest()


def _installed_distributions() -> list[str]:
    """Each installed distribution as its metadata directory names it (name-version.dist-info), on the path this
    interpreter imports from: the names alone, not each METADATA file read (0.18 s for 142 of them)."""
    names = set()
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            names.update(n for n in os.listdir(entry) if n.endswith((".dist-info", ".egg-info")))
    return sorted(names)


def _installed_verl_files() -> str:
    """Path, size and mtime of each file of the verl that `import verl` finds outside an arm (site-packages)."""
    try:
        files = metadata.files("verl") or []
    except metadata.PackageNotFoundError:
        return "no verl"
    lines = []
    for f in files:
        path = Path(f.locate())
        try:
            st = path.stat()
        except OSError:
            lines.append(f"{f} missing")
            continue
        lines.append(f"{f} {st.st_size} {st.st_mtime_ns}")
    return "\n".join(sorted(lines))


def key_for(scenario_spec: dict, device: str | None, arm_name: str, patches: list, invocation: dict) -> str | None:
    """The reuse_key of a cell of this invocation: one digest of everything its record depends on (this module's
    docstring); patches: the arm's fingerprint's. None where the invocation has no inputs digest (a Ray node's
    record) or the cell no planned device."""
    from harness.records.results import SCHEMA_VERSION

    if not invocation.get("inputs_sha256") or not device:
        return None
    parts = {
        "inputs": invocation["inputs_sha256"],
        "scenario": scenario_spec,
        "device": device,
        "arm": arm_name,
        "patches": [p["sha256"] for p in patches],
        "host": invocation["host"],
        "schema": SCHEMA_VERSION,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def reusable(data: dict) -> bool:
    """A record (as JSON, of any schema) another command may stand on: written by a command, with an outcome of the
    code."""
    from harness.records.results import nested_shape

    data = nested_shape(data)
    stamp = data.get("stamp") or {}
    if stamp.get("command") not in REUSED_FROM_COMMANDS or stamp.get("reused_from"):
        return False
    outcome = data.get("outcome")
    if outcome in ("pass", "mismatch"):
        return True
    error = (data.get("verdict") or {}).get("error") or {}
    return outcome == "error" and error.get("type") not in RUN_ERRORS


def earlier_records(keys: set[str], directory: Path | None = None) -> dict[str, tuple[dict, str]]:
    """reuse_key -> (the newest reusable record with that key, as JSON; its FILE:N), for the keys found in the
    results files, newest file first. A file's keys are found with one pattern search before any line is parsed,
    and no older file is read once every key is found."""
    found: dict[str, tuple[dict, str]] = {}
    for path in sorted(Path(directory or RESULTS_DIR).glob("*.jsonl"), reverse=True):
        if keys <= found.keys():
            break
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        wanted = (set(_KEY_IN_LINE.findall(text)) & keys) - found.keys()
        if not wanted:
            continue
        for number, line in reversed(list(enumerate(text.splitlines(), start=1))):
            match = _KEY_IN_LINE.search(line)
            if not match or match.group(1) not in wanted or match.group(1) in found:
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a kill
                continue
            if isinstance(data, dict) and reusable(data):
                found[match.group(1)] = (data, f"{shown_path(path)}:{number}")
    return found
