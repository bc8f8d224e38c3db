"""verl's real history (tests marked `verl_repo`: a clone at $HARNESS_VERL_REPO; skipped, saying why, without one,
as in CI): a commit from before verl #7127 (2026-08-17: its pure-torch fallbacks for flash_attn.bert_padding) runs
the engine path here through the cpu-bert-padding adapter, and `harness bisect` finds the commit where a cell's
outcome changes on a short real range.

Each test starts its own torchrun cells (none is in `make test`'s CI run: the repository is absent there)."""

from __future__ import annotations

import json
import re

import pytest

from harness.processes.wire import KEEP
from harness.records.results import Record

pytestmark = [pytest.mark.verl_repo, pytest.mark.xdist_group("verl-history")]

SCENARIO = "fsdp2-multigpu"
# verl #6659 (2026-07-10: full_tensor() on the sharded lm_head) and its parent: before 2026-08-17, so verl there
# imports flash_attn.bert_padding on the packed path; the parent crashes on the sharded weight, #6659 leaves the
# lm_head gradient unreduced at two ranks.
PR_6659 = "ad2e3c272"
NO_KEPT_PARENT = {KEEP: "0"}  # each tree's environment starts a parent of its own: none left up after the test


def test_a_commit_before_the_flash_attn_fallbacks_runs_the_engine_path(verl_repo, harness_cli, tmp_path):
    out = tmp_path / "run.json"
    done = harness_cli(
        "run", "--verl", f"{verl_repo}@{PR_6659}", "--scenario", SCENARIO, "--json", out, env=NO_KEPT_PARENT
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]  # run reports; it judges no patch
    (record,) = [Record.model_validate(d) for d in json.loads(out.read_text())]
    assert "flash_attn" not in (record.verdict.why or "")
    assert record.outcome == "mismatch" and record.measures.parity.failing_params() == ["lm_head.weight"]
    # Before #7127 (flash_attn.bert_padding), inside #6984..#7109 (the training step's log-probs dropped).
    assert record.measures.adapters[-2:] == ["cpu-bert-padding", "log-probs-by-infer"]
    assert record.stamp.verl_tree.commit.startswith(PR_6659)


def test_a_release_before_verls_platform_layer_runs_on_the_cpu_device_adapters(verl_repo, harness_cli, tmp_path):
    # v0.8.0 (2026-06-01): before #6086's verl.plugin.platform, #6717's zero_grad_on_exit and #7127. Its fused forward
    # reads the sharded lm_head weight (before #6659): the crash, reached through verl's own engine; its unfused path
    # passes, every gradient compared (kept through the train-mode context's exit).
    out = tmp_path / "run.json"
    scenarios = ["--scenario", SCENARIO, "--scenario", "engine-unfused"]
    done = harness_cli("run", "--verl", f"{verl_repo}@v0.8.0", *scenarios, "--json", out, env=NO_KEPT_PARENT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = {d["scenario"]: Record.model_validate(d) for d in json.loads(out.read_text())}
    fused, unfused = records[SCENARIO], records["engine-unfused"]
    assert fused.outcome == "error" and fused.verdict.cause.subject == "dtensor-outside-fsdp-forward", fused.verdict
    assert fused.measures.adapters == ["cpu-device-module", "engine-device-cpu", "cpu-bert-padding"]
    assert unfused.outcome == "pass", unfused.verdict
    assert unfused.measures.adapters[-1] == "keep-grads-on-exit"


def test_bisect_finds_the_commit_that_turns_the_crash_into_the_gradient_error(verl_repo, harness_cli):
    # After GOOD (#6659~3) two commits touch verl/ (#7005, then #6659) and one does not (#7008, docs): the search
    # leaves #7008 out, runs #7005 (the crash still) and names #6659.
    done = harness_cli("bisect", verl_repo, f"{PR_6659}~3..{PR_6659}", "--scenario", SCENARIO, env=NO_KEPT_PARENT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"GOOD's outcome: error \(RuntimeError; lm_head\.weight\)", done.stdout)
    found = re.search(r"first commit where it changes: (\w+) ", done.stdout)
    assert found and PR_6659.startswith(found.group(1)[:9]), done.stdout
    assert "to mismatch (lm_head.weight)" in done.stdout
    assert "2 commit(s) touch verl/ (1 that change nothing there are left out" in done.stdout
