"""What `harness pr` plans (commands/run.py, reached through verify --pr): the PR's arm and its base, never `none`,
whose cells its verdict does not read; the base's cells reused from an earlier run where their inputs are the same,
each named; the hint to run what was left out naming the pr command the user ran. Planning only: no cell runs."""

from __future__ import annotations

from argparse import Namespace

import pytest

from harness.cli import build_parser
from harness.commands.run import beside_arms, left_out_lines, rerun_command, reused_arms
from harness.records.results import Record
from harness.run.runner import _reused_line

pytestmark = pytest.mark.unit

PR_ARGV = ["verify", "--patch", "/x/pr-abc.diff", "--pr", "/src/verl", "main...refs/pr/7417"]


def test_pr_runs_its_base_beside_the_pr_and_not_none():
    args = build_parser().parse_args(PR_ARGV)  # what cmd_pr execs
    assert beside_arms("pr-abc", args) == ["upstream"]
    assert reused_arms(args, beside_arms("pr-abc", args)) == {"upstream"}  # the base's cells may be reused
    assert reused_arms(build_parser().parse_args([*PR_ARGV, "--fresh"]), ["upstream"]) == frozenset()


@pytest.mark.parametrize(
    ("argv", "arm", "beside"),
    [
        (["verify", "--patch", "fix.diff"], "fix", ["none", "upstream"]),  # the absolute verdict lists both
        (["verify", "--patch", "fix.diff", "--differential"], "fix", ["upstream"]),
        (["verify", "--differential"], "upstream", ["none"]),  # upstream judged against #6659 undone
        (["verify", "--patch", "fix.diff", "--alone"], "fix", []),
    ],
)
def test_verify_keeps_none_where_its_verdict_reads_it(argv, arm, beside):
    assert beside_arms(arm, build_parser().parse_args(argv)) == beside


def test_the_hint_after_pr_names_the_pr_command():
    left_out = [Namespace(name="engine-update-8")]
    text = left_out_lines(left_out, rerun_command(build_parser().parse_args(PR_ARGV)))
    assert "python -m harness pr /src/verl main...refs/pr/7417 --nightly" in text
    assert "make pr CHECKOUT=/src/verl RANGE=main...refs/pr/7417 ARGS=--nightly" in text
    assert "harness verify" not in text
    plain = left_out_lines(left_out, rerun_command(build_parser().parse_args(["verify"])))
    assert "python -m harness verify --nightly" in plain


def test_each_reused_cell_is_named_with_the_record_it_stands_on():
    reused = {}
    for i, scenario in enumerate(("engine-sp2", "fsdp2-multigpu")):
        record = Record(scenario=scenario, arm="upstream", outcome="pass")
        record.stamp.reused_from = f"results/20261201T000000Z-verify-1.jsonl:{i + 1}"
        reused[i * 2 + 1] = record
    head, *cells = _reused_line(reused, 4).splitlines()
    assert head.startswith("2 of 4 cells (upstream) not run again")
    assert cells == [
        "  engine-sp2 x upstream: reused from results/20261201T000000Z-verify-1.jsonl:1",
        "  fsdp2-multigpu x upstream: reused from results/20261201T000000Z-verify-1.jsonl:2",
    ]


def test_pr_reaches_by_default_and_verify_only_when_asked():
    from harness.cli import PR_REACH_SECONDS

    assert build_parser().parse_args(["pr", "/src/verl", "main...refs/pr/7417"]).reach_seconds == PR_REACH_SECONDS > 0
    assert build_parser().parse_args(["pr", "/src/verl", "a...b", "--reach-seconds", "0"]).reach_seconds == 0
    assert build_parser().parse_args(PR_ARGV).reach_seconds == 0  # verify's own default
