"""How a plan stops on Ctrl-C or SIGTERM (runner.py's run_plan, whichever executor runs its cells): the signal sets
launch.STOP instead of raising mid-step, the executor then cancels what is in flight, and the plan raises
Interrupted with what it recorded.

The handler: StopOnSignal."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from harness.paths import shown_path


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: every run in flight was killed; the records of finished runs are in `path`."""

    def __init__(self, recorded: int, total: int, path: Path):
        super().__init__(f"interrupted: {recorded} of {total} runs recorded in {shown_path(path)}")
        self.recorded, self.total, self.path = recorded, total, path


class StopOnSignal:
    """While a plan runs, SIGINT and SIGTERM set launch.STOP (every launch in flight kills its ranks and
    returns) instead of raising in whatever the main thread was doing."""

    def __enter__(self):
        from harness.launch.launch import STOP

        self.stop = STOP
        STOP.clear()
        self.previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, lambda *_: STOP.set())
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False
