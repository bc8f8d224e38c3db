"""issue 64's done-when, on verl's own current GRPO example scripts (read from verl's real repository at
$HARNESS_VERL_REPO, never copied into the project; skipped without it): each script of the families the harness has
imports on the GPU branch (`--env DEVICE=gpu`), its model's tiny model chosen, every value it writes free of shell
syntax, use_fused_kernels written as the script (or verl's default) has it, so that verify can say whether the recipe
runs the fused head."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from harness.commands.importer import default_out, loaded_text, scale, scenario_text
from harness.inputs.verl_overrides import read_overrides_file

pytestmark = [pytest.mark.unit, pytest.mark.verl_repo]

SCRIPTS = {  # examples/grpo_trainer/<name>.sh -> its tiny model
    "run_qwen3_vl_8b_fsdp": "tiny-qwen3-vl",
    "run_qwen3_vl_30b_a3b_fsdp": "tiny-qwen3-vl-moe",
    "run_qwen2_5_vl_7b_fsdp": "tiny-qwen2-5-vl",
    "run_qwen3_8b_fsdp": "tiny-qwen3",
    "run_qwen3_5_27b_fsdp": "tiny-qwen3-5",
    "run_qwen3_5_27b_fsdp_turbo": "tiny-qwen3-5",
    "run_qwen3_5_2b_video_fsdp": "tiny-qwen3-5",
    "run_qwen3_5_2b_openr1_fsdp": "tiny-qwen3-5",
}


def _show(repo: Path, path: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "show", f"main:{path}"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"{path} is not in {repo} at main: {done.stderr.strip()}")
    return done.stdout


@pytest.mark.parametrize("name, tiny", sorted(SCRIPTS.items()))
def test_verls_current_grpo_script_imports_with_no_shell_fragment_and_its_fused_setting(verl_repo, name, tiny):
    where = f"examples/grpo_trainer/{name}.sh"
    read = read_overrides_file(_show(verl_repo, where), where, {"DEVICE": "gpu"})
    out = scale(read.pairs, None, read.as_written)
    out.dropped, out.notes = read.dropped + out.dropped, read.notes
    assert out.fields["model"] == tiny
    # the script's own value, or verl's default (false) written where the harness's own (true) differs
    assert isinstance(out.names.get("actor_rollout_ref.model.use_fused_kernels"), bool)
    text = scenario_text(Path(f"{name}.sh"), out)
    body = text[text.index("\ndescription:") :]
    assert "$" not in body and "`" not in body and "\x00" not in body, "a piece of shell syntax written as a value"
    with tempfile.TemporaryDirectory() as tmp:
        loaded = loaded_text(Path(tmp) / default_out(Path(f"{name}.sh"), out).name, text)
    assert loaded.path == "engine" and loaded.steps == 2
    if "turbo" in name:
        assert "turbo" not in default_out(Path(f"{name}.sh"), out).name and "not the script's fsdp_turbo" in text
    if "video" in name:
        assert "images stand in for video" in loaded.description
