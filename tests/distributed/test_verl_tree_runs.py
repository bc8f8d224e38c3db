"""verl as its maintainers have it, end to end: a verl checkout of our own (tests/verl_tree.py: the installed verl's
files committed as `base`, then a commit that applies the candidate fix), judged as a maintainer would judge it.

- `harness pr CHECKOUT base..fsdp2-lmhead-forward` gives the verdict that `verify --patch` of the hand-written diff
  gives on the installed verl (base is the installed verl, byte for byte, so it runs in this environment);
- `--verl CHECKOUT@fsdp2-lmhead-forward` runs in the tree's own environment: upstream there is the fixed verl and
  passes where the installed one fails, `none` (written against 0.9.1: merged with it, a conflict) and the candidate
  (already committed) do not apply there and are skipped rows naming their hunk, and every record names the commit
  it ran on;
- `verify --patch` of a diff that does not apply to that tree runs the other arms to the end and says NOT JUDGED.
"""

from __future__ import annotations

import json

import pytest
from verl_tree import make_verl_repo  # tests/verl_tree.py

from harness.processes.wire import KEEP
from harness.records.results import Record

# One cell each: a W=2 scenario where the installed verl's lm_head gradient is wrong and the fix's is right.
SCENARIO = "fsdp2-multigpu"
# A command in the tree's environment starts that environment's own preloaded parent (this process's cannot fork
# its ranks: another python, another verl); none is left up after the test.
NO_KEPT_PARENT = {KEEP: "0"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_verl_repo(tmp_path_factory.mktemp("tree"))


def _records(path) -> dict[str, Record]:
    return {d["arm"]: Record.model_validate(d) for d in json.loads(path.read_text())}


@pytest.mark.xdist_group("verl-tree")
def test_a_pull_request_gets_the_verdict_of_its_hand_ported_diff(repo, launching_cli, cli_in_process, tmp_path):
    pr_json, verify_json = tmp_path / "pr.json", tmp_path / "verify.json"
    comment = tmp_path / "comment.md"
    # pr's reach (commands/reach.py) with a budget of one candidate's start: the fix's `if fused is None:` false
    # branch runs in no scenario, so the reach runs a candidate for it and stops at the budget (its default, 300 s,
    # tries all ten for nothing more to see here).
    reach = ("--reach-seconds", "1")
    done = launching_cli(
        "pr",
        repo.path,
        "base..fsdp2-lmhead-forward",
        "--scenario",
        SCENARIO,
        *reach,
        "--json",
        pr_json,
        "--comment",
        comment,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [reached] = [line for line in done.stdout.splitlines() if line.startswith("reach: ")]
    assert reached.startswith("reach: 1 piece(s) of the changed code (lines, branches) ran in no scenario"), reached
    tried = int(reached.split("; tried ")[1].split(" ")[0])
    assert tried >= 1 and "(budget 1 s)" in reached, reached
    [left] = [line for line in done.stdout.splitlines() if line.startswith("  still in no scenario: 1 piece(s)")]
    assert "(budget spent; " in left or "(no candidate left; " in left, left
    assert "pr: not judged: 1 file(s) outside verl/ (tests/test_lm_head.py)" in done.stdout
    arm = f"pr-{repo.fix[:10]}"
    # pr's verdict is what the diff changes against its base run beside it (docs/PR.md): the base's crash fixed
    assert f"verdict: {arm} fixes {SCENARIO} of 1 compared with its base, and breaks none" in done.stdout
    # the same verdict as a pull request's comment body (docs/PR.md): its row, and how to run the cell again
    body = comment.read_text()
    rows = [
        [c.strip() for c in line.split("|")[1:-1]] for line in body.splitlines() if line.startswith(f"| {SCENARIO}")
    ]
    assert [row[:5] for row in rows] == [[SCENARIO, "2", "mismatch", "pass", "fixed"]], body
    assert f"python -m harness pr {repo.path} base..fsdp2-lmhead-forward --scenario {SCENARIO}" in body, body
    # The hand-ported diff's verify through cli.main in this process (its results beside the pr's, for the reuse of
    # upstream): its records and exit code are what is compared, which a fresh interpreter's start adds nothing to.
    ported = cli_in_process(
        "verify", "--patch", "patches/fsdp2-lmhead-forward.diff", "--scenario", SCENARIO, "--json", verify_json
    )
    assert ported.returncode == done.returncode, ported.stdout[-3000:]
    pr, hand = _records(pr_json), _records(verify_json)
    # pr runs the base and the PR only (no part of its verdict reads none, docs/PR.md); verify's absolute verdict
    # runs none beside the patch too.
    assert (
        {a: r.outcome for a, r in pr.items()}
        == {"upstream": hand["upstream"].outcome, arm: hand["fsdp2-lmhead-forward"].outcome}
        == {"upstream": "mismatch", arm: "pass"}
    )
    assert hand["none"].outcome == "error"
    assert pr["upstream"].measures.parity.failing_params() == ["lm_head.weight"]
    # The verl it ran on is base's tree, which is the installed verl: stamped with base's commit.
    assert {r.stamp.verl_tree.commit for r in pr.values()} == {repo.base}
    # The hand-ported diff ran on the installed verl (upstream: the same inputs, reused from the pr's run).
    assert hand["fsdp2-lmhead-forward"].stamp.verl_tree is None
    assert hand["upstream"].stamp.reused_from is not None
    assert hand["fsdp2-lmhead-forward"].stamp.reused_from is None and hand["none"].stamp.reused_from is None


@pytest.mark.xdist_group("verl-tree")
def test_a_verl_tree_runs_in_its_own_environment_and_arms_that_do_not_apply_are_rows(repo, harness_cli, tmp_path):
    out = tmp_path / "run.json"
    spec = f"{repo.path}@fsdp2-lmhead-forward"
    arms = ["--arm", "upstream", "--arm", "none", "--arm", "fsdp2-lmhead-forward"]
    done = harness_cli("run", "--verl", spec, "--scenario", SCENARIO, *arms, "--json", out, env=NO_KEPT_PARENT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = _records(out)
    assert records["upstream"].outcome == "pass", records["upstream"].verdict  # the fix, committed, is upstream here
    for name, already in (("none", False), ("fsdp2-lmhead-forward", True)):
        skipped = records[name]
        assert skipped.outcome == "skipped" and skipped.verdict.skipped_reason.startswith("does not apply: ")
        assert skipped.verdict.not_applied.file == "verl/models/transformers/qwen3_vl.py"
        assert skipped.verdict.not_applied.hunk.startswith("hunk #")
        # The candidate is this tree's HEAD: its change is there already (nothing merged). none is merged with the
        # installed verl and conflicts: #6659's lines it removes are gone there, replaced by the candidate's.
        assert skipped.verdict.not_applied.already_there is already
        if not already:
            assert skipped.verdict.not_applied.why.startswith("it conflicts with this verl's lines ")
    for record in records.values():
        assert record.stamp.verl_tree.commit == repo.fix and record.stamp.verl_tree.ref == "fsdp2-lmhead-forward"
    # The versions line breaks between its parts to fit 120 columns where the tree's path is long: read it whole.
    assert f"verl 0.9.1 from {repo.path}@fsdp2-lmhead-forward ({repo.fix[:12]})" in " ".join(done.stdout.split())

    # verify of a patch that does not apply there: the others run to the end, the patch is not judged (exit 2).
    verify = harness_cli(
        "verify", "--verl", spec, "--patch", "patches/none.diff", "--scenario", SCENARIO, env=NO_KEPT_PARENT
    )
    assert verify.returncode == 2, verify.stdout[-3000:] + verify.stderr[-3000:]
    assert "verdict: none NOT JUDGED: it does not apply to this verl (hunk #" in verify.stdout
    assert f"| {SCENARIO} | 2 | upstream | pass " in verify.stdout
