"""The one "path as shown" (harness/paths.py shown_path): what messages and records (an arm's diff in the stamp)
name a path by."""

from __future__ import annotations

from harness.paths import ROOT, shown_path


def test_a_path_inside_the_checkout_is_shown_from_its_root(monkeypatch, tmp_path):
    assert shown_path(ROOT / "patches" / "fsdp2-lmhead-forward.diff") == "patches/fsdp2-lmhead-forward.diff"
    # A relative path is taken from the working directory, wherever the command runs.
    monkeypatch.chdir(ROOT / "patches")
    assert shown_path("fsdp2-lmhead-forward.diff") == "patches/fsdp2-lmhead-forward.diff"
    # A link to a file of the checkout: the file it names.
    link = tmp_path / "fix.diff"
    link.symlink_to(ROOT / "patches" / "fsdp2-lmhead-forward.diff")
    assert shown_path(link) == "patches/fsdp2-lmhead-forward.diff"


def test_a_path_outside_the_checkout_is_shown_as_given(monkeypatch, tmp_path):
    assert shown_path(tmp_path / "fix.diff") == str(tmp_path / "fix.diff")
    monkeypatch.chdir(tmp_path)
    assert shown_path("fix.diff") == "fix.diff"
