"""The README's Time table, drawn from docs/timings.csv (one line per measured run: its date and hour, commit,
host, host_speed.py's loop, the one-minute load, the step, the seconds). The table shows each step's latest
measurements, those of the latest date that measured that step, with their commit and loop, beside its goal; the
dates stay in the data.

    python tools/timings.py            # print the table
    python tools/timings.py --check    # exit 1 where README.md's table is not the one the data draws
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "timings.csv"
README = ROOT / "README.md"

# step -> (what it is, goal in seconds), in the table's order
STEPS = {
    "venv_fresh": ("`make venv`, fresh clone", 45),
    "repro_first": ("`make repro`, first run on a fresh clone (after `make venv`)", 40),
    "repro_warm": ("`make repro`, warm", 30),
    "verify_fresh": ("`make verify PATCH=patches/fsdp2-lmhead-forward.diff ARGS=--fresh` (nightly left out)", 150),
    "verify_after_repro": ("the same verify right after `make repro` (none, upstream reused)", 150),
    "ci_fresh": ("`CI=true bash .ci/run`, fresh clone", 250),  # issue 73: headroom, a slower host under ~500 s
    "unit": ("`make unit`", 30),
}


def rows(path: Path = DATA) -> list[dict]:
    with path.open(newline="") as f:
        out = list(csv.DictReader(f))
    for r in out:
        if r["step"] not in STEPS:
            raise SystemExit(f"{path.name}: step {r['step']!r} is not one of {', '.join(STEPS)}")
        float(r["seconds"])
    return out


def latest(data: list[dict], step: str) -> list[dict]:
    """The step's current figures: those of the commit its latest measurement ran (on that measurement's date);
    the earlier ones stay in the data."""
    mine = [r for r in data if r["step"] == step]
    if not mine:
        return []
    last = max(mine, key=lambda r: (r["date"], r["hour_utc"]))
    return [r for r in mine if r["date"] == last["date"] and r["commit"] == last["commit"]]


def _runs(measured: list[dict]) -> str:
    """The figures, grouped by what they compare only beside: the commit and host_speed.py's loop (the host where
    the step's latest date measured on more than one)."""
    hosts = {r["host"] for r in measured}
    groups: dict[tuple, list[str]] = {}
    for r in measured:
        where = (r["commit"], r["host"] if len(hosts) > 1 else "", r["host_loop_s"])
        groups.setdefault(where, []).append(f"{float(r['seconds']):g}")
    shown = []
    for (commit, host, loop), figures in groups.items():
        said = [commit or "commit not recorded", *([host] if host else []), *([f"loop {loop} s"] if loop else [])]
        shown.append(f"{', '.join(figures)} s ({', '.join(said)})")
    return "; ".join(shown)


def table(data: list[dict]) -> str:
    lines = ["| step | latest measured (commit, host_speed.py's loop) | goal |", "|---|---|---|"]
    for step, (what, goal) in STEPS.items():
        measured = latest(data, step)
        if measured:
            lines.append(f"| {what} | {_runs(measured)} | ≤ {goal} s |")
    return "\n".join(lines)


def readme_table(text: str) -> str:
    start = text.index("| step | latest measured")
    end = text.find("\n\n", start)
    return text[start : end if end >= 0 else len(text)].rstrip("\n")


def main(argv: list[str]) -> int:
    drawn = table(rows())
    if "--check" in argv:
        shown = readme_table(README.read_text())
        if shown != drawn:
            print("README.md's Time table is not the one docs/timings.csv draws: python tools/timings.py")
            return 1
        return 0
    print(drawn)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
