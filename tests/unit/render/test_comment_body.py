"""A pull request's verdict in words (render/differential.py, render/verdict_line.py) and as a markdown comment body
(render/comment_body.py, written by commands/pr_comment.py): the line leads with what the patch changes, then what its
base still gets wrong; the comment has the differential table, the base's causes once, what of the PR's changed code
ran, what was not judged, how to reproduce."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from record_builder import FLASH_ATTN, cell, error, unreduced  # tests/record_builder.py

from harness.judge_change.patch_verdict import judge_patch
from harness.render.comment_body import MARKER, CommentContext, comment_body
from harness.render.differential import change_block
from harness.render.verdict_line import verdict_line

pytestmark = pytest.mark.unit

RAISED = error("AttributeError", "Qwen3_5GatedDeltaNet has no causal_conv1d_fn, and transformers exposes neither")


def _records(breaks: bool) -> list:
    """Three Qwen3-VL scenarios the base fails as #6659 left them, one Qwen3.5 scenario the base passes (the patch
    raises there where `breaks`), one the base cannot import flash_attn for."""
    records = []
    for name in ("fsdp2-multigpu", "fsdp2-compile", "engine-no-sync"):
        records += [unreduced("pr-abc", name), unreduced("upstream", name)]
    qwen35 = cell("pr-abc", "error", "engine-qwen3-5-multigpu", err=RAISED) if breaks else None
    records += [qwen35 or cell("pr-abc", "pass", "engine-qwen3-5-multigpu")]
    records += [cell("upstream", "pass", "engine-qwen3-5-multigpu")]
    records += [cell("pr-abc", "error", "engine-sp2", err=FLASH_ATTN), cell("upstream", "error", "engine-sp2")]
    records[-1].verdict.error = records[-2].verdict.error
    return records


def test_a_pr_that_changes_no_outcome_says_so_first_then_what_its_base_still_gets_wrong():
    verdict = judge_patch("pr-abc", _records(breaks=False), {}, differential=True)
    assert verdict.exit_code == 0
    assert verdict_line(verdict) == (
        "verdict: pr-abc changes no outcome in the 4 scenario(s) compared with its base; its base still fails 3 of "
        "them, the same with it: grad lm_head.weight: this rank's gradient only, not reduced across ranks (3); not "
        "judged here: 1 (cannot run here: flash_attn: 1)"
    )


def test_a_pr_that_breaks_names_those_scenarios_only_with_the_error():
    verdict = judge_patch("pr-abc", _records(breaks=True), {}, differential=True)
    line = verdict_line(verdict)
    assert verdict.exit_code == 1
    assert line.startswith(
        "verdict: pr-abc BREAKS engine-qwen3-5-multigpu of 4 compared with its base: AttributeError: "
        "Qwen3_5GatedDeltaNet has no causal_conv1d_fn"
    ), line
    assert "fsdp2-multigpu" not in line and "its base still fails 3 of them, the same with it" in line
    block = change_block(verdict, [])
    assert block[1].startswith("  new: ") and block[2].endswith("engine-qwen3-5-multigpu (the base passes)")
    assert any(line.startswith("    cannot run here: flash_attn: engine-sp2") for line in block), block


def test_the_comment_body_has_the_table_the_bases_causes_what_did_not_run_and_how_to_reproduce():
    verdict = judge_patch("pr-abc", _records(breaks=True), {}, differential=True)
    context = CommentContext(pr=("~/verl", "main...pr-7471"), left_out=("engine-update-8",), title="Resolve kernels")
    body = comment_body(verdict, _records(breaks=True), context)
    assert body.startswith(MARKER + "\n### fsdp2-harness: pr-abc against its base")
    rows = [line for line in body.splitlines() if line.startswith("| ")]
    assert [c.strip() for c in rows[0].split("|")[1:-1]] == ["scenario", "W", "base", "this PR", "change", "cause"]
    assert rows[1].startswith("| engine-qwen3-5-multigpu") and "**new**" in rows[1] and "| pass " in rows[1]
    assert sum("same as the base" in r for r in rows) == 3 and "not judged here" in rows[-1]
    assert "**What the base still gets wrong** (the same with this PR; not counted against it):" in body
    # The records' words are inert markdown (render/untrusted.py): '_' is escaped, and reads '_' on GitHub.
    assert "- grad lm\\_head.weight: this rank's gradient only, not reduced across ranks: `fsdp2-multigpu`" in body
    assert "- cannot run here: flash\\_attn in 1 scenario(s) (`engine-sp2`)" in body
    assert "left out: 1 scenario(s) tagged nightly (minutes a cell: `engine-update-8`); `--nightly` runs them" in body
    assert "| **new**          | AttributeError: Qwen3\\_5GatedDeltaNet has no causal\\_conv1d\\_fn" in rows[1]
    assert "```\npython -m harness pr ~/verl main...pr-7471 --scenario engine-qwen3-5-multigpu\n```" in body


def test_the_comment_is_written_whole_where_asked(tmp_path):
    from harness.commands.pr_comment import write_comment

    records = _records(breaks=False)
    verdict = judge_patch("pr-abc", records, {}, differential=True)
    args = SimpleNamespace(comment=str(tmp_path / "out" / "comment.md"), pr=None, patch=None)
    result = SimpleNamespace(records=records, path=tmp_path / "results.jsonl")
    line = write_comment(args, verdict, result, [])
    written = (tmp_path / "out" / "comment.md").read_text()
    assert line.startswith("comment: ") and written.startswith(MARKER) and "changes no outcome" in written
    assert "python -m harness verify --patch pr-abc --scenario fsdp2-multigpu --differential" in written
    assert list((tmp_path / "out").iterdir()) == [tmp_path / "out" / "comment.md"]  # no part file left


def test_verify_adds_one_line_against_upstream_and_none_without_upstream_beside_it():
    from harness.render.differential import summary_line

    verdict = judge_patch("pr-abc", _records(breaks=True), {})
    assert summary_line(verdict) == (
        "against upstream run beside it: 1 new, 3 the same as upstream, 1 not judged (harness pr's verdict counts "
        "only the new)"
    )
    alone = judge_patch("pr-abc", [r for r in _records(breaks=True) if r.arm == "pr-abc"], {})
    assert summary_line(alone) is None


def test_a_pr_whose_changed_lines_ran_nowhere_is_told_that_its_verdict_says_nothing_about_them():
    """ "changes no outcome" of a change whose lines ran in no scenario is no evidence: the line says so."""
    verdict = judge_patch("pr-abc", _records(breaks=False), {}, differential=True)
    verdict.ran_note = "; but none of its changed lines ran in any of them: this verdict says nothing about the change"
    line = verdict_line(verdict)
    assert line.startswith("verdict: pr-abc changes no outcome in the 4 scenario(s)") and line.endswith(
        "(cannot run here: flash_attn: 1); but none of its changed lines ran in any of them: this verdict says "
        "nothing about the change"
    ), line


def test_the_comment_shows_what_of_the_prs_changed_code_ran_inert():
    """verify's closing block's lines on the changed code (verdict.ran_lines) in the comment, in a code block: a file
    name of the PR's cannot mention, link, or close the block early."""
    verdict = judge_patch("pr-abc", _records(breaks=False), {}, differential=True)
    verdict.ran_lines = [
        "the patch's changed code that ran (4 cell(s) watched): 3 of 4 changed line(s) ran",
        "  verl/models/transformers/qwen3_vl.py: 3 of 4 changed line(s) ran",
        "    line 12, in `forward`: ran in no scenario",
        "  verl/@team/```x<!--y.py: 0 of 1 changed line(s) ran",
    ]
    body = comment_body(verdict, _records(breaks=False), CommentContext())
    at = body.index("**What of this PR's changed code ran**")
    block = body[at:].split("\n\n")[1]
    fence = block.splitlines()[0]
    assert len(fence) > 3 and set(fence) == {"`"} and block.endswith("\n" + fence)  # longer than the name's run
    inner = block.splitlines()[1:-1]
    assert inner[:3] == verdict.ran_lines[:3]  # as the terminal has them
    assert "<!--" not in inner[3] and "```x" in inner[3]  # never a second marker
    assert body.count("<!--") == 1
    assert body.index("**What of this PR's changed code ran**") < body.index("Reproduce one cell")
    quiet = comment_body(judge_patch("pr-abc", _records(breaks=False), {}, differential=True), [], CommentContext())
    assert "changed code ran" not in quiet  # nothing watched: no block
