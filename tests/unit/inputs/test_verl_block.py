"""A scenario's `verl:` block (inputs/verl_block.py): verl's own names checked against verl 0.9.1's config names before
any cell runs, folded into the scenario's fields, the not-applicable ones kept with why, the rest refused in one
line."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.inputs.scenario import Scenario, load_scenario
from harness.inputs.verl_block import VERL_SETTINGS, field_exists, is_known, known_names, setting_of

pytestmark = pytest.mark.unit

UPDATE = "path: engine\nranks: 2\nsteps: 1\n"


def write(tmp_path, text: str, name: str = "v.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def usage_error(path) -> str:
    with pytest.raises(UsageError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def block(lines: dict) -> str:
    return "verl:\n" + "".join(f"  {k}: {v}\n" for k, v in lines.items())


def test_names_that_set_fields_are_folded_into_them(tmp_path):
    s = load_scenario(
        write(
            tmp_path,
            UPDATE
            + block(
                {
                    "actor_rollout_ref.actor.optim.lr": 0.002,
                    "actor_rollout_ref.actor.optim.weight_decay": 0.05,
                    "actor_rollout_ref.actor.optim.betas": "[0.8, 0.95]",
                    "actor_rollout_ref.model.enable_gradient_checkpointing": "true",
                    "actor_rollout_ref.actor.ppo_epochs": 2,
                    "actor_rollout_ref.rollout.temperature": 0.9,
                }
            ),
        )
    )
    assert (s.optim.lr, s.optim.weight_decay, s.optim.betas) == (0.002, 0.05, (0.8, 0.95))
    assert s.engine.gradient_checkpointing and s.ppo_epochs == 2 and s.temperature == 0.9
    assert s.verl["actor_rollout_ref.actor.optim.lr"] == {"value": 0.002, "kind": "sets", "field": "optim.lr"}


def test_the_batch_sizes_become_micro_batches_per_rank_and_mini_batches(tmp_path):
    # 4 prompts x n 2 = 8 samples over 2 ranks of micro-batches of 2: 2 each; mini-batches of 2 prompts x 2: 2.
    s = load_scenario(
        write(
            tmp_path,
            UPDATE
            + block(
                {
                    "data.train_batch_size": 4,
                    "actor_rollout_ref.rollout.n": 2,
                    "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
                    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
                }
            ),
        )
    )
    assert (s.grad_accum, s.ppo_mini_batches, s.batch.micro_batch_size) == (2, 2, 2)


def test_a_batch_that_does_not_divide_is_one_line(tmp_path):
    message = usage_error(write(tmp_path, UPDATE + block({"data.train_batch_size": 3})))
    assert "verl.data.train_batch_size" in message and "multiple" in message


@pytest.mark.parametrize(
    "fields, words",
    [
        ("ranks: two\n", "verl: the batch sizes need whole `ranks`, micro-batch size and SP size"),
        ("ranks: 2\nbatch:\n  micro_batch_size: 1.5\n", "need whole `ranks`, micro-batch size and SP size"),
        ("ranks: 3\nengine:\n  ulysses_sequence_parallel_size: 2\n", "need whole `ranks`, micro-batch size"),
        ("ranks: 2\ngrad_accum: many\n", "field 'grad_accum': a whole number, got 'many'"),
    ],
)
def test_the_fields_a_batch_is_counted_against_are_whole_numbers_or_one_line(tmp_path, fields, words):
    """data.train_batch_size and the mini-batch size are counted against ranks, SP, the micro-batch size and
    grad_accum as the file has them (before the scenario itself is validated)."""
    sizes = {"actor_rollout_ref.actor.ppo_mini_batch_size": 2}
    assert words in usage_error(write(tmp_path, "path: engine\nsteps: 1\n" + fields + block(sizes)))


def test_not_applicable_names_are_kept_with_why(tmp_path):
    s = load_scenario(
        write(
            tmp_path,
            UPDATE
            + block(
                {
                    "actor_rollout_ref.rollout.name": "vllm",
                    "trainer.nnodes": 1,
                    "trainer.logger": "'[console]'",
                    "algorithm.adv_estimator": "grpo",
                    "data.train_files": "/data/train.parquet",
                }
            ),
        )
    )
    kinds = {name: entry["kind"] for name, entry in s.verl.items()}
    assert set(kinds.values()) == {"not applicable"}
    assert "rollout engine" in s.verl["actor_rollout_ref.rollout.name"]["why"]
    assert "ranks" in s.verl["trainer.nnodes"]["why"]


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("actor_rollout_ref.actor.kl_los_coef", 0.1, "did you mean `actor_rollout_ref.actor.kl_loss_coef`?"),
        ("actor_rollout_ref.actr.optim.lr", 0.1, "did you mean `actor_rollout_ref.actor.optim.lr`?"),
        ("actor_rollout_ref.actor.strategy", "fsdp", "runs 'fsdp2' only"),
        ("actor_rollout_ref.actor.use_prefix_grouper", "true", "refused: "),
        ("algorithm.rollout_correction.rollout_is", "token", "refused: rollout correction"),
        ("actor_rollout_ref.actor.fsdp_config.param_offload", "true", "between phases"),
    ],
    ids=["unknown-near", "unknown-parent", "fixed-other-value", "unlisted-known", "refused", "fixed-offload"],
)
def test_unknown_fixed_and_refused_names_are_one_line(tmp_path, name, value, words):
    message = usage_error(write(tmp_path, UPDATE + block({name: value})))
    assert f"verl.{name}" in message and words in message


def test_a_verl_name_and_a_field_that_disagree_are_named_together(tmp_path):
    text = UPDATE + "optim: {lr: 0.2}\n" + block({"actor_rollout_ref.actor.optim.lr": 0.1})
    message = usage_error(write(tmp_path, text))
    assert "verl.actor_rollout_ref.actor.optim.lr (0.1)" in message and "`optim.lr` (0.2)" in message
    # Two verl names of one field too (the ref's and the rollout's micro-batch sizes, say).
    text = UPDATE + block(
        {
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 4,
        }
    )
    message = usage_error(write(tmp_path, text, "two.yaml"))
    assert "ppo_micro_batch_size_per_gpu (2)" in message and "log_prob_micro_batch_size_per_gpu (4)" in message


def test_agreeing_settings_are_fine(tmp_path):
    text = UPDATE + "optim: {lr: 0.1}\n" + block({"actor_rollout_ref.actor.optim.lr": 0.1})
    assert load_scenario(write(tmp_path, text)).optim.lr == 0.1


def test_a_name_whose_field_is_not_in_the_schema_is_refused_as_not_yet_honoured(tmp_path):
    unhonoured = [s.field for s in VERL_SETTINGS.values() if s.kind == "sets" and not field_exists(Scenario, s.field)]
    if not unhonoured:
        pytest.skip("every field the table names is in this schema")
    name = next(n for n, s in VERL_SETTINGS.items() if s.kind == "sets" and s.field == unhonoured[0])
    message = usage_error(write(tmp_path, UPDATE + block({name: 1})))
    assert "not honoured yet" in message and unhonoured[0] in message


def test_every_name_of_the_table_is_a_verl_name():
    """The table speaks verl 0.9.1's names only (patterns: their stem is one)."""
    names = known_names().names
    for name in VERL_SETTINGS:
        stem = name.removesuffix(".*")
        assert is_known(stem) or any(n.startswith(stem + ".") for n in names), name


