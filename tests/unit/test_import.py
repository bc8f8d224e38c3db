"""`python -m harness import FILE` (commands/importer.py): a verl run script or a file of overrides becomes a scenario
with a `verl:` block, scaled to the tiny model and this host, every scaled value and dropped setting printed with why;
the written scenario loads (tests/distributed/test_imported_scenario.py runs one)."""

from __future__ import annotations

import pytest

from harness.commands.importer import hydra_value, read_overrides, scale, yaml_float
from harness.inputs.scenario import load_scenario
from harness.paths import ROOT

pytestmark = pytest.mark.unit

SCRIPTS = ROOT / "tests" / "fixtures" / "verl_scripts"
QWEN = SCRIPTS / "qwen3_vl_8b_grpo.sh"
PLAIN = SCRIPTS / "adamw_update.overrides"


def test_a_scripts_overrides_with_its_shell_variables_expanded():
    pairs = dict(read_overrides(QWEN.read_text()))
    assert pairs["actor_rollout_ref.rollout.n"] == "5"  # N_RESPONSES=5
    assert pairs["actor_rollout_ref.rollout.name"] == "vllm"  # ${1:-vllm}: no argument, the default
    assert pairs["actor_rollout_ref.model.path"] == "Qwen/Qwen3-VL-8B-Instruct"  # ${MODEL_PATH:-...}
    assert pairs["data.train_files"] == "$HOME/data/geo3k/train.parquet"  # unset: as written
    assert pairs["data.truncation"] == "error"  # shell quotes removed
    assert "+actor_rollout_ref.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache" in pairs
    assert not any(k.startswith("$") for k in pairs) and len(pairs) == 47


def test_plain_lines_and_script_give_the_same_pairs(tmp_path):
    plain = tmp_path / "o.txt"
    plain.write_text("# a comment\na.b=1\n\n+c.d='x y'\n")
    assert read_overrides(plain.read_text()) == [("a.b", "1"), ("+c.d", "x y")]
    script = tmp_path / "run.sh"
    script.write_text("X=1\npython3 -m verl.trainer.main_ppo \\\n  a.b=$X \\\n  +c.d='x y' $@\n")
    assert read_overrides(script.read_text()) == [("a.b", "1"), ("+c.d", "x y")]


@pytest.mark.parametrize(
    "text, value",
    [("True", True), ("false", False), ("null", None), ("10", 10), ("1e-6", 1e-6), ("[0.9,0.95]", [0.9, 0.95])],
)
def test_values_are_read_as_hydra_reads_them(text, value):
    assert hydra_value(text) == value


def test_floats_are_written_as_yaml_reads_them_back():
    import yaml

    for x in (1e-6, 0.002, 3.0, 1.5e20):
        assert yaml.safe_load(yaml_float(x)) == x


