"""The oracle's alternatives (what real defects produce) are computed beside the reference without changing a
single number of it, and the per-rank parts add up to it; compare_gradients measures a shard against them."""

from __future__ import annotations

import pytest
import torch

from harness.rank.measures.parity import compare_gradients, compare_outputs
from harness.rank.oracle.reference import ReferenceGrads


def _reference(s, alternatives: bool):
    from harness.rank.oracle.batch import make_micro_batch, make_samples, with_position_ids
    from harness.rank.oracle.model import build_model
    from harness.rank.oracle.reference import compute_reference, sample_reference

    model = build_model(s.model, s.seed, s.model_overrides)
    groups = s.ranks // s.engine.ulysses_sequence_parallel_size  # data-parallel groups (SP: ranks share data)
    keys = [(r, m) for r in range(groups) for m in range(s.grad_accum)]
    if s.path == "engine":
        return s, sample_reference(
            model, {k: make_samples(model, s.batch, s.seed, *k) for k in keys}, s, alternatives=alternatives
        )
    batches = {k: with_position_ids(model, make_micro_batch(model.config, s.batch, s.seed, *k)) for k in keys}
    return s, compute_reference(model, batches, s, alternatives=alternatives)


@pytest.mark.parametrize("name", ["direct-multigpu", "fsdp2-multigpu", "engine-sp2-dp2"])
def test_alternatives_leave_the_reference_bit_identical_and_add_up(name, scenario):
    shipped = scenario(name)
    shipped = scenario(name, batch=shipped.batch.model_copy(update={"micro_batch_size": 1}))  # a unit test's size
    s, plain = _reference(shipped, alternatives=False)
    _, ref = _reference(shipped, alternatives=True)
    assert plain.grads.keys() == ref.grads.keys()
    for n, g in plain.grads.items():
        assert (g is None and ref.grads[n] is None) or torch.equal(g, ref.grads[n]), n
    for key, lp in plain.log_probs.items():
        assert torch.equal(lp, ref.log_probs[key]) and torch.equal(plain.entropy[key], ref.entropy[key])
    assert sorted(ref.grads.per_rank) == list(range(s.ranks))
    for n, g in ref.grads.items():
        if g is None:
            continue
        total = sum(ref.grads.per_rank[r][n] for r in range(s.ranks))
        assert float((total - g).norm()) <= 1e-6 * float(g.norm()), n
    assert ref.grads.entropy_part["lm_head.weight"] is not None
    names = set(ref.log_prob_alternatives[(0, 0)])
    assert any("previous token" in a for a in names) and any("twice" in a for a in names)


def test_compare_gradients_compares_a_shard_with_each_alternative():
    g = torch.randn(8, 4)
    share0 = torch.randn(8, 4)
    ref = ReferenceGrads({"w": g}, with_alternatives=True)
    ref.per_rank = {0: {"w": share0}, 1: {"w": g - share0}}
    ref.entropy_part = {"w": 0.1 * g}
    param = torch.nn.Parameter(torch.zeros(8, 4))
    param.grad = 2 * share0  # rank 0 (no process group) holding W times its own share: never reduced
    entry = compare_gradients([("w", param)], ref)["w"]
    fit = entry["fit"]
    un = fit["unreduced"]
    assert un["gb"] == pytest.approx(un["bb"]) and fit["gg"] == pytest.approx(un["bb"])
    assert set(fit) == {"gg", "reference", "unreduced", "entropy_sign"}
    # The existing numbers are what they were.
    assert entry["diff_sq"] == float((2 * share0 - g).pow(2).sum()) and entry["ref_sq"] == float(g.pow(2).sum())
    plain = compare_gradients([("w", param)], ReferenceGrads({"w": g}))["w"]
    assert "fit" not in plain and plain["diff_sq"] == entry["diff_sq"]


def test_compare_outputs_measures_each_alternative():
    expected, other = torch.zeros(2, 3), torch.ones(2, 3)
    result = compare_outputs(other, expected, {"shifted": other, "twice": 2 * other})
    assert result["max_abs"] == 1.0 and result["alternatives"] == {"shifted": 0.0, "twice": 1.0}
    assert "alternatives" not in compare_outputs(other, expected)


def test_seq_mean_token_sum_norm_has_the_alternative_of_each_micro_batchs_own_width(scenario):
    """What verl's agg_loss gives under the v1 trainer's nested batch (each micro-batch padded to its own longest
    response): the same gradient as the reference where every micro-batch's longest is the batch's, another where not.
    A unit test's size: one sample a micro-batch, no KL term."""
    from harness.rank.oracle.reference import MICRO_BATCH_WIDTH

    shipped = scenario("engine-agg-seq-mean-token-sum-norm")
    small = {
        "batch": shipped.batch.model_copy(update={"micro_batch_size": 1}),
        "loss": shipped.loss.model_copy(update={"use_kl_loss": False}),
    }
    unequal = scenario("engine-agg-seq-mean-token-sum-norm", **small)
    equal = scenario(  # the oracle is the same whichever trainer's batch verl gets
        "engine-agg-seq-mean-token-sum-norm",
        **{**small, "batch": small["batch"].model_copy(update={"same_length": True})},
    )
    for s, same in ((unequal, False), (equal, True)):
        _, ref = _reference(s, alternatives=True)
        alternative, reference = ref.grads.agg_modes[MICRO_BATCH_WIDTH]["lm_head.weight"], ref.grads["lm_head.weight"]
        close = float((alternative - reference).norm()) <= 1e-6 * float(reference.norm())
        assert close == same, (s.batch.same_length, float((alternative - reference).norm() / reference.norm()))
