"""README as a new user reads it: the quick start before the words, and the patch made by the harness's own
command, not a shell recipe that hard-codes a directory."""

from __future__ import annotations

from harness.paths import ROOT

README = (ROOT / "README.md").read_text()


def test_the_quick_start_comes_first_then_the_words():
    sections = [line for line in README.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Quick start", sections
    assert README.index("## Quick start") < README.index("**oracle**") < README.index("## The headline table")


def test_the_patch_recipe_is_the_patch_command():
    assert "python -m harness patch start" in README and "python -m harness patch diff" in README
    assert "diff -ru" not in README and "rm -rf /tmp/mine" not in README
    assert len(README.splitlines()) <= 150