def test_the_recipe_is_scaled_to_the_tiny_model_and_two_ranks():
    out = scale(read_overrides(QWEN.read_text()))
    assert out.fields["ranks"] == 2 and out.fields["steps"] == 2 and out.fields["model"] == "tiny-qwen3-vl"
    assert out.names["actor_rollout_ref.rollout.n"] == 2
    assert out.names["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 2
    # 512 / 128 = 4 mini-batches a step -> 2, each one micro-batch of 2 samples on each of 2 ranks (2 prompts x n 2)
    assert out.names["actor_rollout_ref.actor.ppo_mini_batch_size"] == 2
    assert out.names["data.train_batch_size"] == 4
    # 24576 tokens hold 8 of the script's longest sequences (1024 + 2048): 8 of the tiny 32
    assert out.names["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 256
    assert out.names["actor_rollout_ref.actor.optim.lr"] == 1e-6  # a setting, not a size: kept
    assert any(line.startswith("ranks: 8 (trainer.nnodes 1 x trainer.n_gpus_per_node 8) -> 2") for line in out.scaled)
    assert "actor_rollout_ref.rollout.name" in out.names  # not applicable: kept, shown with why


def test_a_one_gpu_script_stays_one_rank():
    out = scale([("trainer.n_gpus_per_node", "1"), ("trainer.nnodes", "1")])
    assert out.fields["ranks"] == 1


def test_unknown_refused_and_other_fixed_values_are_dropped_with_why():
    out = scale(
        [
            ("actor_rollout_ref.actor.kl_los_coef", "0.1"),
            ("actor_rollout_ref.actor.use_prefix_grouper", "True"),
            ("actor_rollout_ref.actor.strategy", "fsdp"),
            ("actor_rollout_ref.actor.optim.lr", "$LR"),
        ]
    )
    assert not out.names
    why = "\n".join(out.dropped)
    assert "kl_los_coef=0.1: not a config name of verl 0.9.1 (closest: actor_rollout_ref.actor.kl_loss_coef)" in why
    assert "use_prefix_grouper=True: refused" in why
    assert "strategy=fsdp: the harness runs 'fsdp2' only" in why
    assert "optim.lr=$LR: its value names a shell variable" in why


def test_import_writes_a_scenario_that_loads(harness_cli, tmp_path):
    out = tmp_path / "adamw-update.yaml"
    done = harness_cli("import", PLAIN, "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "data.train_batch_size: 64 -> 4 (2 mini-batches a step" in done.stdout
    assert "ranks: 8 (trainer.nnodes 2 x trainer.n_gpus_per_node 4) -> 2" in done.stdout
    s = load_scenario(out)
    assert (s.ranks, s.steps, s.grad_accum, s.ppo_mini_batches, s.batch.micro_batch_size) == (2, 2, 2, 2, 2)
    assert (s.optim.lr, s.optim.weight_decay, s.optim.betas) == (2e-3, 0.1, (0.8, 0.95))
    assert s.verl["actor_rollout_ref.rollout.name"]["kind"] == "not applicable"
    again = harness_cli("import", PLAIN, "--out", out)
    assert again.returncode == 2 and "exists (--force to overwrite)" in again.stderr


def test_the_recipe_imports_and_loads_with_its_settings_honoured(harness_cli, tmp_path):
    out = tmp_path / "qwen3-vl-8b-grpo.yaml"
    done = harness_cli("import", QWEN, "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "scaled:" in done.stdout and "dropped:\n  (nothing)" in done.stdout
    s = load_scenario(out)
    assert s.engine.gradient_checkpointing and s.engine.use_dynamic_bsz and s.ref.param_offload
    assert (s.loss.use_kl_loss, s.loss.kl_loss_type, s.loss.kl_loss_coef, s.loss.entropy_coeff) == (
        True,
        "low_var_kl",
        0.01,
        0.0,
    )
    assert s.optim.lr == 1e-6


def test_the_shipped_recipe_scenario_is_what_import_writes_from_the_fixture(harness_cli, tmp_path):
    """scenarios/recipe-qwen3-vl-8b-grpo.yaml is the import of the fixture script, followed only by its tag (the
    nightly's: its twin is the CI's) and its `cannot_see` (what `harness sensitivity` measured): a change to the
    importer or the fixture shows here, not as a silent drift."""
    out = tmp_path / "recipe-qwen3-vl-8b-grpo.yaml"
    done = harness_cli("import", QWEN.relative_to(ROOT), "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    shipped = (ROOT / "scenarios" / "recipe-qwen3-vl-8b-grpo.yaml").read_text()
    written = out.read_text()
    assert shipped.startswith(written), "the shipped recipe differs from `harness import` of the fixture"
    rest = [line for line in shipped[len(written) :].splitlines() if line and not line.startswith("#")]
    assert rest[0].startswith("tags: [nightly]") and rest[1] == "cannot_see:", rest
    assert all(line.startswith("  ") for line in rest[2:]), rest
