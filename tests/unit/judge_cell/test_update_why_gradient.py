"""issue 49: an update's why leads with the earliest wrong number in causal order: a parameter's gradient before
the clip (measured on every rank's shards against the oracle's), then grad_norm, then the updates the clip dragged
along."""

from __future__ import annotations

import pytest

from harness.records.measures import UpdateStepNumbers

pytestmark = pytest.mark.unit

AT = "at step 1, mini-batch 1"


def _at(step: int = 0, mini_batch: int = 0) -> dict:
    from harness.judge_cell.update_verdict import moment

    return moment(step, mini_batch)


def _param(what: str, name: str, value: float, bound: float, at: dict | None = None):
    """A parameter's failure as update_parity builds it (judge_cell/update_verdict.py param_failure)."""
    from harness.judge_cell.update_verdict import param_failure

    return param_failure(what, name, value, bound, at or _at())


def _metric(name: str, verl: float, oracle: float, error: float, bound: float, kind: str = "rel", at=None):
    """verl's metric's failure as update_parity builds it (judge_cell/update_verdict.py metric_failure)."""
    from harness.judge_cell.update_verdict import metric_failure

    m = {"verl": verl, "oracle": oracle, "error": error, "kind": kind}
    return metric_failure(name, m, bound, at or _at())


def test_the_parameter_whose_gradient_is_wrong_before_the_clip_leads_and_the_others_are_dragged():
    """The sum fix under AdamW, as the rank now measures it: lm_head's gradient x2 before the clip, grad_norm off
    with it, and the updates of every parameter scaled by the wrong norm. Failures arrive in update_parity's order
    (gradients, updates, weights, metrics); the why reorders them causally."""
    from harness.judge_cell.update_why import update_why

    failures = [
        _param("gradient", "lm_head.weight", 1, 0.0001),
        _param("update", "model.visual.blocks.0.attn.qkv.bias", 0.121, 0.05),
        _param("update", "lm_head.weight", 0.3, 0.05),
        _param("update", "model.visual.patch_embed.proj.bias", 0.07, 0.05),
        _param("weights", "lm_head.weight", 0.002, 0.001),
        _metric("grad_norm", 4.2, 2.1, 1, 0.001),
    ]
    assert failures[0].words == f"gradient lm_head.weight before the clip: relative error 1 > 0.0001 {AT}"
    assert failures[-1].words == f"grad_norm: verl 4.2, oracle 2.1 {AT} (relative error 1 > 0.001)"
    why = update_why(failures, [UpdateStepNumbers(step=0, mini_batch=0, clip_active=True)], 1.0)
    assert why.startswith(f"lm_head.weight's gradient wrong before the clip (rel. 1 {AT}); grad_norm: verl 4.2"), why
    assert why.index("grad_norm") < why.index("dragged")
    # lm_head's own update is off through its own gradient, not dragged; the two others are dragged
    assert "1 update(s) of those parameter(s) off (worst lm_head.weight 0.3)" in why
    assert "2 parameter update(s) dragged along by the clip (worst model.visual.blocks.0.attn.qkv.bias 0.121)" in why
    assert why.endswith("(+1 more)")  # the weights


def test_a_wrong_gradient_reported_after_the_metrics_of_its_moment_still_leads():
    """Within one moment the gradient sits before grad_norm and the updates whatever order the failures came in;
    a forward number (the loss) of the same moment leads over both."""
    from harness.judge_cell.update_why import update_why

    gradient = _param("gradient", "lm_head.weight", 0.5, 0.0001)
    norm = _metric("grad_norm", 3, 2, 0.5, 0.001)
    update = _param("update", "model.norm.weight", 0.2, 0.05)
    assert update_why([norm, update, gradient]).startswith("lm_head.weight's gradient wrong before the clip")
    loss = _metric("loss", 1.5, 1.2, 0.3, 0.0001, kind="abs")
    assert loss.words == f"loss: verl 1.5, oracle 1.2 {AT} (error 0.3 > 0.0001)"
    assert update_why([norm, gradient, loss]).startswith("loss: verl 1.5")


