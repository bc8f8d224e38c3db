"""`python -m harness import FILE` (commands/importer.py): a verl run script (read as bash reads it) or a file of
overrides becomes a scenario with a `verl:` block, on the tiny model of the script's own family, scaled to this host,
every scaled value, value the harness sets, verl default written and dropped setting printed with why; the scenario is
written only once it loads (tests/distributed/test_imported_scenario.py runs them). Issue 58's cases, each a test."""

from __future__ import annotations

import pytest

from harness.commands.importer import hydra_value, read_overrides, scale, yaml_float
from harness.errors import UsageError
from harness.inputs.scenario import load_scenario
from harness.paths import ROOT

pytestmark = pytest.mark.unit

MODEL = "actor_rollout_ref.model.path"

SCRIPTS = ROOT / "tests" / "fixtures" / "verl_scripts"
QWEN = SCRIPTS / "qwen3_vl_8b_grpo.sh"
PLAIN = SCRIPTS / "adamw_update.overrides"
ARRAYS = SCRIPTS / "qwen3_5_27b_grpo_arrays.sh"
LAUNCHER = SCRIPTS / "qwen3_vl_30b_a3b_launcher.sh"
LISTS = SCRIPTS / "qwen2_5_vl_7b_lists.overrides"


def test_a_scripts_overrides_with_its_shell_variables_expanded():
    pairs = dict(read_overrides(QWEN.read_text()))
    assert pairs["actor_rollout_ref.rollout.n"] == "5"  # N_RESPONSES=5
    assert pairs["actor_rollout_ref.rollout.name"] == "vllm"  # ${1:-vllm}: no argument, the default
    assert pairs["actor_rollout_ref.model.path"] == "Qwen/Qwen3-VL-8B-Instruct"  # ${MODEL_PATH:-...}
    assert "data.train_files" not in pairs  # $HOME: the environment's, unknown to import (issue 64): dropped
    assert pairs["data.truncation"] == "error"  # shell quotes removed
    assert "+actor_rollout_ref.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache" in pairs
    assert not any(k.startswith("$") for k in pairs) and len(pairs) == 45


def test_plain_lines_and_script_give_the_same_pairs(tmp_path):
    plain = tmp_path / "o.txt"
    plain.write_text("# a comment\na.b=1\n\n+c.d='x y'\n")
    assert read_overrides(plain.read_text()) == [("a.b", "1"), ("+c.d", "'x y'")]  # Hydra reads the quotes
    script = tmp_path / "run.sh"
    script.write_text("X=1\npython3 -m verl.trainer.main_ppo \\\n  a.b=$X \\\n  +c.d='x y' $@\n")
    assert read_overrides(script.read_text()) == [("a.b", "1"), ("+c.d", "x y")]  # bash took the quotes
    assert hydra_value("'x y'") == hydra_value("x y") == "x y"


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
    out = scale([("trainer.n_gpus_per_node", "1"), ("trainer.nnodes", "1"), (MODEL, "Qwen/Qwen3-VL-8B-Instruct")])
    assert out.fields["ranks"] == 1


def test_unknown_refused_and_other_fixed_values_are_dropped_with_why():
    out = scale(
        [
            (MODEL, "Qwen/Qwen3-VL-8B-Instruct"),
            ("actor_rollout_ref.actor.kl_los_coef", "0.1"),
            ("actor_rollout_ref.actor.use_prefix_grouper", "True"),
            ("actor_rollout_ref.actor.strategy", "fsdp"),
            ("actor_rollout_ref.actor.optim.lr", "$LR"),
        ]
    )
    assert not [n for n in out.names if n != MODEL and n not in out.comments]  # only what the harness wrote
    why = "\n".join(out.dropped)
    assert "kl_los_coef=0.1: not a config name of verl 0.9.1 (closest: actor_rollout_ref.actor.kl_loss_coef)" in why
    assert "use_prefix_grouper=True: refused" in why
    assert "strategy=fsdp: the harness runs 'fsdp2' only" in why
    assert "optim.lr=$LR: its value names a shell variable" in why


