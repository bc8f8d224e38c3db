"""README as a new user reads it: within its 150 lines (a newcomer reads it in three minutes; depth goes in docs/),
and what it says verify writes is what commands/run.py writes."""

from __future__ import annotations

import re

from harness.paths import ROOT

README = (ROOT / "README.md").read_text()


def test_the_readme_is_at_most_150_lines():
    assert len(README.splitlines()) <= 150


def test_verifys_output_is_described_as_it_prints(tmp_path, monkeypatch):
    """The closing block about the patch, the per-run picture with the latest's copy, and the stub file: the names
    README gives are those commands/run.py writes."""
    import pytest

    from harness.commands import run

    text = " ".join(README.split())
    for words in ("block about the patch", "grouped by cause", "one verdict line", "never overwritten"):
        assert words in text, words
    assert "results/verify-<arm>-<UTC>.png" in text and "`verify-<arm>.png` the latest's copy" in text
    assert "results/verify-<arm>-expectations-stub.yaml" in text
    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path))
    from record_builder import make_record

    run.stub_file_line([make_record("mine-own", "upstream", "mismatch")], {}, "fix")
    assert [p.name for p in tmp_path.iterdir()] == ["verify-fix-expectations-stub.yaml"]
    pytest.importorskip("matplotlib")
    from harness.render.pictures import verify_picture

    verify_picture([make_record("fsdp2-multigpu", "fix", "pass")], "fix")
    pngs = sorted(p.name for p in tmp_path.glob("verify-fix*.png"))
    assert len(pngs) == 2 and re.fullmatch(r"verify-fix-\d{8}T\d{6}Z\.png", pngs[0]) and pngs[1] == "verify-fix.png"