def test_several_wrong_gradients_are_named_worst_first_and_a_right_norm_says_so():
    from harness.judge_cell.update_why import update_why

    failures = [
        _param("gradient", "lm_head.weight", 0.9, 0.0001),
        _param("gradient", "model.norm.weight", 0.01, 0.0001),
        _param("update", "lm_head.weight", 0.4, 0.05),
    ]
    why = update_why(failures)
    assert why.startswith(
        f"lm_head.weight's, model.norm.weight's gradients wrong before the clip (rel. 0.9, 0.01 {AT})"
    )
    assert "grad_norm within its bound" in why and "dragged" not in why


def test_a_wrong_norm_over_right_gradients_is_the_norms_own_fault():
    """Where every gradient before the clip was measured and is within its bound, a wrong grad_norm is the clip's
    own computation; where they were not measured (records from before), the why says so."""
    from harness.judge_cell.update_why import update_why

    failures = [_metric("grad_norm", 4.2, 2.1, 1, 0.001), _param("update", "model.norm.weight", 0.2, 0.05)]
    measured = [UpdateStepNumbers(step=0, mini_batch=0, clip_active=True, grad_rel={"lm_head.weight": 1e-7})]
    assert "the norm itself is computed wrong" in update_why(failures, measured, 1.0)
    unmeasured = [UpdateStepNumbers(step=0, mini_batch=0, clip_active=True)]
    assert "not measured in this record" in update_why(failures, unmeasured, 1.0)


def _rank(rank: int, grads: dict, oracle: bool = False):
    """One rank's update result: one RL step of one optimizer step, its gradient shards before the clip (name ->
    (diff_sq, ref_sq, numel)) and its update sums (all exact)."""
    from harness.records.results import RankResult

    shards = {n: {"diff_sq": d, "ref_sq": r, "numel": k} for n, (d, r, k) in grads.items()}
    exact = {"theta_diff_sq": 0.0, "theta_ref_sq": 1.0, "delta_diff_sq": 0.0, "delta_ref_sq": 1.0, "numel": 4}
    update = {
        "log_probs": [{"step": 0, "log_probs": {"max_abs": 0.0}, "entropy": {"max_abs": 0.0}}] * 2,
        "optimizer_steps": [{"step": 0, "index": 0, "params": dict.fromkeys(grads, exact), "grads": shards}],
        "metrics": [{"step": 0, "verl": {"grad_norm": [2.0]}}],
    }
    if oracle:
        update["oracle"] = [
            {"step": 0, "epoch": 0, "mini_batch": 0, "clip_active": True, "metrics": {"grad_norm": 2.0}}
        ]
    return RankResult(rank=rank, world_size=2, device="cpu", update=update)


def test_the_ranks_gradient_shards_before_the_clip_are_summed_and_judged_with_the_gradient_tolerance(scenario):
    """Two ranks' shards of lm_head.weight (each with half the error) make the whole gradient's relative error;
    it is judged with the precision's one-backward gradient bound (inputs/tolerances.py grad_rel) and reported
    first in its optimizer step, before the updates and the metrics."""
    from harness.inputs.tolerances import tolerance_for, update_tolerance_for
    from harness.judge_cell.update_verdict import update_parity

    s = scenario("engine-update-adamw").model_copy(update={"steps": 1, "ppo_mini_batches": 1, "grad_accum": 1})
    half = {"lm_head.weight": (0.5, 0.5, 8), "model.norm.weight": (0.0, 0.5, 8)}
    results = [_rank(0, half, oracle=True), _rank(1, half)]
    tol = tolerance_for("fp32")
    shown, failures = update_parity(s, results, tol, update_tolerance_for("fp32"))
    assert shown["steps"][0]["grad_rel"] == {"lm_head.weight": 1.0, "model.norm.weight": 0.0}
    assert failures[0].words == f"gradient lm_head.weight before the clip: relative error 1 > {tol.grad_rel:g} {AT}"
    assert (failures[0].kind, failures[0].subject, failures[0].step, failures[0].mini_batch) == (
        "gradient",
        "lm_head.weight",
        0,
        0,
    )
    assert not any("model.norm.weight" in f.words for f in failures)
    # a rank that did not measure them (a record from before): not judged, not a failure
    older = _rank(1, half)
    older.update.optimizer_steps[0].grads = {}
    shown, failures = update_parity(s, [results[0], older], tol, update_tolerance_for("fp32"))
    assert shown["steps"][0]["grad_rel"] == {} and not any(f.kind == "gradient" for f in failures)


