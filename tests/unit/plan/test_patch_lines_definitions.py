"""A function body counts only where it ran (issue 64): the lines a hunk writes that the module's code runs on
import (a new function's `def` line, its decorators) are not its lines that can run (plan/patch_lines.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.plan.patch_lines import patch_hunks

pytestmark = pytest.mark.unit

SOURCE = """import functools


def caller(x):
    return x + 1
"""

# One hunk: a decorated function added (its def, decorator and default run on import, its body only when called) and
# its call site.
DIFF = "\n".join(
    [
        "--- a/verl/mod.py",
        "+++ b/verl/mod.py",
        "@@ -1,5 +1,11 @@",
        " import functools",
        " ",
        " ",
        "+@functools.lru_cache",
        "+def helper(x,",
        "+           y=2):",
        "+    return x * y",
        "+",
        "+",
        " def caller(x):",
        "-    return x + 1",
        "+    return helper(x) + 1",
        "",
    ]
)


def test_a_new_functions_def_and_decorator_lines_are_not_lines_that_ran_its_body(tmp_path: Path):
    verl = tmp_path / "site" / "verl"
    verl.mkdir(parents=True)
    (verl / "mod.py").write_text(SOURCE)
    diff = tmp_path / "d.diff"
    diff.write_text(DIFF)
    (hunk,) = patch_hunks(verl, [(diff, DIFF.encode())])
    assert hunk.lines == (7, 11)  # `return x * y` and the call site: not 4 (@), 5 (def), 6 (its default)
    assert hunk.where == "helper"
