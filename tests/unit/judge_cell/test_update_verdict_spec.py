"""The training update's scenario fields and the parts of its verdict that need no run: the oracle's mini-batch
plan, its learning-rate schedule, and how missing optimizer steps and a different micro-batch order are named.
The numbers themselves are judged in real runs (the engine-update-* scenario items, tests/distributed)."""

from __future__ import annotations

import math

import pytest

from harness.errors import UsageError
from harness.inputs.scenario import OptimizerSettings, load_scenario
from harness.paths import SCENARIOS_DIR

pytestmark = pytest.mark.unit


def _write(tmp_path, name, text):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "body, message",
    [
        ("ranks: 2\nsteps: 2\n", "steps: the training update runs through verl's engine (path: engine)"),
        ("ranks: 2\npath: engine\nppo_mini_batches: 2\n", "ppo_mini_batches: set for an optimizer step"),
        ("ranks: 2\npath: engine\nsteps: 1\ngrad_accum: 3\nppo_mini_batches: 2\n", "must divide grad_accum"),
        ("ranks: 2\npath: engine\nsteps: 1\nforward_only: true\n", "steps: not with forward_only"),
        ("ranks: 2\npath: engine\nsteps: 1\ncompile: true\n", "steps: compile_scope model not run through verl's"),
        (
            "ranks: 2\npath: engine\nsteps: 1\ncompile: true\ncompile_scope: layers\n",
            "steps: compile_scope layers not run",
        ),
        ("ranks: 2\npath: engine\nsteps: 1\noptim:\n  momentum: 0.9\n", "momentum is SGD's"),
        ("ranks: 2\npath: engine\nsteps: 1\noptim:\n  optimizer: Adam\n", "optim.optimizer"),
    ],
)
def test_update_fields_are_refused_where_they_cannot_run(tmp_path, body, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_scenario(_write(tmp_path, "bad-update", body))


@pytest.mark.parametrize(
    "body",
    [
        "engine:\n  use_dynamic_bsz: true\n  max_token_len_per_gpu: 40\n",
        "engine:\n  gradient_checkpointing: true\n",
        "ranks: 4\nengine:\n  ulysses_sequence_parallel_size: 2\n",
        "compile: true\ncompile_scope: head\ncompile_backend: aot_eager\n",
    ],
)
def test_the_update_runs_wherever_verls_trainer_runs_it(tmp_path, body):
    """Dynamic bsz, gradient checkpointing, Ulysses SP and compile at head scope: once refused with `steps`."""
    text = "path: engine\nsteps: 2\ngrad_accum: 2\nppo_mini_batches: 2\n" + body
    if not body.startswith("ranks"):
        text = "ranks: 2\n" + text
    s = load_scenario(_write(tmp_path, "update-where", text))
    assert s.steps == 2


def test_betas_from_yaml_and_the_shipped_update_scenarios_load():
    s = load_scenario(SCENARIOS_DIR / "engine-update-adamw.yaml")
    assert s.steps == 3 and s.ppo_mini_batches == 2 and s.optim.lr_scheduler_type == "cosine"
    sgd = load_scenario(SCENARIOS_DIR / "engine-update-sgd.yaml")
    assert sgd.optim.optimizer == "SGD" and sgd.optim.momentum == 0.9


def test_mini_batch_plan_shares_each_ranks_micro_batches_out_in_order(scenario):
    from harness.rank.oracle.update import mini_batch_plan

    s = scenario("engine-update-no-sync")  # grad_accum 4, 2 mini-batches
    assert mini_batch_plan(s, 2) == [[(0, 0), (0, 1), (1, 0), (1, 1)], [(0, 2), (0, 3), (1, 2), (1, 3)]]


def test_lr_schedule_from_its_definitions():
    from harness.rank.oracle.update import lr_factor

    cosine = OptimizerSettings(lr_scheduler_type="cosine")
    assert [lr_factor(cosine, 3, k) for k in range(4)] == pytest.approx([1.0, 0.75, 0.25, 0.0])
    warm = OptimizerSettings(lr_warmup_steps=2)
    assert [lr_factor(warm, 4, k) for k in range(4)] == [0.0, 0.5, 1.0, 1.0]
    floor = OptimizerSettings(lr_scheduler_type="cosine", min_lr_ratio=0.1)
    assert lr_factor(floor, 2, 2) == pytest.approx(0.1) and lr_factor(floor, 2, 1) == pytest.approx(0.55)
    ratio = OptimizerSettings(lr_warmup_steps_ratio=0.5)
    assert lr_factor(ratio, 4, 1) == 0.5 and not math.isnan(lr_factor(ratio, 4, 0))


def test_missing_optimizer_steps_are_named_per_rank_or_as_none_taken():
    from harness.judge_cell.update_verdict import _missing_steps

    counts = {0: 2, 1: 2}
    one_rank = _missing_steps({0: {0: 2, 1: 2}, 1: {}}, counts)
    assert [f.words for f in one_rank[0]] == [
        "rank 1 took 0 of the 2 optimizer steps of step 1 (its shards stayed behind: verl skipped a step on some"
        " ranks only)"
    ]
    none = _missing_steps({0: {}, 1: {}}, counts)
    assert [f.words for f in none[1]] == [
        "no rank took any of the 2 optimizer steps of step 2: the weights never moved (verl skipped every step)"
    ]
    assert _missing_steps({0: {0: 2, 1: 2}, 1: {0: 2, 1: 2}}, counts) == {}


def test_a_micro_batch_order_other_than_the_oracles_is_a_failure(scenario):
    from harness.judge_cell.micro_batching import micro_batch_order
    from harness.records.results import RankResult

    s = scenario("engine-update-adamw")  # micro-batches of 2, grad_accum 2, 2 mini-batches, 3 steps
    plan = [[[0, 0], [1, 0]], [[0, 1], [1, 1]]]

    def result(rank, micro_batches):
        update = {"plan": plan, "micro_batches": micro_batches, "log_probs": []}
        return RankResult(rank=rank, world_size=2, device="cpu", update=update)

    as_planned = [result(0, [[0, 1], [2, 3]] * 3)]
    assert micro_batch_order(s, as_planned) is None
    as_planned.append(result(1, [[4, 5], [6, 7]] * 3))
    assert micro_batch_order(s, as_planned) is None
    shuffled = [result(0, [[2, 3], [0, 1]] * 3)]
    assert "the mini-batch order the oracle assumed is not verl's" in micro_batch_order(s, shuffled)


def test_the_why_names_the_first_number_and_verls_grad_norm_beside_it():
    """Without a wrong grad_norm the first wrong number leads, and verl's grad_norm of a later moment is beside it;
    with one at the same moment, it leads (issue 49: test_patch_verdict_closing.py)."""
    from harness.judge_cell.update_verdict import metric_failure, moment, param_failure
    from harness.judge_cell.update_why import update_why

    norm = {"verl": 3.014, "oracle": 2.83, "error": 0.06522, "kind": "rel"}
    failures = [
        param_failure("update", "lm_head.weight", 1.02, 0.05, moment(0, 0)),
        param_failure("weights", "lm_head.weight", 0.0154, 0.001, moment(0, 0)),
        metric_failure("grad_norm", norm, 0.001, moment(1, 0)),
    ]
    assert update_why(failures) == (
        "update lm_head.weight: relative error 1.02 > 0.05 at step 1, mini-batch 1; grad_norm: verl 3.014,"
        " oracle 2.83 at step 2, mini-batch 1 (relative error 0.06522 > 0.001) (+1 more)"
    )
    assert update_why([]) == ""


def test_noise_floor_reports_the_update_measures_by_the_tolerance_fields(record):
    from harness.commands.noise_floor import update_floors_of
    from harness.inputs.tolerances import UpdateTolerance

    update = {
        "update_worst_rel": 4e-3,
        "param_worst_rel": 7e-5,
        "metric_worst": {
            "grad_norm": 3e-5,
            "lr": 0.0,
            "loss": 1e-6,
            "pg_loss": 2e-6,
            "entropy_loss": 1e-6,
            "pg_clipfrac": 0.0,
            "ppo_kl": 5e-6,
        },
        "log_probs": [{"logprob_max_abs": 5e-7}, {"logprob_max_abs": 8e-5}, {"logprob_max_abs": 2e-5}],
        # the gradients before the clip: the first optimizer step's is a one-step cell's, not this floor's
        "steps": [{"step": 0, "grad_rel": {"a": 9e-4}}, {"step": 0, "mini_batch": 1, "grad_rel": {"a": 6e-5}}],
    }
    floors = update_floors_of([record(scenario="engine-update-adamw", update=update)])
    assert floors == {
        "fp32": {
            "update_rel": 4e-3,
            "param_rel": 7e-5,
            "metric_rel": 3e-5,
            "metric_abs": 5e-6,
            "logprob_abs": 8e-5,
            "grad_rel": 6e-5,
        }
    }
    assert set(floors["fp32"]) <= set(UpdateTolerance.__dataclass_fields__)


def test_the_verdict_tables_gradient_column_shows_an_updates_worst_parameter(record):
    from harness.render.tables import row

    update = {"update_worst_rel": 1.0158, "update_worst_param": "lm_head.weight"}
    cells = row(record(scenario="engine-update-adamw", outcome="mismatch", update=update))
    assert "update 1 (lm_head.weight)" in cells
    assert not any(c.startswith("update") for c in row(record()))


def test_the_global_batch_takes_one_rank_of_each_sequence_parallel_group():
    """Under Ulysses SP the ranks of a group hold the same gathered rows: the global batch has each group's once, in
    group order (with every rank's rows, group 1's samples would get group 0's old log-probs)."""
    from harness.rank.verl_side.engine_update import global_rows

    by_rank = [["g0a", "g0b"], ["g0a", "g0b"], ["g1a", "g1b"], ["g1a", "g1b"]]
    assert global_rows(by_rank, sp=2) == ["g0a", "g0b", "g1a", "g1b"]
    assert global_rows([["r0"], ["r1"]], sp=1) == ["r0", "r1"]


def test_noise_floor_names_the_seed_runs_that_ended_before_a_comparison(record):
    from harness.commands.noise_floor import not_measured

    crashed = record(scenario="engine-update-sgd", outcome="error", error={"type": "RuntimeError", "message": "boom"})
    assert not_measured([crashed, record(outcome="pass")]) == [
        "  not measured: engine-update-sgd seed run: error: boom"
    ]


def test_a_non_finite_metric_error_is_no_noise_floor_and_does_not_stop_the_others(record):
    from harness.commands.noise_floor import update_floors_of

    update = {
        "update_worst_rel": 4e-3,
        "param_worst_rel": 7e-5,
        "metric_worst": {"grad_norm": "inf", "lr": 2e-7, "loss": 1e-6, "ppo_kl": 5e-6},
        "log_probs": [{"logprob_max_abs": 5e-7}],
    }
    floors = update_floors_of([record(scenario="engine-update-adamw", outcome="mismatch", update=update)])
    assert floors["fp32"]["metric_rel"] == 2e-7 and floors["fp32"]["metric_abs"] == 5e-6


def _dynamic(scenario, **fields):
    """A dynamic-bsz update: 2 ranks, micro-batches of 2, grad_accum 4, 2 mini-batches, 2 RL steps, a 40-token
    budget (scenarios/engine-update-dynamic-bsz.yaml's settings)."""
    from harness.inputs.scenario import EngineSettings

    base = scenario("engine-update-adamw")
    engine = EngineSettings(use_dynamic_bsz=True, max_token_len_per_gpu=40)
    return base.model_copy(update={"grad_accum": 4, "steps": 2, "engine": engine, **fields})


def _update_result(rank, world, plan, micro_batches, steps=None, tokens=None, oracle=None):
    from harness.records.results import RankResult

    update = {"plan": plan, "micro_batches": micro_batches, "log_probs": []}
    if steps is not None:
        update["micro_batch_steps"] = steps
    if tokens is not None:
        update["micro_batch_tokens"] = tokens
    if oracle is not None:
        update["oracle"] = oracle
    return RankResult(rank=rank, world_size=world, device="cpu", update=update)


def test_the_ranks_of_a_sequence_parallel_group_are_checked_against_their_groups_samples(scenario):
    """4 ranks, SP 2: ranks 0 and 1 hold group 0's samples, ranks 2 and 3 group 1's (the check once read rank 1 as
    data-parallel rank 1 and called the candidate's correct update a different order)."""
    from harness.judge_cell.micro_batching import micro_batch_order
    from harness.rank.oracle.update import mini_batch_plan

    s = scenario("engine-update-sp2").model_copy(update={"ranks": 4, "steps": 1})
    plan = [[list(k) for k in keys] for keys in mini_batch_plan(s, 2)]
    assert plan == [[[0, 0], [1, 0]], [[0, 1], [1, 1]]]
    group0, group1 = [[0, 1], [2, 3]], [[4, 5], [6, 7]]
    right = [_update_result(r, 4, plan, group0 if r < 2 else group1) for r in range(4)]
    assert micro_batch_order(s, right) is None
    wrong = [_update_result(1, 4, plan, group1)]
    assert micro_batch_order(s, wrong).startswith("rank 1: verl's micro-batches held samples [[4, 5], [6, 7]]")


def test_under_dynamic_bsz_each_mini_batchs_samples_are_compared_as_a_set(scenario):
    """verl re-forms a mini-batch's micro-batches by token count (how many and which samples are its own); each
    mini-batch must still hold the plan's samples, each once."""
    from harness.judge_cell.micro_batching import micro_batch_order
    from harness.rank.oracle.update import mini_batch_plan

    s = _dynamic(scenario)
    plan = [[list(k) for k in keys] for keys in mini_batch_plan(s, 2)]
    # rank 0: mini-batch 1 is samples 0-3, mini-batch 2 samples 4-7; rank 1: 8-11 and 12-15
    rank0 = [[3, 0], [2], [1], [6, 5], [7, 4]] * 2
    rank0_steps = [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]
    rank1 = [[9], [8, 10], [11], [12, 15], [13], [14]] * 2
    rank1_steps = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    ok = [_update_result(0, 2, plan, rank0, rank0_steps), _update_result(1, 2, plan, rank1, rank1_steps)]
    assert micro_batch_order(s, ok) is None
    moved = [[3, 0], [2], [4], [6, 5], [7, 1]] * 2  # sample 1 and 4 swapped mini-batches
    why = micro_batch_order(s, [_update_result(0, 2, plan, moved, rank0_steps)])
    assert why.startswith("rank 0: verl's micro-batches of step 1, mini-batch 1 held samples [0, 2, 3, 4]")
    twice = [[3, 0], [2, 0], [1], [6, 5], [7, 4]] * 2
    assert "held samples [0, 0, 1, 2, 3]" in micro_batch_order(s, [_update_result(0, 2, plan, twice, rank0_steps)])
    assert "which optimizer step" in micro_batch_order(s, [_update_result(0, 2, plan, rank0)])
    # Without dynamic bsz the same split is a failure: fixed micro-batches are taken in order.
    fixed = s.model_copy(update={"engine": s.engine.model_copy(update={"use_dynamic_bsz": False})})
    assert "the mini-batch order the oracle assumed is not verl's" in micro_batch_order(fixed, ok)


def test_per_micro_batch_metrics_are_the_oracles_sample_sums_over_verls_micro_batches(scenario):
    """pg_clipfrac, ppo_kl and pg_clipfrac_lower are each micro-batch's token mean, then the mean over micro-batches:
    over verl's split, from the oracle's per-sample sums [clipped, old - new log-prob, tokens, dual-clipped]."""
    from harness.judge_cell.micro_batching import per_micro_batch_metrics
    from harness.records.rank_measures import OracleStep

    s = _dynamic(scenario, steps=1, ppo_mini_batches=1)
    sums = {"0": [1, 0.5, 4], "1": [0, -0.1, 2], "8": [3, 0.2, 6], "9": [2, 0.0, 2]}
    oracle = [OracleStep(step=0, epoch=0, mini_batch=0, clip_active=False, metrics={}, samples=sums)]
    results = [
        _update_result(0, 2, [], [[0], [1]], [0, 0], oracle=oracle),
        _update_result(1, 2, [], [[8, 9]], [0]),
    ]
    (values,) = per_micro_batch_metrics(s, results, oracle)
    assert values["pg_clipfrac"] == pytest.approx((1 / 4 + 0 / 2 + 5 / 8) / 3)
    assert values["ppo_kl"] == pytest.approx((0.5 / 4 - 0.1 / 2 + 0.2 / 8) / 3)
    assert "pg_clipfrac_lower" not in values  # sums without its column (an older record): the plan's value stands
    # With the dual-clipped tokens (the fourth column), pg_clipfrac_lower is averaged over verl's split too.
    lower = {"0": [1, 0.5, 4, 1], "1": [0, -0.1, 2, 0], "8": [3, 0.2, 6, 2], "9": [2, 0.0, 2, 1]}
    with_lower = [OracleStep(step=0, epoch=0, mini_batch=0, clip_active=False, metrics={}, samples=lower)]
    (values,) = per_micro_batch_metrics(s, results, with_lower)
    assert values["pg_clipfrac_lower"] == pytest.approx((1 / 4 + 0 / 2 + 3 / 8) / 3)
    # A step without the oracle's sums (an older record) keeps the plan's values.
    bare = [OracleStep(step=0, epoch=0, mini_batch=0, clip_active=False, metrics={})]
    assert per_micro_batch_metrics(s, results, bare) == [None]


def test_the_record_says_how_many_micro_batches_each_rank_ran_and_how_few_it_needed(scenario):
    from harness.judge_cell.micro_batching import micro_batching

    s = _dynamic(scenario, steps=1, ppo_mini_batches=1)
    results = [
        _update_result(0, 2, [], [[0, 2], [1], [3]], [0, 0, 0], tokens=[39, 21, 19]),  # 79 tokens: 2 would do
        _update_result(1, 2, [], [[8, 11], [9], [10]], [0, 0, 0], tokens=[39, 22, 20]),  # 81 tokens: 3
    ]
    record = micro_batching(s, results)
    assert record["max_token_len"] == 40
    ranks = record["steps"][0]["ranks"]
    assert ranks["0"] == {"micro_batches": 3, "tokens": [39, 21, 19], "own_need": 2}
    assert ranks["1"]["micro_batches"] == 3 and ranks["1"]["own_need"] == 3
    assert record["own_need_differs_between_ranks"] is True
    assert micro_batching(scenario("engine-update-adamw"), results) is None


def test_the_oracles_global_sample_index_is_the_trainers_order(scenario):
    from harness.rank.oracle.update import global_index

    s = _dynamic(scenario)
    assert [global_index(k, i, s) for k, i in [((0, 0), 0), ((0, 3), 1), ((1, 0), 0), ((1, 2), 1)]] == [0, 7, 8, 13]


def test_the_loss_watch_notes_each_micro_batchs_samples_tokens_and_optimizer_step():
    """The rank side's note of what verl handed its loss: the samples, the tokens verl's dynamic bsz counts (the
    packed sequences' lengths) and the optimizer step the micro-batch fed; verl's loss itself runs unchanged."""
    import torch
    from tensordict import TensorDict

    from harness.rank.verl_side.engine_update import observed

    seen, tokens, steps = [], [], []
    step = [0]
    loss = observed(lambda **kw: "verl's loss", seen, tokens, steps, lambda: step[0])
    ids = torch.nested.nested_tensor([torch.arange(21), torch.arange(18)], layout=torch.jagged)
    data = TensorDict({"sample_index": torch.tensor([4, 9]), "input_ids": ids}, batch_size=[2])
    assert loss(model_output=None, data=data, dp_group=None) == "verl's loss"
    step[0] = 1
    padded = TensorDict(
        {"sample_index": torch.tensor([[3]]), "attention_mask": torch.tensor([[0, 1, 1, 1]])}, batch_size=[1]
    )
    loss(model_output=None, data=padded, dp_group=None)
    assert (seen, tokens, steps) == ([[4, 9], [3]], [39, 3], [0, 1])


def test_checkpointing_asked_for_and_not_taken_is_a_failure(scenario):
    """fp32 recomputation gives the same numbers, so the module's own flag is what shows checkpointing ran."""
    from harness.judge_cell.update_verdict import settings_not_taken
    from harness.records.results import RankResult

    s = scenario("engine-update-ckpt")

    def ranks(*flags):
        return [RankResult(rank=i, world_size=2, device="cpu", gradient_checkpointing=f) for i, f in enumerate(flags)]

    assert settings_not_taken(s, ranks(True, True)) == []
    assert settings_not_taken(s, ranks(True, False)) == [
        "engine.gradient_checkpointing: the module verl built on rank 1 does not recompute its layers"
        " (is_gradient_checkpointing False)"
    ]
    assert settings_not_taken(s, ranks(None, None)) == []  # records from before the field
    assert settings_not_taken(scenario("engine-update-adamw"), ranks(False, False)) == []


def test_a_term_verl_logs_that_the_oracles_loss_has_none_of_is_a_failure():
    """entropy asked where the trainer asks none (entropy_coeff 0): verl logs entropy_loss, the oracle has no such
    term; a metric both have is judged as before, and lr (logged once per RL step) is never read so."""
    from harness.inputs.tolerances import update_tolerance_for
    from harness.judge_cell.update_verdict import _metric_rows, _step_failures, moment
    from harness.records.results import RankResult

    update = {
        "log_probs": [],
        "metrics": [{"step": 0, "verl": {"actor/pg_loss": [0.5], "actor/entropy_loss": [7.5], "lr": [0.1]}}],
        "oracle": [{"step": 0, "epoch": 0, "mini_batch": 0, "clip_active": False, "metrics": {"pg_loss": 0.5}}],
    }
    rank0 = RankResult(rank=0, world_size=2, device="cpu", update=update)
    (row,) = _metric_rows(rank0, 1)
    assert row.metrics["pg_loss"]["error"] == 0.0 and "lr" not in row.metrics
    at = moment(0)
    failures = _step_failures({"update_rel": {}, "param_rel": {}}, row, at, update_tolerance_for("fp32"))
    assert [f.words for f in failures] == ["entropy_loss: verl 7.5, oracle none at step 1 (error inf > 0.0001)"]
    assert (failures[0].kind, failures[0].subject, failures[0].verl, failures[0].reference) == (
        "metric",
        "entropy_loss",
        7.5,
        None,
    )


def test_the_ref_engines_log_probs_are_judged_as_the_first_steps():
    from harness.inputs.tolerances import tolerance_for
    from harness.judge_cell.update_verdict import _ref_failures
    from harness.records.results import RankResult

    def result(rank, max_abs):
        update = {"log_probs": [], "ref_log_probs": [{"step": 0, "log_probs": {"max_abs": max_abs}}]}
        return RankResult(rank=rank, world_size=2, device="cpu", update=update)

    tol = tolerance_for("fp32")
    assert _ref_failures([result(0, 1e-6), result(1, 2e-6)], 0, tol) == []
    assert [f.words for f in _ref_failures([result(0, 1e-6), result(1, 0.3)], 0, tol)] == [
        "reference log-probs (verl's ref engine) before step 1: differ by 0.3 > 0.0001"
    ]
    assert _ref_failures([result(0, 0.3)], 1, tol) == []  # no entry for that step


def test_a_slip_in_verls_loss_is_named_by_the_alternative_its_metrics_fit():
    from harness.inputs.tolerances import update_tolerance_for
    from harness.judge_cell.update_verdict import _metric_rows, metric_alternative_why
    from harness.records.results import RankResult

    oracle = {
        "step": 0,
        "epoch": 0,
        "mini_batch": 0,
        "clip_active": True,
        "metrics": {"kl_loss": 0.0057, "loss": -0.0165},
        "metric_alternatives": {"kl_loss_type k1": {"kl_loss": 0.0118, "loss": -0.0104}},
    }

    def rank0(kl, loss):
        verl = {"kl_loss": [kl], "loss": [loss]}
        update = {"log_probs": [], "metrics": [{"step": 0, "verl": verl}], "oracle": [oracle]}
        return RankResult(rank=0, world_size=2, device="cpu", update=update)

    tol = update_tolerance_for("fp32")
    slipped = rank0(0.0118, -0.0104)
    why = metric_alternative_why(slipped, _metric_rows(slipped, 1), tol, 1).words
    assert why.startswith("verl's loss computed with kl_loss_type k1: its kl_loss 0.0118 (oracle 0.0057)")
    right = rank0(0.0057, -0.0165)
    assert metric_alternative_why(right, _metric_rows(right, 1), tol, 1) is None
    other = rank0(0.03, -0.0165)  # off, but like no alternative
    assert metric_alternative_why(other, _metric_rows(other, 1), tol, 1) is None


def test_a_slip_in_verls_loss_leads_the_update_why_before_the_numbers_it_explains():
    """The slip its metrics fit (kl_loss_type k1 for k3, say) is the cause of the loss and grad_norm after it, so the
    why leads with it, not with the loss metric it made wrong."""
    from harness.judge_cell.update_verdict import metric_failure, moment
    from harness.judge_cell.update_why import update_why
    from harness.records.results import Failure

    at = moment(0, 0)
    words = "verl's loss computed with kl_loss_type k1: its kl_loss 0.0118 (oracle 0.0057) match that at step 1, "
    failures = [
        Failure(kind="loss-slip", subject="kl_loss_type k1", words=words + "mini-batch 1", **at),
        metric_failure("loss", {"verl": -0.01039, "oracle": -0.01651, "error": 0.37, "kind": "rel"}, 0.0001, at),
        metric_failure("grad_norm", {"verl": 3.1, "oracle": 2.9, "error": 0.07, "kind": "rel"}, 0.001, at),
    ]
    assert update_why(failures).startswith("verl's loss computed with kl_loss_type k1")
