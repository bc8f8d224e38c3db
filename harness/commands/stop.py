"""`harness stop`: end the preloaded parents kept up after their commands (harness/processes/kept.py): this
checkout's (--all: every checkout's of this user), and any whose checkout is gone. `harness status`: what is up."""

from __future__ import annotations

from harness.errors import EXIT_OK


def cmd_stop(args) -> int:
    from harness.paths import ROOT
    from harness.processes import kept

    ups = kept.stoppable(None if getattr(args, "all", False) else str(ROOT))
    left = kept.retire(ups)
    ended = [up.pid for up in ups if up not in left]
    print(f"stopped {len(ended)} kept parent(s){': pid ' + ', '.join(map(str, ended)) if ended else ''}")
    for up in left:
        print(f"pid {up.pid} ends once its running children have (a command borrowing it still runs)")
    return EXIT_OK


def cmd_status(args) -> int:
    from harness.processes import kept

    ups = kept.parents_up()
    print(f"{len(ups)} preloaded parent(s) up" + (":" if ups else ""))
    for up in ups:
        print(f"  {kept.describe(up)}")
    return EXIT_OK
