"""verify knows what of a patch ran, and what rows it changed (issue 60), as a user runs it, one cell each (--alone):
a patch of the unfused path only, whose changed lines no scenario runs, is no plain pass; a fused head that skips
rows is failed with the rows named as skipped; one that writes 0 on prompt rows only, which verl's trainer never
reads, passes with a remark. The patches: tests/fixtures/coverage/. Each command through harness.cli.main in this
process (cli_in_process: its subject is what verify prints, not a fresh interpreter's start and imports, ~1.1 s of
CPU a command; its cell is launched as a subprocess CLI's is)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures" / "coverage"


def _one_line(text: str) -> str:
    return " ".join(text.split())


# A changed file all of whose changed lines (and branches, where it has any) ran in every scenario run.
EVERY_LINE_RAN = re.compile(
    r"^  verl/\S+: (\d+) of \1 changed line\(s\) ran(, (\d+) of \3 branch\(es\) taken)?, in every scenario"
)


def test_a_patch_whose_changed_lines_ran_in_no_scenario_is_said_so(cli_in_process):
    done = cli_in_process(
        "verify", "--patch", str(FIXTURES / "unfused-path-only.diff"), "--scenario", "fsdp2-1gpu", "--alone"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "  verl/workers/engine/fsdp/transformer_impl.py: 0 of 1 changed line(s) ran" in lines, done.stdout[-3000:]
    assert "    line 1425, the `if not distillation_only:` branch: taken in no scenario" in lines
    assert (
        "verdict: unfused-path-only passes all 1 scenario(s) it is judged on here; but none of its changed lines ran "
        "in any of them: this verdict says nothing about the change"
    ) in lines


def test_a_fused_head_that_skips_response_rows_is_failed_with_the_rows_named_as_skipped(cli_in_process):
    patch = FIXTURES / "fused-head-skips-rows.diff"
    done = cli_in_process("verify", "--patch", str(patch), "--scenario", "fsdp2-1gpu", "--alone")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    text = _one_line(done.stdout)
    # The why names them, with their count and the loss's among them; verify groups the cell by that cause.
    assert (
        "log-probs: rows the head skipped (log-prob and entropy exactly zero where the oracle's are not), the loss's "
        "rows among them: 5 of 19 rows; where: 5 response rows; 5 of them the loss's rows"
    ) in text, done.stdout[-3000:]
    assert "log-probs wrong: rows the head skipped (exactly zero where the oracle's are not): fsdp2-1gpu" in text
    assert any(EVERY_LINE_RAN.match(line) for line in done.stdout.splitlines()), done.stdout[-3000:]


def test_a_fused_head_that_zeroes_prompt_rows_only_passes_with_a_remark(cli_in_process):
    patch = FIXTURES / "fused-head-zeroes-prompt-rows.diff"
    done = cli_in_process("verify", "--patch", str(patch), "--scenario", "direct-1gpu", "--alone")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = _one_line(done.stdout)
    assert "direct-1gpu: log-probs differ by" in text and "only at rows verl's trainer never reads" in text, text[
        -3000:
    ]
    assert (
        "verdict: fused-head-zeroes-prompt-rows passes all 1 scenario(s) it is judged on here; 1 with a remark" in text
    )


@pytest.mark.nightly  # its scenario is the nightly's
def test_the_nightly_scenario_that_runs_the_unfused_path_judges_that_patch(cli_in_process):
    """engine-unfused (use_fused_kernels off, nightly): the flag that adds it gives the patch a plain verdict."""
    patch = FIXTURES / "unfused-path-only.diff"
    done = cli_in_process("verify", "--patch", str(patch), "--scenario", "engine-unfused", "--nightly", "--alone")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(EVERY_LINE_RAN.match(line) for line in lines), done.stdout[-3000:]
    assert (
        "verdict: unfused-path-only passes all 1 scenario(s) it is judged on here; all 1 of its changed line(s) ran"
        in lines
    )
