"""A cell's reuse_key: one digest of everything its record depends on (plan/reuse.py's docstring lists it), which
records/store.py stamps on every record a command writes and plan/reuse.py looks an earlier record up by.

Invocation is what every record of one command shares."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from harness.paths import ROOT
from harness.records.measures import ArmPatch
from harness.records.results import VerlTree

# What the harness runs a cell from, besides the scenario and the arm (which the key names on their own).
SOURCE_DIRS = ("harness", "models")


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


@dataclass(frozen=True)
class Invocation:
    """What every record of one command shares (records/store.py invocation_info); a Ray node's records replace
    the host and versions with the node's and have no inputs digest (run/ray_executor.py)."""

    host: str
    inputs_sha256: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    harness_commit: str | None = None
    command: str = ""
    started: float = 0.0  # time.time() at its start
    verl_tree: VerlTree | None = None  # the verl source tree it runs on; None: the installed verl


def key_for(
    scenario_spec: dict, device: str | None, arm_name: str, patches: list[ArmPatch], invocation: Invocation
) -> str | None:
    """The reuse_key of a cell of this invocation: one digest of everything its record depends on (this module's
    docstring); patches: the arm's fingerprint's. None where the invocation has no inputs digest (a Ray node's
    record) or the cell no planned device."""
    from harness.records.results import SCHEMA_VERSION

    if not invocation.inputs_sha256 or not device:
        return None
    parts = {
        "inputs": invocation.inputs_sha256,
        "scenario": scenario_spec,
        "device": device,
        "arm": arm_name,
        "patches": [p.sha256 for p in patches],
        "host": invocation.host,
        "schema": SCHEMA_VERSION,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
