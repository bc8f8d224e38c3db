"""Any text a rank writes, a lone surrogate and escape sequences included, is written to results/*.jsonl and read
back as it was, then shown by results/latest.md and `report` escaped, never failing them (it failed verify's
latest.md with UnicodeEncodeError, then `report`)."""

from __future__ import annotations

import sys

import pytest

from harness.commands.run import finish
from harness.records.store import ResultsFile, load_records
from harness.render.untrusted import TerminalStream
from harness.run.runner import PlanResult

pytestmark = pytest.mark.unit

# A byte that was not UTF-8 (surrogateescape's \udce9), a surrogate alone from a rank's JSON, an escape sequence.
MESSAGE = "caf\udce9 broke \ud800 here \x1b[2J\x1b]0;owned\x07 \u202eevil"


@pytest.fixture
def written(tmp_path, record):
    failing = record(
        arm="none",
        outcome="error",
        parity=None,
        comm=None,
        error={"type": "RuntimeError", "message": MESSAGE, "phase": "forward", "rank": 0},
    )
    results = ResultsFile("verify", tmp_path / "results")
    line = results.append(failing)
    results.close()
    return PlanResult([failing], results.path, [line])


def test_a_lone_surrogate_is_written_and_read_back_as_it_was(written):
    (back,) = load_records(written.path)
    assert back.verdict.error.message == MESSAGE
    written.path.read_bytes().decode("utf-8")  # the file itself is valid UTF-8 (JSON's \\udce9 escapes)


def test_latest_md_and_the_printout_show_it_escaped(written, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setattr(sys, "stdout", TerminalStream(sys.stdout))  # as cli.main sets it for every command
    finish(PlanResult(load_records(written.path), written.path, written.lines), None)
    latest = (tmp_path / "results" / "latest.md").read_text(encoding="utf-8")
    printed = capsys.readouterr().out
    for text in (latest, printed):
        assert "caf\\udce9 broke \\ud800" in text and "\\x1b[2J" in text and "\\u202e" in text
        assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text


@pytest.mark.parametrize("how", [(), ("--format", "wide"), ("--format", "summary"), ("--format", "junit"), ("--full",)])
def test_report_shows_it_escaped_in_every_format(written, cli_in_process, how, tmp_path):
    target = f"{written.path}:1" if how == ("--full",) else written.path
    done = cli_in_process("report", *how, target)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout + done.stderr and "\u202e" not in done.stdout
    assert "broke" in done.stdout
    for picture in tmp_path.rglob("*.svg"):  # the table's pictures: the cause's words drawn escaped
        drawn = picture.read_text(encoding="utf-8")
        assert "broke" in drawn and "\x1b" not in drawn and "\\x1b[2J" in drawn
