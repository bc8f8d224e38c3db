"""`harness import --examples`: every script of verl's examples/ that trains with the FSDP engine (verl's naming
rule: *_fsdp.sh, *_fsdp2.sh, *_fsdp_turbo.sh) gets one of three answers, and every scenario written for an
imported or not-affected script loads (read from $HARNESS_VERL_REPO's main; skipped without it). The comment
writer and the file names are checked without it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.commands.import_survey import IMPORTED, NOT_AFFECTED, REFUSED, fsdp_scripts, markdown, survey
from harness.commands.importer import default_out, loaded_text, scale, scenario_text
from harness.inputs.verl_overrides import read_overrides_file
from harness.paths import ROOT

pytestmark = pytest.mark.unit

DOC_COMMIT = "1dda039b9c6311889a9c9a26040677e1254814f9"
HEAD = "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen3-8B"


@pytest.mark.verl_repo
def test_every_fsdp_example_is_imported_refused_or_not_affected_and_what_is_written_loads(verl_repo, tmp_path):
    tree = tmp_path / "verl"
    subprocess.run(["git", "clone", "-q", "--shared", str(verl_repo), str(tree)], check=True)
    if subprocess.run(["git", "-C", str(tree), "checkout", "-q", "--detach", DOC_COMMIT]).returncode != 0:
        pytest.skip(f"{verl_repo} has no {DOC_COMMIT} (verl main of 2026-08-22, the commit docs/EXAMPLES.md answers)")
    answers = survey(tree / "examples")
    assert len(answers) == len(fsdp_scripts(tree / "examples")) > 0
    assert {a.answer for a in answers} <= {IMPORTED, NOT_AFFECTED, REFUSED}
    assert all(a.loads for a in answers if a.answer != REFUSED) and all(a.detail for a in answers)
    assert all("\n" not in a.detail for a in answers)
    by = {a.script: a for a in answers}
    # the cases: Qwen2.5-VL's imports with no --env; the Qwen3-8B PPO/RLOO/GSPO scripts load (their
    # reference settings dropped) and are not affected (no use_fused_kernels); three different file names
    assert by["grpo_trainer/run_qwen2_5_vl_7b_fsdp.sh"].answer == IMPORTED
    qwen3 = [f"{d}_trainer/run_qwen3_8b_fsdp.sh" for d in ("ppo", "rloo", "gspo")]
    assert all(by[s].answer == NOT_AFFECTED and "use_fused_kernels is false" in by[s].detail for s in qwen3)
    assert len({default_out(tree / "examples" / s).name for s in qwen3}) == 3
    assert markdown(answers).startswith(f"{len(answers)} scripts: ")
    # docs/EXAMPLES.md holds this very table
    assert markdown(answers) in (ROOT / "docs" / "EXAMPLES.md").read_text()


def test_a_dropped_multi_line_entry_is_one_comment_line_and_the_file_loads(tmp_path):
    script = f"EXTRA=(\n  actor_rollout_ref.model.use_fused_kernels=True\n  data.x=1\n)\n{HEAD} $EXTRA_UNSET\n"
    read = read_overrides_file(script, "run.sh")
    out = scale(read.pairs, None, read.as_written)
    out.dropped = read.dropped + [*out.dropped, "a=(\n  b=1\n  c=2\n): a dropped entry over three lines"]
    text = scenario_text(Path("run.sh"), out)
    assert all(line.startswith("#") for line in text[: text.index("\ndescription:")].splitlines())
    assert "a=(\\n  b=1" in text
    assert loaded_text(tmp_path / "run.yaml", text).path == "engine"


def test_reference_settings_for_a_reference_that_never_runs_are_dropped_and_said(tmp_path):
    read = read_overrides_file(f"{HEAD} actor_rollout_ref.ref.fsdp_config.param_offload=True\n", "run.sh")
    out = scale(read.pairs)
    assert "actor_rollout_ref.ref.fsdp_config.param_offload" not in out.names
    assert any("reference engine never runs here" in d for d in out.dropped)
    assert loaded_text(tmp_path / "run.yaml", scenario_text(Path("run.sh"), out)).path == "engine"
    # verl's default strategy (fsdp) is said where the script sets none
    assert any("not verl's default strategy fsdp" in words for _, words in out.not_as_run)


def test_scripts_of_one_name_in_different_example_folders_get_different_files():
    names = {default_out(Path(f"verl/examples/{d}/run_qwen3_8b_fsdp.sh")).name for d in ("ppo_trainer", "rloo_trainer")}
    assert names == {"ppo-trainer-run-qwen3-8b-fsdp.yaml", "rloo-trainer-run-qwen3-8b-fsdp.yaml"}
    assert default_out(Path("elsewhere/run_qwen3_8b_fsdp.sh")).name == "run-qwen3-8b-fsdp.yaml"
