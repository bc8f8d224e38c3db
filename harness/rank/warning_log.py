"""The warnings a rank raised, for its result file: a warning is evidence (FSDP2's "returned a view tensor" says the
fused head hands FSDP a view an in-place op could bypass), so it is kept, not filtered.

Every warning is recorded once per (category, message, file:line) with how often it came; the first of each is
still printed to stderr as Python would, so torchrun.log shows it too. torch's C++ TORCH_WARN reaches Python's
warnings module, so it is caught here as well.
"""

from __future__ import annotations

import warnings

MESSAGE_CHARS = 1000  # a warning's text can embed a whole tensor repr


class WarningLog:
    def __init__(self):
        self.entries: dict[tuple, dict] = {}
        self._catch = None
        self._show = None

    def start(self) -> WarningLog:
        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        # "always": a warning raised before (in a preloaded parent, or once per location by default) is still
        # seen here; the count and the once-only printing below keep that from flooding the log.
        warnings.simplefilter("always")
        self._show = warnings.showwarning
        warnings.showwarning = self._record
        return self

    def stop(self) -> list[dict]:
        """Python's own warning handling back; the warnings seen, first seen first."""
        self._catch.__exit__(None, None, None)
        return list(self.entries.values())

    def _record(self, message, category, filename, lineno, file=None, line=None):
        text = str(message).strip()
        key = (category.__name__, text, filename, lineno)
        entry = self.entries.get(key)
        if entry is None:
            self.entries[key] = {
                "category": category.__name__,
                "message": text[:MESSAGE_CHARS],
                "where": f"{filename}:{lineno}",
                "count": 1,
            }
            self._show(message, category, filename, lineno, file, line)
        else:
            entry["count"] += 1
