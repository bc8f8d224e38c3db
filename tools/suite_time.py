"""The test suite's time by test file, largest first, from pytest's JUnit XML (`make test ARGS=--junitxml=F`):
each file's summed test seconds (setup, call and teardown, as pytest reports a test's time) and count, and what share
of the summed time it is. Under xdist the sum is of both workers' time, so it is about twice the wall time.

    python tools/suite_time.py F.xml            # a markdown table, for docs/TIME.md
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def by_file(xml_path: str) -> list[tuple[str, float, int]]:
    """(test file, seconds, tests) per file, largest first; a scenario item is counted under scenarios/."""
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        # classname is the dotted module path (tests.unit.test_cli), or the scenario file's for a scenario item.
        module = case.get("classname", "?")
        path = module.replace(".", "/") + ".py" if module.startswith("tests") else module.split(".")[0] + "/"
        seconds[path] += float(case.get("time", 0.0))
        counts[path] += 1
    return sorted(((p, seconds[p], counts[p]) for p in seconds), key=lambda row: -row[1])


def table(rows: list[tuple[str, float, int]]) -> str:
    total = sum(s for _, s, _ in rows) or 1.0
    lines = ["| test file | tests | seconds (both workers) | share |", "|---|---:|---:|---:|"]
    lines += [f"| `{path}` | {n} | {s:.1f} | {100 * s / total:.1f} % |" for path, s, n in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(table(by_file(sys.argv[1])))
