"""The one verdict line (render/verdict_line.py) of the three verdicts: the terminal's closing block
(render/verify_closing.py) and the comment body (render/comment_body.py) write the same line, flags included; verify
--comment in its default mode writes verify's by-change line, pr its differential one."""

from __future__ import annotations

import re

import pytest
from record_builder import FLASH_ATTN, cell, error, unreduced  # tests/record_builder.py

from harness.judge_change.patch_verdict import judge_patch
from harness.render.comment_body import VERDICT_CHARS, CommentContext, comment_body
from harness.render.untrusted import markdown_text
from harness.render.verdict_line import verdict_line
from harness.render.verify_closing import ClosingContext, closing_lines

pytestmark = pytest.mark.unit

RAISED = error("AttributeError", "Qwen3_5GatedDeltaNet has no causal_conv1d_fn, and transformers exposes neither")
RAN_NOTE = "; judged on the code that ran: 3 of 4 changed line(s) ran, the rest in no scenario (above)"


def _records() -> list:
    """Three Qwen3-VL scenarios failing as #6659 left them under both arms, one Qwen3.5 scenario the patch breaks,
    one the base cannot import flash_attn for."""
    records = []
    for name in ("fsdp2-multigpu", "fsdp2-compile", "engine-no-sync"):
        records += [unreduced("pr-abc", name), unreduced("upstream", name)]
    records += [cell("pr-abc", "error", "engine-qwen3-5-multigpu", err=RAISED)]
    records += [cell("upstream", "pass", "engine-qwen3-5-multigpu")]
    records += [cell("pr-abc", "error", "engine-sp2", err=FLASH_ATTN), cell("upstream", "error", "engine-sp2")]
    records[-1].verdict.error = records[-2].verdict.error
    return records


MODES = {  # the three verdicts, as verify and pr ask judge_patch for them
    "absolute": {},
    "by change": {"patch_files": ["verl/models/transformers/qwen3_vl.py"]},
    "differential": {"differential": True},
}


def _terminal_and_comment(mode: str):
    records = _records()
    verdict = judge_patch("pr-abc", records, {}, **MODES[mode])
    verdict.ran_note = RAN_NOTE  # what of the changed code ran: a flag the line ends with
    terminal = [line for line in closing_lines(verdict, records, ClosingContext()) if line.startswith("verdict: ")]
    body = comment_body(verdict, records, CommentContext())
    bold = [line[2:-2] for line in body.splitlines() if line.startswith("**") and line.endswith("**")]
    return verdict, terminal, bold


@pytest.mark.parametrize("mode", list(MODES))
def test_the_terminal_and_the_comment_write_the_same_verdict_line(mode):
    verdict, [terminal], bold = _terminal_and_comment(mode)
    assert terminal == verdict_line(verdict)
    sentence = terminal.removeprefix("verdict: ")
    assert bold[0] == markdown_text(sentence, VERDICT_CHARS)  # the same line, made inert for markdown
    assert re.sub(r"\\(.)", r"\1", bold[0]) == sentence  # and read back, word for word (nothing cut)


def test_each_mode_writes_its_own_line_with_the_flags():
    lines = {mode: _terminal_and_comment(mode)[1][0] for mode in MODES}
    assert lines["absolute"].startswith("verdict: pr-abc FAILS in 4 of 4 scenario(s)")
    # verify's default: against upstream run beside it, what it leaves failing in code it touches counted
    assert lines["by change"].startswith("verdict: pr-abc BREAKS engine-qwen3-5-multigpu of 4 compared with upstream")
    assert "; LEAVES 3 failing as upstream does, in code it touches" in lines["by change"]
    # pr's: against its base, the base's own failures the same with it
    assert lines["differential"].startswith(
        "verdict: pr-abc BREAKS engine-qwen3-5-multigpu of 4 compared with its base"
    )
    assert "its base still fails 3 of them, the same with it" in lines["differential"]
    assert lines["by change"].endswith(RAN_NOTE) and lines["differential"].endswith(RAN_NOTE)
    assert RAN_NOTE not in lines["absolute"]  # a failing absolute verdict names the causes above, not the lines


def test_a_by_change_comment_counts_what_the_pr_leaves_failing_in_code_it_touches():
    """In verify's default mode the base's failures in code the PR touches are counted: the comment lists them
    apart from the base's own, which are not."""
    verdict = judge_patch("pr-abc", _records(), {}, **MODES["by change"])
    body = comment_body(verdict, _records(), CommentContext())
    assert "**What this PR leaves failing in code it touches** (as the base fails there; counted):" in body
    assert "What the base still gets wrong" not in body
    differential = comment_body(judge_patch("pr-abc", _records(), {}, differential=True), _records(), CommentContext())
    assert "What this PR leaves failing" not in differential and "What the base still gets wrong" in differential
    # the cell is reproduced for the verdict the comment gives
    again = "python -m harness verify --patch pr-abc --scenario engine-qwen3-5-multigpu"
    assert f"{again}\n```" in body and f"{again} --differential\n```" in differential
