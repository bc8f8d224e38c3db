"""One table of exit codes for every command (harness/errors.py, docs/PR.md "Exit codes", issue 74): 0 judged and
nothing counted, 1 counted, 2 NOT JUDGED or usage, 3 the harness itself crashed, 130 interrupted. Each command's
function returns those names (or a verdict's exit_code built from them), never a bare number; the paths that judge
nothing return EXIT_NOT_JUDGED."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from harness import errors
from harness.cli import COMMANDS
from harness.errors import EXIT_COUNTED, EXIT_CRASH, EXIT_INTERRUPTED, EXIT_NOT_JUDGED, EXIT_OK

pytestmark = pytest.mark.unit


def test_the_table():
    assert (EXIT_OK, EXIT_COUNTED, EXIT_NOT_JUDGED, EXIT_CRASH, EXIT_INTERRUPTED) == (0, 1, 2, 3, 130)
    assert errors.UsageError.exit_code == EXIT_NOT_JUDGED


def _returned(node: ast.expr) -> list[ast.expr]:
    """The values a return may give: both branches of a conditional expression."""
    if isinstance(node, ast.IfExp):
        return _returned(node.body) + _returned(node.orelse)
    return [node]


def _bare_numbers(function) -> list[str]:
    tree = ast.parse(inspect.getsource(inspect.unwrap(function)).lstrip())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            for value in _returned(node.value):
                if isinstance(value, ast.Constant) and isinstance(value.value, int):
                    found.append(f"line {node.lineno}: return {value.value}")
    return found


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_returns_the_tables_names(command):
    module, function, _ = COMMANDS[command]
    found = getattr(importlib.import_module(f"harness.commands.{module}"), function)
    assert _bare_numbers(found) == [], f"harness {command} ({module}.{function}) returns a bare exit code"


def test_the_cli_returns_the_tables_names():
    from harness import cli

    assert _bare_numbers(cli.main) == []


def test_a_verdict_that_judges_nothing_is_not_judged_never_0(record):
    """verify (and pr, through it): a patch that ran in no scenario, or only where this environment stops every
    cell, is NOT JUDGED."""
    from record_builder import FLASH_ATTN, cell  # tests/record_builder.py

    from harness.judge_change.patch_verdict import PatchVerdict, judge_patch

    assert PatchVerdict("fix").exit_code == EXIT_NOT_JUDGED  # nothing ran
    blocked = [cell("fix", "error", err=FLASH_ATTN), cell("upstream", "error", err=FLASH_ATTN)]
    for files in (None, ["verl/models/transformers/qwen2_vl.py"]):
        assert judge_patch("fix", blocked, {}, patch_files=files).exit_code == EXIT_NOT_JUDGED
    assert judge_patch("fix", blocked, {}, differential=True).exit_code == EXIT_NOT_JUDGED


JUDGING_TARGETS = ("repro", "verify", "matrix", "sweep", "releases", "pr", "bisect", "upstream", "rerun", "import")


def test_make_keeps_each_judging_commands_own_code():
    """make ends any failure with 2: each target that judges writes its command's own code to
    results/<target>-exit-code and prints it (KEEP_EXIT), results/verify-exit-code as before."""
    import re

    from harness.paths import ROOT

    makefile = (ROOT / "Makefile").read_text()
    assert "echo $$rc > results/$@-exit-code" in makefile
    for target in JUDGING_TARGETS:
        recipe = re.search(rf"^{target}:.*\n\t(.+)$", makefile, flags=re.MULTILINE)
        assert recipe and recipe.group(1).endswith("; $(KEEP_EXIT)"), target
