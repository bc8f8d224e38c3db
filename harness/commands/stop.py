"""`harness stop`: end the preloaded parents this checkout's commands left up for the next command
(harness/processes/client.py keep_s), instead of waiting out their idle time."""

from __future__ import annotations


def cmd_stop(args) -> int:
    from harness.processes.client import retire_kept

    stopped = retire_kept()
    print(f"stopped {len(stopped)} kept parent(s){': pid ' + ', '.join(map(str, stopped)) if stopped else ''}")
    return 0
