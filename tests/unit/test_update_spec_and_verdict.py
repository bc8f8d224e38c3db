"""The training update's scenario fields and the parts of its verdict that need no run: the oracle's mini-batch
plan, its learning-rate schedule, and how missing optimizer steps and a different micro-batch order are named.
The numbers themselves are judged in real runs (the engine-update-* scenario items, tests/distributed)."""

from __future__ import annotations

import math

import pytest

from harness.errors import UsageError
from harness.paths import SCENARIOS_DIR
from harness.spec.scenario import OptimizerSpec, load_scenario

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
        (
            "ranks: 4\npath: engine\nsteps: 1\nengine:\n  ulysses_sequence_parallel_size: 2\n",
            "steps: not with engine.ulysses_sequence_parallel_size > 1",
        ),
        ("ranks: 2\npath: engine\nsteps: 1\noptim:\n  momentum: 0.9\n", "momentum is SGD's"),
        ("ranks: 2\npath: engine\nsteps: 1\noptim:\n  optimizer: Adam\n", "optim.optimizer"),
    ],
)
def test_update_fields_are_refused_where_they_cannot_run(tmp_path, body, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_scenario(_write(tmp_path, "bad-update", body))


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

    cosine = OptimizerSpec(lr_scheduler_type="cosine")
    assert [lr_factor(cosine, 3, k) for k in range(4)] == pytest.approx([1.0, 0.75, 0.25, 0.0])
    warm = OptimizerSpec(lr_warmup_steps=2)
    assert [lr_factor(warm, 4, k) for k in range(4)] == [0.0, 0.5, 1.0, 1.0]
    floor = OptimizerSpec(lr_scheduler_type="cosine", min_lr_ratio=0.1)
    assert lr_factor(floor, 2, 2) == pytest.approx(0.1) and lr_factor(floor, 2, 1) == pytest.approx(0.55)
    ratio = OptimizerSpec(lr_warmup_steps_ratio=0.5)
    assert lr_factor(ratio, 4, 1) == 0.5 and not math.isnan(lr_factor(ratio, 4, 0))


def test_missing_optimizer_steps_are_named_per_rank_or_as_none_taken():
    from harness.driver.update_verdict import _missing_steps

    counts = {0: 2, 1: 2}
    one_rank = _missing_steps({0: {0: 2, 1: 2}, 1: {}}, counts)
    assert one_rank[0] == [
        "rank 1 took 0 of the 2 optimizer steps of step 1 (its shards stayed behind: verl skipped a step on some"
        " ranks only)"
    ]
    none = _missing_steps({0: {}, 1: {}}, counts)
    assert none[1] == [
        "no rank took any of the 2 optimizer steps of step 2: the weights never moved (verl skipped every step)"
    ]
    assert _missing_steps({0: {0: 2, 1: 2}, 1: {0: 2, 1: 2}}, counts) == {}


def test_a_micro_batch_order_other_than_the_oracles_is_a_failure(scenario):
    from harness.driver.update_verdict import micro_batch_order
    from harness.spec.results import RankResult

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
    from harness.driver.update_verdict import update_why

    failures = [
        "update lm_head.weight: relative error 1.02 > 0.05 at step 1, mini-batch 1",
        "weights lm_head.weight: relative error 0.0154 > 0.001 at step 1, mini-batch 1",
        "grad_norm: verl 3.014, oracle 2.83 at step 1, mini-batch 1 (relative error 0.06522 > 0.001)",
    ]
    assert update_why(failures) == (
        "update lm_head.weight: relative error 1.02 > 0.05 at step 1, mini-batch 1; grad_norm: verl 3.014,"
        " oracle 2.83 at step 1, mini-batch 1 (relative error 0.06522 > 0.001) (+1 more)"
    )
    assert update_why([]) == ""


def test_noise_floor_reports_the_update_measures_by_the_tolerance_fields(record):
    from harness.commands.noise_floor import update_floors_of
    from harness.spec.tolerances import UpdateTolerance

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
    }
    floors = update_floors_of([record(scenario="engine-update-adamw", update=update)])
    assert floors == {
        "fp32": {"update_rel": 4e-3, "param_rel": 7e-5, "metric_rel": 3e-5, "metric_abs": 5e-6, "logprob_abs": 8e-5}
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


def test_a_term_verl_logs_that_the_oracles_loss_has_none_of_is_a_failure():
    """entropy asked where the trainer asks none (entropy_coeff 0): verl logs entropy_loss, the oracle has no such
    term; a metric both have is judged as before, and lr (logged once per RL step) is never read so."""
    from harness.driver.update_verdict import _metric_rows, _step_failures
    from harness.spec.results import RankResult
    from harness.spec.tolerances import update_tolerance_for

    update = {
        "log_probs": [],
        "metrics": [{"step": 0, "verl": {"actor/pg_loss": [0.5], "actor/entropy_loss": [7.5], "lr": [0.1]}}],
        "oracle": [{"step": 0, "epoch": 0, "mini_batch": 0, "clip_active": False, "metrics": {"pg_loss": 0.5}}],
    }
    rank0 = RankResult(rank=0, world_size=2, device="cpu", update=update)
    (row,) = _metric_rows(rank0, 1)
    assert row.metrics["pg_loss"]["error"] == 0.0 and "lr" not in row.metrics
    failures = _step_failures({"update_rel": {}, "param_rel": {}}, row, "step 1", update_tolerance_for("fp32"))
    assert failures == ["entropy_loss: verl 7.5, oracle none at step 1 (error inf > 0.0001)"]


def test_the_ref_engines_log_probs_are_judged_as_the_first_steps():
    from harness.driver.update_verdict import _ref_failures
    from harness.spec.results import RankResult
    from harness.spec.tolerances import tolerance_for

    def result(rank, max_abs):
        update = {"log_probs": [], "ref_log_probs": [{"step": 0, "log_probs": {"max_abs": max_abs}}]}
        return RankResult(rank=rank, world_size=2, device="cpu", update=update)

    tol = tolerance_for("fp32")
    assert _ref_failures([result(0, 1e-6), result(1, 2e-6)], 0, tol) == []
    assert _ref_failures([result(0, 1e-6), result(1, 0.3)], 0, tol) == [
        "reference log-probs (verl's ref engine) before step 1: differ by 0.3 > 0.0001"
    ]
    assert _ref_failures([result(0, 0.3)], 1, tol) == []  # no entry for that step


def test_a_slip_in_verls_loss_is_named_by_the_alternative_its_metrics_fit():
    from harness.driver.update_verdict import _metric_rows, metric_alternative_why
    from harness.spec.results import RankResult
    from harness.spec.tolerances import update_tolerance_for

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
    why = metric_alternative_why(slipped, _metric_rows(slipped, 1), tol, 1)
    assert why.startswith("verl's loss computed with kl_loss_type k1: its kl_loss 0.0118 (oracle 0.0057)")
    right = rank0(0.0057, -0.0165)
    assert metric_alternative_why(right, _metric_rows(right, 1), tol, 1) is None
    other = rank0(0.03, -0.0165)  # off, but like no alternative
    assert metric_alternative_why(other, _metric_rows(other, 1), tol, 1) is None