def test_import_writes_a_scenario_that_loads(cli_in_process, tmp_path):
    out = tmp_path / "adamw-update.yaml"
    done = cli_in_process("import", PLAIN, "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "data.train_batch_size: 64 -> 4 (2 mini-batches a step" in done.stdout
    assert "ranks: 8 (trainer.nnodes 2 x trainer.n_gpus_per_node 4) -> 2" in done.stdout
    s = load_scenario(out)
    assert (s.ranks, s.steps, s.grad_accum, s.ppo_mini_batches, s.batch.micro_batch_size) == (2, 2, 2, 2, 2)
    assert (s.optim.lr, s.optim.weight_decay, s.optim.betas) == (2e-3, 0.1, (0.8, 0.95))
    assert s.verl["actor_rollout_ref.rollout.name"]["kind"] == "not applicable"
    again = cli_in_process("import", PLAIN, "--out", out)
    assert again.returncode == 2 and "exists (--force to overwrite)" in again.stderr


def test_the_recipe_imports_and_loads_with_its_settings_honoured(cli_in_process, tmp_path):
    out = tmp_path / "qwen3-vl-8b-grpo.yaml"
    done = cli_in_process("import", QWEN, "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "scaled:" in done.stdout
    dropped = done.stdout.split("dropped:\n", 1)[1].split("\nnot modelled", 1)[0].splitlines()
    assert [line.split("=", 1)[0] for line in dropped] == ["  data.train_files", "  data.val_files"]
    assert all("unknown to import: $HOME at " in line for line in dropped)  # the environment's, never written
    s = load_scenario(out)
    assert s.engine.gradient_checkpointing and s.engine.use_dynamic_bsz and s.ref.param_offload
    assert (s.loss.use_kl_loss, s.loss.kl_loss_type, s.loss.kl_loss_coef, s.loss.entropy_coeff) == (
        True,
        "low_var_kl",
        0.01,
        0.0,
    )
    assert s.optim.lr == 1e-6


def test_the_shipped_recipe_scenario_is_what_import_writes_from_the_fixture(cli_in_process, tmp_path):
    """scenarios/recipe-qwen3-vl-8b-grpo.yaml is the import of the fixture script, followed only by its tag (the
    nightly's: its twin is the CI's) and its `cannot_see` (what `harness sensitivity` measured): a change to the
    importer or the fixture shows here, not as a silent drift."""
    out = tmp_path / "recipe-qwen3-vl-8b-grpo.yaml"
    done = cli_in_process("import", QWEN.relative_to(ROOT), "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    shipped = (ROOT / "scenarios" / "recipe-qwen3-vl-8b-grpo.yaml").read_text()
    written = out.read_text()
    assert shipped.startswith(written), "the shipped recipe differs from `harness import` of the fixture"
    rest = [line for line in shipped[len(written) :].splitlines() if line and not line.startswith("#")]
    assert rest[0].startswith("tags: [nightly]") and rest[1] == "cannot_see:", rest
    assert all(line.startswith("  ") for line in rest[2:]), rest


# -- issue 58: what verl ships -------------------------------------------------------------------------------------
def test_a_script_of_bash_arrays_imports_every_override_they_hold():
    pairs = dict(read_overrides(ARRAYS.read_text(), str(ARRAYS)))
    assert pairs["actor_rollout_ref.actor.optim.weight_decay"] == "0.1"  # ACTOR+=(...)
    assert pairs["actor_rollout_ref.model.path"] == "Qwen/Qwen3.5-27B"  # ${MODEL_PATH:-...} inside an array
    assert "trainer.experiment_name" not in pairs  # "qwen3.5-27b grpo $(date +%Y%m%d)": a command, not run
    assert pairs["trainer.logger"] == '["console","wandb"]' and pairs["trainer.nnodes"] == "2"
    assert "" not in pairs and len(pairs) == 25  # "$@" (no arguments) leaves no word; $HOME's two data files dropped


def test_a_launcher_array_script_imports_and_an_unclosed_quote_names_line_and_column(tmp_path, cli_in_process):
    pairs = dict(read_overrides(LAUNCHER.read_text(), str(LAUNCHER)))
    assert pairs["actor_rollout_ref.actor.ulysses_sequence_parallel_size"] == "4"
    broken = tmp_path / "run.sh"
    broken.write_text('LAUNCH=(python3)\n"${LAUNCH[@]}" -m verl.trainer.main_ppo \\\n    a.b="x \\\n    c.d=1\n')
    message = cli_in_process.usage_error("import", broken, "--out", tmp_path / "x.yaml")
    assert f'{broken}:3:9: a quote " that is never closed' in message
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.parametrize(
    "script, tiny",
    [(ARRAYS, "tiny-qwen3-5"), (LAUNCHER, "tiny-qwen3-vl-moe"), (QWEN, "tiny-qwen3-vl"), (LISTS, "tiny-qwen2-5-vl")],
)
def test_the_family_the_script_trains_is_kept(script, tiny):
    from harness.inputs.verl_overrides import read_overrides_file

    out = scale(read_overrides_file(script.read_text(), str(script)).pairs)
    assert out.fields["model"] == tiny
    assert any(line.startswith("model: ") and f"-> {tiny} (the tiny model of its family" in line for line in out.scaled)


@pytest.mark.parametrize(
    "path, words",
    [
        ("Qwen/Qwen3.5-35B-A3B", "a Qwen3.5-MoE model, and models/ has no tiny model of that family"),
        ("Qwen/Qwen2.5-7B-Instruct", "a Qwen2/Qwen2.5 dense model"),
        ("/ckpt/my-model", "no known model family in its name"),
        (None, "does not set actor_rollout_ref.model.path"),
    ],
)
def test_a_family_without_a_tiny_model_is_refused_in_one_line_naming_those_there_are(path, words):
    pairs = [("trainer.nnodes", "1")] + ([(MODEL, path)] if path else [])
    with pytest.raises(UsageError) as caught:
        scale(pairs)
    message = str(caught.value)
    assert words in message and "\n" not in message
    for tiny in ("tiny-qwen3-vl", "tiny-qwen3-vl-moe", "tiny-qwen3-5", "tiny-qwen2-5-vl", "tiny-qwen3", "tiny-llama"):
        assert f"({tiny})" in message


def test_a_chosen_tiny_model_is_said_so():
    out = scale([(MODEL, "/ckpt/my-model")], model="tiny-qwen3-5")
    assert out.fields["model"] == "tiny-qwen3-5" and "-> tiny-qwen3-5 (chosen with --model)" in out.scaled[0]


def test_what_the_script_leaves_to_verl_is_verls_default_or_said_to_be_set_by_the_harness():
    out = scale([(MODEL, "Qwen/Qwen3-VL-8B-Instruct")])
    # verl's default use_fused_kernels is false: written so, not the harness's own true
    assert out.names["actor_rollout_ref.model.use_fused_kernels"] is False
    assert (
        out.names["actor_rollout_ref.actor.entropy_coeff"] == 0
        and out.names["actor_rollout_ref.actor.optim.lr"] == 1e-6
    )
    defaults = "\n".join(out.defaults)
    assert "actor_rollout_ref.model.use_fused_kernels: not in the script: verl's default False" in defaults
    assert "(not the harness's own True)" in defaults
    assert "actor_rollout_ref.actor.use_torch_compile: verl's default True -> False" in "\n".join(out.harness_set)
    assert any(line.startswith("precision: verl's default") and "-> fp32" in line for line in out.scaled)


def test_import_lists_every_change_it_makes_and_the_scenario_records_them(cli_in_process, tmp_path):
    out = tmp_path / "moe.yaml"
    done = cli_in_process("import", LAUNCHER, "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size: 4 -> 2",
        "ranks: 8 (trainer.nnodes 1 x trainer.n_gpus_per_node 8) -> 2",
        "actor_rollout_ref.rollout.n: 5 -> 2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: 4 -> 2",
        "steps: trainer.total_epochs 15 -> 2 RL steps",
        "precision: verl's default (bf16 parameters under bf16 autocast) -> fp32",
        "actor_rollout_ref.actor.use_torch_compile: verl's default True -> False",
        "actor_rollout_ref.ref.use_torch_compile: verl's default True -> False",
        "actor_rollout_ref.model.enable_gradient_checkpointing: not in the script: verl's default True",
        "actor_rollout_ref.rollout.temperature: not in the script: verl's default 1.0",
        "sequence lengths: data.max_prompt_length 2048 + data.max_response_length 4096 -> at most 32 tokens, 12 of",
    ):
        assert line in done.stdout, line
        assert f"#   {line}" in out.read_text(), line  # the file's head says the same
    s = load_scenario(out)
    assert (s.model, s.engine.ulysses_sequence_parallel_size, s.engine.gradient_checkpointing) == (
        "tiny-qwen3-vl-moe",
        2,
        True,
    )
    assert (s.temperature, s.precision, s.loss.entropy_coeff) == (1.0, "fp32", 0)
    # the ref's SP size 1 is kept, with why (the ref runs at the actor's): not refused
    assert s.verl["actor_rollout_ref.ref.ulysses_sequence_parallel_size"]["kind"] == "not applicable"
    assert "ulysses" not in done.stdout.split("dropped:", 1)[1].split("not modelled", 1)[0]


def test_values_keep_their_whole_text_and_what_cannot_be_kept_is_reported(cli_in_process, tmp_path):
    out = tmp_path / "lists.yaml"
    done = cli_in_process("import", LISTS, "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    s = load_scenario(out)
    assert s.verl["trainer.logger"]["value"] == ["console", "wandb"]
    assert s.verl["trainer.experiment_name"]["value"] == "qwen2.5 vl 7b, grpo"
    assert s.verl["trainer.project_name"]["value"] == "verl examples"  # the comment after it left out
    assert s.optim.betas == (0.9, 0.95)
    split = scale(
        read_overrides(
            "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen3-VL-8B \\\n"
            '  trainer.logger=["console", "wandb"]\n'
        )
    )
    assert "trainer.logger" not in split.names
    assert any(
        line.startswith(
            "trainer.logger=[console,: cannot be kept whole (Hydra's override grammar cannot read it: no viable "
            "alternative at input '[console,'"
        )
        for line in split.dropped
    )


def test_the_script_words_that_are_no_override_are_reported_with_their_line():
    from harness.inputs.verl_overrides import read_overrides_file

    read = read_overrides_file(
        'python3 -m verl.trainer.main_ppo --config-name=ppo_trainer \\\n  trainer.logger=["console", "wandb"]\n',
        "run.sh",
    )
    assert read.pairs == [("trainer.logger", "[console,")]
    assert read.dropped[0].startswith("--config-name=ppo_trainer (line 1): a command-line option")
    assert read.dropped[1].startswith("'wandb]' (line 2): no key=value")


def test_no_setting_a_shipped_scenario_runs_is_refused_by_import():
    """Each setting of verl a shipped engine scenario runs (its `sets` fields away from their defaults), written as a
    script's override, is imported, not dropped: what import says is unsupported is what no scenario runs."""
    from harness.inputs.scenario import load_all
    from harness.inputs.verl_block import VERL_SETTINGS

    first_name = {}
    for name, setting in VERL_SETTINGS.items():
        if setting.kind == "sets" and "*" not in name:
            first_name.setdefault(setting.field, name)
    checked = set()
    for s in load_all():
        if s.path != "engine":
            continue
        pairs = [(MODEL, "Qwen/Qwen3-VL-8B-Instruct"), ("trainer.n_gpus_per_node", str(s.ranks))]
        for fld, name in first_name.items():
            value = s
            for part in fld.split("."):
                value = getattr(value, part)
            if fld not in ("steps", "batch.micro_batch_size", "engine.max_token_len_per_gpu", "temperature"):
                # As a script writes it: Hydra reads only null as None (None would be the string 'None').
                text = "null" if value is None else str(list(value)) if isinstance(value, tuple) else str(value)
                pairs.append((name, text))
                checked.add(fld)
        out = scale(pairs)
        assert not out.dropped, (s.name, out.dropped)
    assert "engine.ulysses_sequence_parallel_size" in checked and "engine.fsdp_size" in checked


def test_a_global_batch_and_micro_batch_left_to_verl_are_verls_scaled_and_the_harness_said_so():
    out = scale([(MODEL, "Qwen/Qwen3-VL-8B-Instruct")])
    assert "data.train_batch_size: not in the script: verl's default 1024" in "\n".join(out.defaults)
    assert "data.train_batch_size: 1024 -> 8 (2 mini-batches a step" in "\n".join(out.scaled)
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: verl's default None -> 2" in "\n".join(
        out.harness_set
    )
    assert "actor_rollout_ref.actor.strategy: verl's default 'fsdp' -> 'fsdp2'" in "\n".join(out.harness_set)
