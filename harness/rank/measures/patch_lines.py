"""Which of the patch's lines this rank ran: the lines plan/patch_lines.py wrote beside the arm's copy of verl
(patch_lines.json), watched with sys.settrace from the moment the first patched module is imported (none of its
functions can run before) until every watched line has run, or the rank's end.

The cost stays small because only the patched files are traced line by line: the global trace function answers
every other frame's call with None (no line events there), and a code object holding none of the watched lines,
or whose watched lines have all run, is answered the same. sys.settrace is per thread: threading.settrace covers
the Python threads started afterwards; code that runs on threads Python did not start (CUDA's autograd threads)
is not seen. A compiled region (torch.compile) runs its graph, not these lines: what dynamo traced is not seen
either.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from pathlib import Path

PATCH_LINES_FILE = "patch_lines.json"  # plan/patch_lines.py PATCH_LINES_FILE (the rank imports nothing of plan/)
_UNSEEN = object()  # a code object the watch has not looked at yet


class PatchLineWatch:
    """Started before verl is imported; `ran()`: {"verl/...": the watched lines that ran, sorted}."""

    def __init__(self, watched: dict[str, list[int]], root: Path):
        # The arm's copy is imported from this root: its modules' co_filename are these paths.
        self._wanted = {str(root / rel): (rel, frozenset(lines)) for rel, lines in watched.items()}
        self._hit: dict[str, set[int]] = {rel: set() for rel in watched}
        self._code_lines: dict[object, frozenset[int] | None] = {}  # code object -> its watched lines not yet run
        self._left = sum(len(lines) for _, lines in self._wanted.values())  # watched lines not yet run
        self._on_import = None  # the finder that starts the trace, until it has

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
        return cls(json.loads(listing.read_text()), root)

    def start(self) -> PatchLineWatch:
        """Trace from the import of the first patched module on (at once where one is imported already); nothing
        to watch (a patch of imports only): no trace function at all."""
        if not self._left:
            return self
        modules = {_module_name(rel) for rel, _ in self._wanted.values()}
        if modules & set(sys.modules):
            self._trace()
        else:
            self._on_import = _StartOnImport(modules, self._trace)
            sys.meta_path.insert(0, self._on_import)
        return self

    def stop(self) -> dict[str, list[int]]:
        sys.settrace(None)
        threading.settrace(None)
        if self._on_import in sys.meta_path:
            sys.meta_path.remove(self._on_import)
        return self.ran()

    def _trace(self) -> None:
        on_call = self._on_call  # bound once: the trace function is called for every frame
        sys.settrace(on_call)
        threading.settrace(on_call)

    def ran(self) -> dict[str, list[int]]:
        return {rel: sorted(lines) for rel, lines in self._hit.items()}

    def _pending(self, code) -> frozenset[int] | None:
        """The watched lines of this code object not yet run (None: nothing to watch in it)."""
        if code in self._code_lines:
            return self._code_lines[code]
        wanted = self._wanted.get(code.co_filename)
        pending = None
        if wanted is not None:
            rel, lines = wanted
            mine = {line for _, _, line in code.co_lines() if line is not None} | {code.co_firstlineno}
            pending = frozenset((mine & lines) - self._hit[rel]) or None
        self._code_lines[code] = pending
        return pending

    def _ran(self, hit: set[int], line: int) -> None:
        hit.add(line)
        self._left -= 1
        if not self._left:  # every watched line has run: the rest of the rank runs untraced, at full speed
            sys.settrace(None)
            threading.settrace(None)

    def _on_call(self, frame, event, arg):
        # Called for every Python frame the rank starts while the watch is on: the common answer (a code object
        # already looked at, nothing to watch in it) is one dict lookup.
        code = frame.f_code
        pending = self._code_lines.get(code, _UNSEEN)
        if pending is None:
            return None
        if pending is _UNSEEN:
            pending = self._pending(code)
            if pending is None:
                return None
        rel = self._wanted[code.co_filename][0]
        hit = self._hit[rel]
        if frame.f_lineno in pending and frame.f_lineno not in hit:  # the def line: a call runs it
            self._ran(hit, frame.f_lineno)

        def on_line(frame, event, arg):
            if event == "line" and frame.f_lineno in pending and frame.f_lineno not in hit:
                self._ran(hit, frame.f_lineno)
                if pending <= hit:  # everything watched here has run: later calls of it go untraced
                    self._code_lines[code] = None
            return on_line

        return on_line


def _module_name(rel: str) -> str:
    """ "verl/a/b.py" -> "verl.a.b"; "verl/a/__init__.py" -> "verl.a"."""
    parts = rel.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class _StartOnImport:
    """A finder first on sys.meta_path that finds nothing: asked for one of `names`, it starts the trace (the
    import then runs under it) and leaves the path."""

    def __init__(self, names: set[str], start):
        self._names, self._start = names, start

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self._names:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            self._start()
        return None
