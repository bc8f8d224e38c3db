"""issue 64: import says truthfully what it imported. A script that runs another trainer is refused in one line
naming it, distillation's teacher is named; every setting it cannot model is printed; the scenario's name and
description say what it is not; a binary file, a value that is no number where verl expects one, and a script of
thousands of unknown names each end in one line, a close match searched for the first few only
(commands/importer.py)."""

from __future__ import annotations

import pytest

from harness.commands.importer import read_overrides, scale
from harness.errors import UsageError

pytestmark = pytest.mark.unit

HEAD = "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen3.5-27B"


def _script(tmp_path, body: str, name: str = "run.sh"):
    path = tmp_path / name
    path.write_text(body)
    return path


def test_a_script_that_runs_verls_sft_trainer_is_refused_naming_it(tmp_path, cli_in_process):
    sft = _script(tmp_path, "set -xeuo pipefail\ntorchrun --nproc_per_node=8 -m verl.trainer.sft_trainer a.b=1\n")
    message = cli_in_process.usage_error("import", sft, "--out", tmp_path / "x.yaml")
    assert message == (
        f"error: {sft}: runs verl.trainer.sft_trainer (verl's SFT trainer (supervised fine-tuning)), not "
        "verl.trainer.main_ppo's PPO/GRPO actor update that this harness judges: nothing to import"
    )


def test_distillation_is_imported_with_its_trainer_named_and_the_name_says_what_it_is_not(tmp_path, cli_in_process):
    body = (
        f"{HEAD} distillation.enabled=True distillation.distillation_loss.loss_mode=k1 "
        "actor_rollout_ref.actor.strategy=fsdp_turbo data.train_files=/d/tinyllava-video-r1/train.parquet\n"
    )
    script = _script(tmp_path, body, "run_qwen3_5_opd_video_fsdp_turbo.sh")
    done = cli_in_process("import", script, "--out", tmp_path / "out.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == (
        "trainer: verl.trainer.main_ppo with on-policy distillation (a teacher model, loss_mode k1): imported as its "
        "GRPO actor update without the teacher's loss"
    )
    assert "not as the script runs: FSDP2, not the script's fsdp_turbo" in lines
    assert "not as the script runs: images stand in for video (the harness's seeded images, not its videos)" in lines
    assert "not as the script runs: no distillation: the teacher and its loss are not run" in lines
    # every setting import cannot model is printed, with why
    assert any(line.startswith("  distillation: ") and "distillation.enabled=True" in line for line in lines)
    text = (tmp_path / "out.yaml").read_text()
    assert "images stand in for video" in text.split("description:", 1)[1].splitlines()[0]
    from harness.commands.importer import default_out
    from harness.inputs.verl_overrides import read_overrides_file

    out = scale(read_overrides_file(body, "run.sh").pairs)
    assert default_out(script, out).name == "run-qwen3-5-fsdp.yaml"  # no -turbo, -opd or -video on what is none


def test_a_binary_file_is_one_line_exit_2(tmp_path, cli_in_process):
    blob = tmp_path / "model.bin"
    blob.write_bytes(b"\x7fELF\x02\x01\x00\x00" + bytes(range(256)))
    assert cli_in_process.usage_error("import", blob, "--out", tmp_path / "x.yaml") == (
        f"error: {blob}: not a text file (a NUL byte at byte 6): give a run script or key=value lines"
    )
    latin = tmp_path / "latin.sh"
    latin.write_bytes(b"a.b=caf\xe9\n")
    message = cli_in_process.usage_error("import", latin, "--out", tmp_path / "y")
    assert "not a text file (not UTF-8 at byte 7)" in message


@pytest.mark.parametrize(
    "setting, words",
    [
        ("data.train_batch_size='aaaa'", "verl expects an integer here (its default is 1024), not 'aaaa'"),
        ("actor_rollout_ref.actor.optim.lr=fast", "verl expects a number here (its default is 1e-06), not 'fast'"),
    ],
)
def test_a_value_that_is_no_number_where_verl_expects_one_is_refused(setting, words):
    with pytest.raises(UsageError) as caught:
        scale(read_overrides(f"{HEAD} {setting}\n"))
    assert str(caught.value).endswith(words)


def test_numbers_where_verl_expects_them_are_kept_and_scaled():
    out = scale(read_overrides(f"{HEAD} data.train_batch_size=512 actor_rollout_ref.actor.optim.min_lr_ratio=null\n"))
    assert isinstance(out.names["data.train_batch_size"], int) and out.names["data.train_batch_size"] < 512


def test_a_close_match_is_searched_for_the_first_unknown_names_only_and_a_long_value_is_kept_whole(monkeypatch):
    """issue 64: 78k settings did not finish in 300 s, a close-match search (difflib over verl's names) per unknown
    key. Past CLOSEST_SEARCHED unknown names none is searched; each is still dropped, named. (What a 2 MB script with
    20,000 unknown names takes is a benchmark's figure, in docs/SCENARIOS.md, not this test's.)"""
    from harness.commands import importer

    searched = []
    real = importer.closest_name
    monkeypatch.setattr(importer, "closest_name", lambda name: searched.append(name) or real(name))
    names = " ".join(f"+custom.key_{k}=1" for k in range(300))
    body = f'{HEAD} {names} trainer.project_name="{"p" * 200_000}"\n'
    out = scale(read_overrides(body))
    assert len(out.dropped) == 300 and len(out.names["trainer.project_name"]) == 200_000
    assert len(searched) == importer.CLOSEST_SEARCHED


def test_the_environment_given_chooses_the_branch_a_script_takes(tmp_path):
    body = (
        'DEVICE=${DEVICE:-$(python3 -c "import torch_npu" && echo npu || echo gpu)}\n'
        'if [ "$DEVICE" = npu ]; then EXTRA=(actor_rollout_ref.actor.fsdp_config.param_offload=True)\n'
        "else EXTRA=(actor_rollout_ref.model.use_fused_kernels=True); fi\n"
        f'{HEAD} "${{EXTRA[@]}}"\n'
    )
    from harness.inputs.verl_overrides import read_overrides_file

    gpu = read_overrides_file(body, "run.sh", {"DEVICE": "gpu"})
    assert ("actor_rollout_ref.model.use_fused_kernels", "True") in gpu.pairs and not gpu.dropped
    unknown = read_overrides_file(body, "run.sh")
    assert not any(k.endswith("use_fused_kernels") for k, _ in unknown.pairs)
    (dropped,) = unknown.dropped
    assert dropped.startswith("EXTRA=(actor_rollout_ref.model.use_fused_kernels=True) (line 3): unknown to import")
    assert "which import cannot evaluate" in dropped


def test_env_on_the_command_line_gives_the_script_its_variable(tmp_path, cli_in_process):
    body = (
        'DEVICE=${DEVICE:-$(detect)}\nif [ "$DEVICE" = gpu ]; then F=True; else F=False; fi\n'
        f"{HEAD} actor_rollout_ref.model.use_fused_kernels=$F\n"
    )
    script = _script(tmp_path, body)
    done = cli_in_process("import", script, "--env", "DEVICE=gpu", "--out", tmp_path / "gpu.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "actor_rollout_ref.model.use_fused_kernels: true" in (tmp_path / "gpu.yaml").read_text()
    bad = cli_in_process.usage_error("import", script, "--env", "DEVICE", "--out", tmp_path / "x.yaml")
    assert bad == "error: --env DEVICE: not NAME=VALUE"