def test_later_optimizer_steps_gradients_are_judged_with_the_updates_bound(scenario):
    """The first optimizer step's gradient is on the seeded weights (the one-step grad_rel); a later one on weights
    carrying the update's rounding (UpdateTolerance.grad_rel, above the candidate's measured floor)."""
    from harness.inputs.tolerances import tolerance_for, update_tolerance_for
    from harness.judge_cell.update_verdict import update_parity

    s = scenario("engine-update-adamw").model_copy(update={"steps": 1, "ppo_mini_batches": 2, "grad_accum": 2})
    tol, update_tol = tolerance_for("fp32"), update_tolerance_for("fp32")
    assert tol.grad_rel < update_tol.grad_rel
    between = (tol.grad_rel + update_tol.grad_rel) / 2  # over the one-step bound, under the later steps'
    shards = {"lm_head.weight": ((between**2) / 2, 0.5, 8)}
    results = [_rank(0, shards, oracle=True), _rank(1, shards)]
    for r in results:
        second = r.update.optimizer_steps[0].model_copy(update={"index": 1})
        r.update.optimizer_steps.append(second)
    results[0].update.oracle.append(results[0].update.oracle[0].model_copy(update={"mini_batch": 1}))
    _, failures = update_parity(s, results, tol, update_tol)
    gradients = [f.words for f in failures if f.kind == "gradient"]
    assert len(gradients) == 1 and gradients[0].endswith(f"> {tol.grad_rel:g} {AT}"), gradients


def test_the_cause_of_a_wrong_gradient_before_the_clip_is_shared_by_its_cells(record):
    """verify groups a patch's failures by cause (records/record_cause.py): the why's lead, whatever its numbers and
    moment; its words are render's."""
    from harness.judge_cell.update_why import update_cause
    from harness.judge_change.patch_verdict import failures_by_cause

    def cell(scenario, value, step):
        failures = [
            _param("gradient", "lm_head.weight", value, 1e-4, _at(step)),
            _metric("grad_norm", 4.2, 2.1, 1, 1e-3),
        ]
        cause = update_cause(failures)
        assert cause is failures[0]
        return record(scenario, "mine", "mismatch", why="…", failures=["x"], cause=cause), ""

    groups = failures_by_cause([cell("engine-update-adamw", 1, 0), cell("engine-update-hsdp", 0.5, 1)])
    assert [(words, len(pairs)) for words, pairs in groups] == [("lm_head.weight's gradient wrong before the clip", 2)]


def test_the_updates_log_probs_name_the_samples_wrong_where_others_are_right(scenario):
    """The update's log-probs per sample (each rank its own, places in the global batch): the failure names the
    samples wrong and, where they are exactly the shorter responses, says so with the trainer's layout."""
    from harness.inputs.tolerances import tolerance_for, update_tolerance_for
    from harness.judge_cell.update_verdict import update_parity

    s = scenario("engine-update-adamw").model_copy(update={"steps": 1, "ppo_mini_batches": 1, "grad_accum": 1})
    results = [_rank(0, {}, oracle=True), _rank(1, {})]
    per_rank = {0: [[0, 12, 0.0], [1, 8, 6.1]], 1: [[2, 9, 2.0], [3, 12, 0.0]]}
    for r in results:
        r.update.log_probs = [
            r.update.log_probs[0].model_copy(
                update={
                    "log_probs": r.update.log_probs[0].log_probs.model_copy(
                        update={"max_abs": 6.1, "rows": per_rank[r.rank]}
                    )
                }
            ),
            r.update.log_probs[1],
        ]
    results[0].batch_layout = {"trainer": "ray", "response_mask": "dense 4x12", "response_lengths": [12, 8, 9, 12]}
    _, failures = update_parity(s, results, tolerance_for("fp32"), update_tolerance_for("fp32"))
    lead = next(f.words for f in failures if f.words.startswith("log-probs before step 1"))
    assert "(wrong in samples 1 (8 tokens), 2 (9 tokens) of the global batch's 4" in lead, lead
    assert "right in 0 (12 tokens), 3 (12 tokens)" in lead and "exactly the responses shorter" in lead, lead
    assert lead.endswith("under the ray trainer's batch (response_mask dense 4x12))"), lead
