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


def main(argv: list[str]):
    failures_path, torchrun_args = Path(argv[0]), argv[1:]
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        run.main(torchrun_args)
    except ChildFailedError as error:
        failures_path.write_text(json.dumps(failures_by_rank(error.failures), indent=1))
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
