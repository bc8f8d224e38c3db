"""Every thread's Python stack of a rank, on demand: the driver sends SIGUSR1 to a rank that outlived its run's
timeout before it kills it, so a hang says where each rank waits, not only its last phase.

faulthandler writes from inside the signal handler, without the GIL, so a rank blocked in a collective's C++ wait
still answers.
"""

from __future__ import annotations

import faulthandler
import signal
from pathlib import Path

SIGNAL = signal.SIGUSR1
_open_files = []  # faulthandler keeps only the file descriptor: the file object must outlive the registration


def dump_stacks_on_signal(path: Path) -> None:
    handle = open(path, "w")
    _open_files.append(handle)
    faulthandler.register(SIGNAL, file=handle, all_threads=True, chain=False)
