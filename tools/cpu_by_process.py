"""Where a command's CPU goes, by kind of process (standard library only; Linux /proc).

Runs the command, reads every process's CPU time from /proc five times a second, and prints the CPU of the
processes it started (and of those already running, from the first reading on) by kind: the preloaded parents, the
torchruns and ranks forked from them, fresh ranks, stand-ins, each harness command by its name, pytest and its
workers. The host's busy CPU over the same time (/proc/stat) is printed beside it: a process that lived less than a
reading apart, or CPU spent after a process's last reading, is in the host's figure and in no kind's, so the gap
says how much was missed. Give the figure with tools/host_speed.py's line and the load (docs/TIME.md).

    python3 tools/cpu_by_process.py make test
    python3 tools/cpu_by_process.py --json out.json .venv/bin/python -m harness verify --fresh
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK")
SERVER = "harness.processes.server"


def read_stat(pid: str) -> tuple[int, int, float] | None:
    """(parent pid, start in ticks since boot, CPU seconds) of one process; None if it is gone."""
    try:
        stat = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command name, which may hold spaces
    return int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / TICK


def read_cmdline(pid: str) -> str:
    """Its command line ("" for a kernel thread, or a process gone since)."""
    try:
        return (PROC / pid / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def busy_s() -> float:
    """The host's busy CPU since boot, all cores (user, nice, system, irq, softirq)."""
    values = [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    return (values[0] + values[1] + values[2] + values[5] + values[6]) / TICK


def kind(cmdline: str, parent_cmdline: str, has_stand_in_children: bool) -> str:
    """What a process is, from its command line and its parent's. A forked child keeps the parent's command line:
    the torchrun is the one whose children are stand-ins, a rank any other."""
    if SERVER in cmdline:
        if SERVER not in parent_cmdline:
            return "preloaded parent"
        return "forked torchrun" if has_stand_in_children else "forked rank"
    for module, name in (
        ("harness.processes.stand_in", "stand-in"),
        ("harness.rank.worker", "fresh rank"),
        ("harness.rank.torchrun", "fresh torchrun"),
        ("harness.processes.bytecode", "bytecode"),
    ):
        if module in cmdline:
            return name
    if " -m harness" in cmdline:
        words = cmdline.split(" -m harness", 1)[1].split()
        return f"command: {words[0]}" if words else "command"
    if "exec(eval(sys.stdin.readline()))" in cmdline:
        return "pytest worker (xdist)"
    if " -m pytest" in cmdline or "/pytest " in cmdline:
        return "pytest"
    return "other: " + os.path.basename(cmdline.split(" ", 1)[0])


def sample(seen: dict, since_tick: int):
    """One reading of every process: seen[(pid, start)] = [parent pid, command line, CPU at first reading, CPU now].
    A process started after since_tick counts from 0; one already running, from its first reading. The command line
    is read once, at a process's first reading (this loop's own CPU is in the host's figure, not in a kind's)."""
    for pid in os.listdir(PROC):
        if not pid.isdigit():
            continue
        got = read_stat(pid)
        if got is None:
            continue
        ppid, start, cpu = got
        entry = seen.get((int(pid), start))
        if entry is None:
            entry = seen[(int(pid), start)] = [ppid, read_cmdline(pid), 0.0 if start >= since_tick else cpu, cpu]
        entry[3] = cpu


def by_kind(seen: dict, own_pid: int) -> tuple[Counter, Counter]:
    cmdlines = {pid: entry[1] for (pid, _), entry in seen.items()}
    stand_in_parents = {entry[0] for entry in seen.values() if "harness.processes.stand_in" in entry[1]}
    cpu, count = Counter(), Counter()
    for (pid, _), (ppid, cmdline, first, last) in seen.items():
        if pid == own_pid or not cmdline:  # this tool, or a kernel thread
            continue
        name = kind(cmdline, cmdlines.get(ppid, ""), pid in stand_in_parents)
        cpu[name] += last - first
        count[name] += 1
    return cpu, count


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--every-s", type=float, default=0.2, help="seconds between readings (default 0.2)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if not args.command:
        parser.error("a command to run")
    since_tick = int(float((PROC / "uptime").read_text().split()[0]) * TICK)
    seen: dict = {}
    busy_before, started = busy_s(), time.monotonic()
    proc = subprocess.Popen(args.command)
    while proc.poll() is None:
        sample(seen, since_tick)
        time.sleep(args.every_s)
    wall_s, busy = time.monotonic() - started, busy_s() - busy_before
    cpu, count = by_kind(seen, os.getpid())
    print(f"\n{' '.join(args.command)}: exit {proc.returncode}, {wall_s:.0f} s of wall, host busy {busy:.0f} s of CPU")
    print(f"{'CPU s':>8} {'share':>6} {'procs':>6}  kind")
    for name, seconds in cpu.most_common():
        print(f"{seconds:8.1f} {seconds / busy:6.1%} {count[name]:6d}  {name}")
    missed = busy - sum(cpu.values())
    print(f"{missed:8.1f} {missed / busy:6.1%}         in no kind (short-lived processes, the kernel, the host's rest)")
    if args.json:
        figures = {"wall_s": wall_s, "host_busy_s": busy, "kinds": {k: [v, count[k]] for k, v in cpu.items()}}
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
