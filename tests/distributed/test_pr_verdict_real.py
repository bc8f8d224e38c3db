"""`harness pr` on real pull requests of verl's repository, judged on their merge base (docs/PR.md): a PR whose
outcomes equal its base's exits 0 and says it changes no outcome; one that breaks scenarios names those only, with
the error, and exits 1; a base that cannot import a GPU package here is never the PR's failure. Marked `verl_repo`:
they run where HARNESS_VERL_REPO names a clone of verl (the PR refs are fetched into it as
refs/pr/N when missing) and skip, saying why, elsewhere (CI). Each runs two scenarios, both arms, and the cells pr's
reach adds where the PR's changed code ran in neither: one to three minutes."""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.records.failure_signature import FailureSignature
from harness.records.results import Record

pytestmark = [pytest.mark.verl_repo, pytest.mark.xdist_group("verl-repo")]


def pr_range(repo, number: int) -> str:
    """BASE...HEAD of pull request `number`: main from the PR's merge base to its head, fetched as refs/pr/N."""
    ref = f"refs/pr/{number}"
    have = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", ref], capture_output=True)
    if have.returncode != 0:
        fetched = subprocess.run(
            ["git", "-C", str(repo), "fetch", "-q", "origin", f"refs/pull/{number}/head:{ref}"],
            capture_output=True,
            text=True,
        )
        if fetched.returncode != 0:
            pytest.skip(f"{repo}: pull request #{number} cannot be fetched: {fetched.stderr.strip()[-200:]}")
    return f"main...{ref}"


def judged(cli, repo, number: int, scenarios: list[str], tmp_path) -> tuple[subprocess.CompletedProcess, dict, str]:
    """(the command, {(scenario, arm): record}, the verdict line) of `harness pr` on the PR, the scenarios given."""
    out = tmp_path / f"pr-{number}.json"
    picked = [word for name in scenarios for word in ("--scenario", name)]
    done = cli("pr", repo, pr_range(repo, number), *picked, "--json", out, "--comment", tmp_path / "c.md", timeout=900)
    records = {}
    if out.exists():
        records = {(r.scenario, r.arm): r for r in map(Record.model_validate, json.loads(out.read_text()))}
    line = next((x for x in done.stdout.splitlines() if x.startswith("verdict: ")), "")
    # the arm's name (pr-<head>) is the diff's file stem: the verdict line is read from after it
    arm = next((arm for _, arm in records if arm not in ("none", "upstream")), "?")
    return done, records, line.replace(f"verdict: {arm} ", "verdict: PR ", 1)


def test_a_pr_that_changes_no_outcome_exits_0_and_says_so(verl_repo, launching_cli, tmp_path):
    """verl #7461 (Liger's fused linear PPO kernel, taken only where liger_kernel imports): on CPU it changes
    nothing; its base (2026-08-18) still has #6659's unreduced lm_head at W=2."""
    done, records, line = judged(launching_cli, verl_repo, 7461, ["fsdp2-1gpu", "fsdp2-multigpu"], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert line.startswith("verdict: PR changes no outcome in the 2 scenario(s) compared with its base")
    assert "its base still fails 1 of them, the same with it: grad lm_head.weight: this rank's gradient only" in line
    base = records[("fsdp2-multigpu", "upstream")]
    assert base.outcome == "mismatch" and base.measures.parity.failing_params() == ["lm_head.weight"]
    assert (tmp_path / "c.md").read_text().count("| same as the base |") == 1


def test_a_pr_that_breaks_a_family_names_those_scenarios_only_and_exits_1(verl_repo, launching_cli, tmp_path):
    """verl #7471 (Qwen3.5's delta-net kernels looked up anew) raises AttributeError where the kernel attribute is
    present but None: new on Qwen3.5, where its base only has #6659's gradient; Qwen3-VL is as its base."""
    scenarios = ["engine-qwen3-5-multigpu", "fsdp2-multigpu"]
    done, records, line = judged(launching_cli, verl_repo, 7471, scenarios, tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert line.startswith(
        "verdict: PR BREAKS engine-qwen3-5-multigpu of 2 compared with its base: AttributeError: "
        "Qwen3_5GatedDeltaNet has no causal_conv1d_fn"
    ), line
    assert "fsdp2-multigpu" not in line.split("; its base")[0]
    assert records[("engine-qwen3-5-multigpu", "upstream")].outcome == "mismatch"
    beside = [r.outcome for (name, arm), r in records.items() if name == "fsdp2-multigpu" and arm != "none"]
    assert beside == ["mismatch", "mismatch"]  # the PR's arm and its base: #6659's gradient, as on main


def test_a_base_that_cannot_import_flash_attn_here_is_not_the_prs_failure(verl_repo, launching_cli, tmp_path):
    """verl #7235 (FusedLinearForPPO's backward gated on needs_input_grad) on a base from before 2026-08-17, whose
    packed path imports flash_attn.bert_padding: where that import stops the engine cells (no adapter for it yet),
    they are "not judged here: cannot run here: flash_attn"; the direct path runs and is compared."""
    done, records, line = judged(launching_cli, verl_repo, 7235, ["fsdp2-multigpu", "direct-multigpu"], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    base = records[("fsdp2-multigpu", "upstream")]
    stopped = base.verdict.error is not None and "flash_attn" in (base.verdict.error.message or "")
    assert ("not judged here: 1 (cannot run here: flash_attn: 1)" in line) == stopped, line
    assert line.startswith(f"verdict: PR changes no outcome in the {1 if stopped else 2} scenario(s)"), line


def test_a_pr_on_a_base_from_before_2026_08_17_runs_and_its_break_is_named(verl_repo, launching_cli, tmp_path):
    """verl #7370 (inactive fused LM-head rows skipped) on 060bebc (2026-08-12): both arms run (cpu-bert-padding),
    and the PR's marking of predictor rows, right for the v1 trainer's nested response mask, skips real rows under
    ray_trainer's dense one: new in fsdp2-1gpu (its base passes), the same as its base under v1 (#6659's gradient)."""
    done, records, line = judged(launching_cli, verl_repo, 7370, ["fsdp2-1gpu", "engine-v1"], tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    # pr's reach (its default budget, commands/reach.py) runs the PR's changed code where the two asked did not, and
    # its cells are judged with theirs: a scenario it reached that the PR breaks joins the count, named as it is.
    assert line.startswith("verdict: PR BREAKS "), line
    assert " compared with its base: log-probs wrong: rows the head skipped" in line, line
    named = line.removeprefix("verdict: PR BREAKS ").split(" of ")[0]
    broken = [n.strip() for n in named.split("(")[-1].rstrip(")").split(",") if n.strip() != "…"]
    assert "fsdp2-1gpu" in broken, line
    reached = {s for s, _ in records} - {"fsdp2-1gpu", "engine-v1"}
    assert set(broken) - {"fsdp2-1gpu"} <= reached, (broken, reached)
    arm = next(a for _, a in records if a != "upstream")
    for scenario in broken:  # each break is the PR's: it fails there, and not as its base does (pr's same_failure)
        base, mine = (FailureSignature.of(records[(scenario, a)]) for a in ("upstream", arm))
        assert mine.failing and not mine.same_failure(base), (scenario, mine.words(), base.words())
    assert "its base still fails 1 of them, the same with it: grad lm_head.weight: this rank's gradient only" in line
    assert records[("fsdp2-1gpu", "upstream")].outcome == "pass"