def test_every_field_the_table_sets_is_a_scenario_field_or_a_contracted_one():
    # The loss and ref fields the recipes branch adds (issue 48's contract); every other one must exist now.
    contracted = {
        "loss.clip_ratio_low",
        "loss.clip_ratio_high",
        "loss.calculate_entropy",
        "loss.loss_agg_mode",
        "loss.loss_mode",
        "loss.use_kl_loss",
        "loss.kl_loss_coef",
        "loss.kl_loss_type",
        "ref.param_offload",
        "ref.log_prob_use_dynamic_bsz",
    }
    for name, setting in VERL_SETTINGS.items():
        if setting.kind == "sets":
            assert field_exists(Scenario, setting.field) or setting.field in contracted, (name, setting.field)


def test_every_known_actor_ref_and_model_name_has_an_answer():
    """None is silently ignored: each is set, fixed, not applicable with why, or refused with why."""
    for name in known_names().names:
        setting = setting_of(name)
        assert setting.kind in {"sets", "fixed", "not applicable", "refused", "batch"}
        assert setting.field or setting.why, name


def test_open_mappings_accept_their_own_keys():
    assert is_known("actor_rollout_ref.model.override_config.attention_dropout")
    assert not is_known("actor_rollout_ref.model.no_such_thing")


def test_list_shows_the_not_applicable_names_with_why(tmp_path):
    from harness.commands.inspect import verl_lines

    text = UPDATE + block({"trainer.nnodes": 3, "actor_rollout_ref.actor.optim.lr": 0.002})
    lines = verl_lines(load_scenario(write(tmp_path, text)).verl)
    assert lines[0] == "verl: 1 of 2 settings honoured (fields or fixed values)"
    assert lines[1].startswith("  not applicable: trainer.nnodes=3: hosts and processes")


def test_trainer_use_v1_picks_the_trainer_whose_batch_the_engine_gets(tmp_path):
    # verl's boolean names the choice; the scenario's field names the trainer.
    v1 = load_scenario(write(tmp_path, UPDATE + block({"trainer.use_v1": "true"}), "v1.yaml"))
    ray = load_scenario(write(tmp_path, UPDATE + block({"trainer.use_v1": "false"}), "ray.yaml"))
    assert (v1.trainer, ray.trainer, load_scenario(write(tmp_path, UPDATE, "default.yaml")).trainer) == (
        "v1",
        "ray",
        "ray",
    )
    assert v1.verl["trainer.use_v1"] == {"value": True, "kind": "sets", "field": "trainer"}
    # The field and verl's name that disagree are named together; a value that is neither is the field's error.
    message = usage_error(write(tmp_path, UPDATE + "trainer: ray\n" + block({"trainer.use_v1": "true"}), "both.yaml"))
    assert "verl.trainer.use_v1 ('v1')" in message and "`trainer` ('ray')" in message
    message = usage_error(write(tmp_path, UPDATE + block({"trainer.use_v1": "yes please"}), "bad.yaml"))
    assert "trainer" in message and "yes please" in message


def test_the_direct_path_has_no_trainer_batch(tmp_path):
    message = usage_error(write(tmp_path, "ranks: 2\ntrainer: v1\n", "direct.yaml"))
    assert "trainer" in message and "path: engine" in message
    # Nor is a batch of one length the v1 trainer's (its response_mask would not be nested).
    message = usage_error(write(tmp_path, UPDATE + "trainer: v1\nbatch: {same_length: true}\n", "same.yaml"))
    assert "batch.same_length: not with trainer v1" in message
