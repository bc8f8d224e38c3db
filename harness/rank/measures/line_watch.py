"""Which of the patch's lines this rank ran, and which ways out of its branches it took: the lines plan/patch_lines.py
wrote beside the arm's copy of verl (patch_lines.json) and the branching statements plan/changed_code.py wrote
(patch_arcs.json), measured by coverage.py (its C tracer, branch=True: arcs) with `include=` the patched files only
and no data file.

The measurement starts at the import of the first patched module (none of its functions can run before; at once
where one is imported already), so the rank's own work before it (the oracle, the model's build) runs untraced; the
watch is made before verl is imported. coverage.py traces the threads Python starts after it; code that runs on
threads Python did not start (CUDA's autograd threads) is not seen. What dynamo compiled (torch.compile) runs as
its graph: the lines it traced run once, while it traces, and are seen then.

A measurement never changes an outcome: where coverage.py cannot start, stop or say what ran, the rank's work goes
on as it would have and the rank's result says the lines were not measured (`failed`), never an error of the cell.

What the rank keeps: patch_lines_run and patch_arcs_run; a measurement that failed says so in patch_lines_unseen.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

PATCH_LINES_FILE = "patch_lines.json"  # plan/patch_lines.py PATCH_LINES_FILE (the rank imports nothing of plan/)
PATCH_ARCS_FILE = "patch_arcs.json"  # plan/changed_code.py PATCH_ARCS_FILE


class PatchLineWatch:
    """Made before verl is imported; `stop()`: {"verl/...": the watched lines that ran, sorted}, or None where the
    measurement failed (`failed` says why)."""

    def __init__(self, watched: dict[str, list[int]], root: Path, arcs_from: dict[str, list[int]] | None = None):
        # The arm's copy is imported from this root: its modules' co_filename are these paths.
        self._files = {rel: os.path.realpath(root / rel) for rel in watched}
        self._lines = {rel: frozenset(lines) for rel, lines in watched.items()}
        # The raw lines whose outgoing arcs are kept (the branching statements of the changed code), per file.
        self._arcs_from = {rel: frozenset(lines) for rel, lines in (arcs_from or {}).items() if rel in self._files}
        self.arcs: dict[str, list[tuple[int, int]]] | None = None  # after stop(): the kept arcs taken, per file
        self._coverage = None
        self._on_import = None  # the finder that starts the measurement, until it has
        self.failed: str | None = None  # why the lines were not measured

    @classmethod
    def for_arm(cls) -> PatchLineWatch | None:
        """The watch for the arm `import verl` finds, None where it has no patch_lines.json (upstream)."""
        spec = importlib.util.find_spec("verl")
        if spec is None or not spec.submodule_search_locations:
            return None
        root = Path(next(iter(spec.submodule_search_locations))).parent
        listing = root / PATCH_LINES_FILE
        if not listing.is_file():
            return None
        arcs = root / PATCH_ARCS_FILE
        return cls(json.loads(listing.read_text()), root, json.loads(arcs.read_text()) if arcs.is_file() else None)

    def start(self) -> PatchLineWatch:
        """Measure from the import of the first patched module on; nothing to watch (a patch of imports only): no
        measurement at all."""
        if not any(self._lines.values()):
            return self
        try:
            from coverage import Coverage

            # config_file=False: no .coveragerc or [tool.coverage] of whatever directory the rank runs in.
            self._coverage = Coverage(
                data_file=None, include=sorted(self._files.values()), config_file=False, branch=bool(self._arcs_from)
            )
            self._coverage.set_option(
                "run:disable_warnings", ["no-data-collected", "module-not-imported", "module-not-measured"]
            )
        except Exception as exc:  # noqa: BLE001 - a measurement that cannot start leaves the rank's work as it is
            return self._fail("start", exc)
        modules = {_module_name(rel) for rel in self._files}
        if modules & set(sys.modules):
            self._begin()
        else:
            self._on_import = _StartOnImport(modules, self._begin)
            sys.meta_path.insert(0, self._on_import)
        return self

    def _begin(self) -> None:
        try:
            self._coverage.start()
        except Exception as exc:  # noqa: BLE001
            self._fail("start", exc)

    def _fail(self, when: str, exc: BaseException) -> PatchLineWatch:
        self.failed = f"coverage.py failed to {when}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        self._coverage = None
        return self

    def stop(self) -> dict[str, list[int]] | None:
        if self._on_import in sys.meta_path:
            sys.meta_path.remove(self._on_import)
        if self.failed:
            return None
        if self._coverage is None:  # nothing to watch
            return {rel: [] for rel in self._files}
        try:
            self._coverage.stop()
            data = self._coverage.get_data()
            ran = {rel: sorted(set(data.lines(path) or ()) & self._lines[rel]) for rel, path in self._files.items()}
            if self._arcs_from:
                self.arcs = {
                    rel: sorted(a for a in data.arcs(self._files[rel]) or () if a[0] in lines)
                    for rel, lines in self._arcs_from.items()
                }
        except Exception as exc:  # noqa: BLE001
            self._fail("stop", exc)
            return None
        return ran


def _module_name(rel: str) -> str:
    """ "verl/a/b.py" -> "verl.a.b"; "verl/a/__init__.py" -> "verl.a"."""
    parts = rel.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class _StartOnImport:
    """A finder first on sys.meta_path that finds nothing: asked for one of `names`, it starts the measurement
    (the import then runs under it) and leaves the path."""

    def __init__(self, names: set[str], start):
        self._names, self._start = names, start

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self._names:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            self._start()
        return None
