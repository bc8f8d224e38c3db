"""torchrun, with how each failed rank ended kept as data: what the driver starts (in a fresh interpreter, or forked
by the preloaded parent through harness/processes/stand_in.py --torchrun) instead of `python -m torch.distributed.run`.

    python -m harness.rank.torchrun FAILURES.json TORCHRUN-ARGS...

It runs torchrun's own main() on TORCHRUN-ARGS. When a rank fails, torchrun raises ChildFailedError, whose `failures`
map each failed rank to its exit code; they go to FAILURES.json before the error goes on exactly as torchrun's would
(its failure summary printed, exit status 1). The driver reads the file to learn which rank a signal ended (SIGKILL
from the OOM killer, say) without parsing the summary's text, which torch may word differently in any release.
"""

from __future__ import annotations

import json
import signal
import sys
from contextlib import contextmanager
from pathlib import Path


def signal_name(exitcode: int) -> str | None:
    """The signal that ended a process with this exit code (torchrun gives a killed rank the negated signal number),
    or None when it exited by itself."""
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:  # a number this platform has no name for
        return f"signal {-exitcode}"


def failures_by_rank(failures: dict) -> dict[str, dict]:
    """ChildFailedError.failures (global rank -> ProcessFailure) as JSON: rank -> exit code and signal name."""
    return {
        str(rank): {"exitcode": failure.exitcode, "signal": signal_name(failure.exitcode)}
        for rank, failure in sorted(failures.items())
    }


# How often torchrun's --tee tailers look for new lines in the ranks' log files. torch's TailLog sleeps 0.1 s between
# reads, and torchrun has no flag for it. When the ranks have exited, torchrun stops its stdout and then its stderr
# tailer, each waiting out its sleep: 0.2 s of every cell's end (ranks gone 37.157, tailers 37.28 and 37.38, torchrun
# 37.437 in one fsdp2-multigpu cell's strace), while the cell's job slot waits. The same lines reach torchrun.log.
TAIL_INTERVAL_S = 0.01


@contextmanager
def quick_tailers():
    """torchrun's PContext builds its tailers with TAIL_INTERVAL_S (the class its module names, for this block)."""
    from torch.distributed.elastic.multiprocessing import api

    class QuickTailLog(api.TailLog):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("interval_sec", TAIL_INTERVAL_S)
            super().__init__(*args, **kwargs)

    before, api.TailLog = api.TailLog, QuickTailLog
    try:
        yield
    finally:
        api.TailLog = before


def main(argv: list[str]):
    failures_path, torchrun_args = Path(argv[0]), argv[1:]
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        with quick_tailers():
            run.main(torchrun_args)
    except ChildFailedError as error:
        failures_path.write_text(json.dumps(failures_by_rank(error.failures), indent=1))
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
