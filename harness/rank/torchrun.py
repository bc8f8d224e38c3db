"""torchrun, with how each failed rank ended kept as data: what the driver starts (in a fresh interpreter, or forked
by the preloaded parent through harness/processes/stand_in.py --torchrun) instead of `python -m torch.distributed.run`.

    python -m harness.rank.torchrun FAILURES.json TORCHRUN-ARGS...

It runs torchrun's own main() on TORCHRUN-ARGS. When a rank fails, torchrun raises ChildFailedError, whose `failures`
map each failed rank to its exit code; they go to FAILURES.json before the error goes on exactly as torchrun's would
(its failure summary printed, exit status 1). The driver reads the file to learn which rank a signal ended (SIGKILL
from the OOM killer, say) without parsing the summary's text, which torch may word differently in any release.

It also cuts two waits and one cost of torchrun's own that a standalone run pays for nothing (quicker_torchrun).
"""

from __future__ import annotations

import json
import os
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


# Two waits and one cost of torchrun's own that a single-node run (--standalone, as the driver starts every cell)
# pays for nothing, each cut here for the block of its run only. None changes what torchrun starts, or what reaches
# torchrun.log. Each is kept because it pays every cell and torch has no switch for it (docs/TIME.md, "The process
# machinery"); the method names also leave no inspect.stack() for `-X frozen_modules=off` to cheapen.
#
# Its --tee tailers copy each rank's log file into torchrun.log, pausing 0.1 s at the end of the file. When the ranks
# have exited, torchrun stops its stdout and then its stderr tailer, and each waited out its pause: 0.2 s of every
# cell's end (ranks gone 37.157, tailers 37.28 and 37.38, torchrun 37.437 in one fsdp2-multigpu cell's strace),
# while the cell's job slot waits. Polling every 0.01 s instead cost 2.6% of a core per cell (0.4% at 0.1 s).


def tail_until_finished(header, file, dst, finished, interval_sec, log_line_filter=None):
    """The job of torch's tail_logfile, as TailLog's threads call it: each line of `file` that log_line_filter
    keeps goes to dst after `header`, while its rank runs and then to the file's end; the pauses at the end of the
    file (interval_sec, torch's 0.1 s) are waits on `finished`, so a stop is seen at once."""
    while not os.path.exists(file):
        if finished.wait(interval_sec) and not os.path.exists(file):
            return
    with open(file, errors="replace") as fp:
        while True:
            # The stop is read before the line: a stop seen only after an empty read may have come after a last
            # line written between the two, which would then be lost (a make test run lost one so).
            stopped = finished.is_set()
            line = fp.readline()
            if line:
                if log_line_filter and log_line_filter(line):
                    dst.write(f"{header}{line}")
            elif stopped:
                return
            else:
                finished.wait(interval_sec)


def method_name(depth: int = 2) -> str:
    """What dynamic_rendezvous.get_method_name returns (the name of the function `depth` frames up from it, for the
    rendezvous' event records), read from the frames: torch's builds inspect.stack() twice for it, the source
    lines of every frame included, and resolves each frame's module, scanning sys.modules for a frame of a frozen
    module (runpy's, under `python -m`): 1.5 s of every forked torchrun before `-X frozen_modules=off`, 0.1 s of
    its CPU after (nine calls; 0.94 s of nine cells' torchruns, py-spy). With this, neither flag nor warm-up."""
    frame = sys._getframe(1)  # this function stands in for get_method_name: its caller is depth 1
    for _ in range(depth - 1):
        frame = frame.f_back if frame is not None else None
    return frame.f_code.co_name if frame is not None else "no_method_name"


@contextmanager
def quicker_torchrun():
    """torchrun's tee tailers run tail_until_finished, its rendezvous skips its first round's random delay
    (dynamic_rendezvous sleeps 0-0.3 s, mean 0.15 s, before every cell's ranks start, "to skew the rendezvous
    attempts across the nodes", and a standalone run has one node; a fixed delay, its poll for a peer's state
    change, is kept), and its event records take their method names from method_name."""
    from torch.distributed.elastic.multiprocessing import tail_log
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    torchs_delay = dynamic_rendezvous._delay

    def delay(seconds):
        if not isinstance(seconds, tuple):  # a range is the jitter; a number is a wait for something
            torchs_delay(seconds)

    before = tail_log.tail_logfile, dynamic_rendezvous._delay, dynamic_rendezvous.get_method_name
    tail_log.tail_logfile, dynamic_rendezvous._delay = tail_until_finished, delay
    dynamic_rendezvous.get_method_name = method_name
    try:
        yield
    finally:
        tail_log.tail_logfile, dynamic_rendezvous._delay, dynamic_rendezvous.get_method_name = before


def main(argv: list[str]):
    from harness.rank.environment import TORCHRUN_PID

    failures_path, torchrun_args = Path(argv[0]), argv[1:]
    os.environ[TORCHRUN_PID] = str(os.getpid())  # what the ranks it starts inherit
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        with quicker_torchrun():
            run.main(torchrun_args)
    except ChildFailedError as error:
        failures_path.write_text(json.dumps(failures_by_rank(error.failures), indent=1))
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
