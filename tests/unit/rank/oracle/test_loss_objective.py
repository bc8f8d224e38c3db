"""The oracle's actor objective (rank/oracle/loss.py) against values worked out by hand from the definitions: the
clipped surrogate with separate low / high bounds and the dual clip, GSPO's sequence ratio and its gradient, every
KL estimator with its clamps and the straight-through '+' variants, and the weight every loss_agg_mode gives a
sample over the whole batch of every rank."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from harness.inputs.scenario import LossSettings
from harness.rank.oracle.loss import (
    AGG_MODES,
    KL_TYPES,
    clip_bounds,
    entropy_asked,
    gspo_token_losses,
    kl_estimate,
    ppo_clip_counts,
    ppo_token_losses,
    sample_terms,
    sample_weights,
)


def _t(*values):
    return torch.tensor(values, dtype=torch.float64)


def test_clip_higher_bounds_each_side_by_its_own_ratio():
    # ratios e^0.25 = 1.284 (above 1 + 0.28 = 1.28) and e^-0.25 = 0.779 (below 1 - 0.2 = 0.8)
    log_prob, old = _t(0.25, -0.25), _t(0.0, 0.0)
    up = ppo_token_losses(log_prob, old, _t(1.0, 1.0), clip_low=0.2, clip_high=0.28, clip_ratio_c=3.0)[0]
    # A > 0: max(-r, -clip(r)): the upper clip caps the gain at 1.28; below, -0.779 > -0.8 keeps the ratio
    assert up[0].item() == pytest.approx(-1.28)
    assert up[1].item() == pytest.approx(-math.exp(-0.25))
    down = ppo_token_losses(log_prob, old, _t(-1.0, -1.0), clip_low=0.2, clip_high=0.28, clip_ratio_c=3.0)[0]
    # A < 0: max(r, clip(r)): above, 1.284 > 1.28 keeps the ratio; below, the lower clip holds it at 0.8
    assert down[0].item() == pytest.approx(math.exp(0.25))
    assert down[1].item() == pytest.approx(0.8)


def test_dual_clip_bounds_a_negative_advantages_loss_by_c():
    # ratio e^1.5 = 4.48 with A = -2: the surrogate 8.96 exceeds c * |A| = 6, so the loss is 6
    loss, ratio = ppo_token_losses(_t(1.5), _t(0.0), _t(-2.0), clip_low=0.2, clip_high=0.2, clip_ratio_c=3.0)
    assert loss.item() == pytest.approx(6.0)
    clipped, lower = ppo_clip_counts(ratio, _t(-2.0), clip_low=0.2, clip_high=0.2, clip_ratio_c=3.0)
    assert (clipped.item(), lower.item()) == (0.0, 1.0)
    # the same ratio with A = +2 is capped by the upper clip, not the dual clip
    clipped, lower = ppo_clip_counts(ratio, _t(2.0), clip_low=0.2, clip_high=0.2, clip_ratio_c=3.0)
    assert (clipped.item(), lower.item()) == (1.0, 0.0)


def test_the_ratio_exponent_is_clamped_at_20():
    loss, ratio = ppo_token_losses(_t(30.0), _t(0.0), _t(-1e-9), clip_low=0.2, clip_high=0.2, clip_ratio_c=3.0)
    assert ratio.item() == pytest.approx(math.exp(20.0))


def test_clip_bounds_fall_back_to_clip_ratio():
    assert clip_bounds(LossSettings(clip_ratio=0.3)) == (0.3, 0.3)
    assert clip_bounds(LossSettings(clip_ratio=0.3, clip_ratio_high=0.28)) == (0.3, 0.28)
    assert clip_bounds(LossSettings(clip_ratio_low=0.1)) == (0.1, 0.2)


def test_gspo_ratio_is_the_geometric_mean_and_its_gradient_s_dlogp():
    log_prob = _t(-1.0, -2.0, -3.0).requires_grad_()
    old = _t(-1.1, -2.0, -2.8)  # token log-ratios 0.1, 0, -0.2: their mean -1/30
    loss, ratio, clipped = gspo_token_losses(log_prob, old, 1.0, clip_low=0.2, clip_high=0.2)
    s = math.exp(-1.0 / 30)
    assert ratio.detach().tolist() == pytest.approx([s, s, s])  # every token carries the sequence's ratio
    assert clipped.tolist() == [0.0, 0.0, 0.0]
    loss.sum().backward()
    # d(-A s_t)/d log p_t = -A s: the sequence ratio, not the token's own
    assert log_prob.grad.tolist() == pytest.approx([-s, -s, -s])


def test_gspo_clips_the_sequence_ratio():
    log_prob = _t(0.0, 0.0).requires_grad_()
    old = _t(-0.5, -0.5)  # s = e^0.5 = 1.65 > 1.2
    loss, _, clipped = gspo_token_losses(log_prob, old, 1.0, clip_low=0.2, clip_high=0.2)
    assert loss.detach().tolist() == pytest.approx([-1.2, -1.2])
    assert clipped.tolist() == [1.0, 1.0]
    loss.sum().backward()
    assert log_prob.grad.tolist() == [0.0, 0.0]  # clipped: no gradient


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("kl", 0.5),
        ("k1", 0.5),
        ("abs", 0.5),
        ("mse", 0.125),
        ("k2", 0.125),
        # k3 with log q - log p = -0.5: e^-0.5 + 0.5 - 1
        ("low_var_kl", math.exp(-0.5) - 0.5),
        ("k3", math.exp(-0.5) - 0.5),
    ],
)
def test_kl_estimators_values(kind, expected):
    assert kl_estimate(_t(-1.0), _t(-1.5), kind).item() == pytest.approx(expected)


def test_k3_clamps_the_log_ratio_at_20_and_the_value_at_10():
    # log q - log p = 30 -> clamped to 20: e^20 - 20 - 1, clamped to 10
    assert kl_estimate(_t(-31.0), _t(-1.0), "k3").item() == pytest.approx(10.0)
    # log q - log p = -30 -> clamped to -20: e^-20 + 20 - 1 = 19.000..., clamped to 10
    assert kl_estimate(_t(-1.0), _t(-31.0), "k3").item() == pytest.approx(10.0)
    # unclamped: log q - log p = 2: e^2 - 3 = 4.389
    assert kl_estimate(_t(-3.0), _t(-1.0), "k3").item() == pytest.approx(math.exp(2) - 3)


@pytest.mark.parametrize("base", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
def test_straight_through_keeps_the_value_and_takes_k2s_gradient(base):
    log_prob = _t(-1.0).requires_grad_()
    value = kl_estimate(log_prob, _t(-1.5), base + "+")
    assert value.item() == pytest.approx(kl_estimate(_t(-1.0), _t(-1.5), base).item())
    value.backward()
    assert log_prob.grad.item() == pytest.approx(0.5)  # d/dlogp (logp - ref)^2 / 2 = logp - ref


def test_gradients_of_the_plain_estimators():
    grads = {}
    for kind in ("k1", "abs", "k2", "k3"):
        log_prob = _t(-1.0).requires_grad_()
        kl_estimate(log_prob, _t(-1.5), kind).backward()
        grads[kind] = log_prob.grad.item()
    # k1: 1; abs: sign(0.5); k2: 0.5; k3: 1 - e^(ref - logp) = 1 - e^-0.5
    assert grads == pytest.approx({"k1": 1.0, "abs": 1.0, "k2": 0.5, "k3": 1 - math.exp(-0.5)})


def test_every_kl_type_the_scenario_accepts_is_computed():
    literal = LossSettings.model_fields["kl_loss_type"].annotation
    assert set(literal.__args__) == set(KL_TYPES)
    for kind in KL_TYPES:
        assert torch.isfinite(kl_estimate(_t(-1.0), _t(-1.2), kind)).all()


def test_sample_weights_of_every_mode():
    # two ranks' samples of 2, 4 (rank 0) and 3, 1 (rank 1) tokens: 10 tokens, 4 sequences, padded width 5
    lengths = [2, 4, 3, 1]
    got = {m: sample_weights(m, lengths, global_batch_size=4, horizon=5) for m in AGG_MODES}
    assert got["token-mean"] == pytest.approx([0.1] * 4)
    assert got["token-sum"] == [1.0] * 4
    assert got["seq-mean-token-sum"] == pytest.approx([0.25] * 4)
    assert got["seq-mean-token-sum-norm"] == pytest.approx([0.05] * 4)
    assert got["seq-mean-token-mean"] == pytest.approx([1 / 8, 1 / 16, 1 / 12, 1 / 4])
    assert set(LossSettings.model_fields["loss_agg_mode"].annotation.__args__) == set(AGG_MODES)


def test_micro_batch_losses_scaled_as_verl_describes_add_up_to_the_weights():
    """Each rank's micro-batch loss, normalised by the global token count / batch size and times the data-parallel
    size, averaged over ranks (FSDP's gradient mean) and summed over micro-batches: the weighted sum."""
    torch.manual_seed(0)
    # rank -> micro-batches -> per-sample token losses
    ranks = {0: [[torch.randn(2), torch.randn(4)], [torch.randn(3)]], 1: [[torch.randn(1), torch.randn(5)], []]}
    samples = [x for micros in ranks.values() for micro in micros for x in micro]
    lengths = [len(x) for x in samples]
    dp, tokens, seqs, horizon = 2, sum(lengths), len(lengths), 5
    for mode in AGG_MODES:
        per_rank = []
        for micros in ranks.values():
            total = 0.0
            for micro in micros:
                if not micro:
                    continue
                sums = [float(x.sum()) for x in micro]
                if mode == "token-mean":
                    total += sum(sums) / tokens * dp
                elif mode == "token-sum":
                    total += sum(sums) * dp
                elif mode == "seq-mean-token-sum":
                    total += sum(sums) / seqs * dp
                elif mode == "seq-mean-token-sum-norm":
                    total += sum(sums) / seqs * dp / horizon
                else:
                    total += sum(float(x.mean()) for x in micro) / seqs * dp
            per_rank.append(total)
        expected = sum(per_rank) / dp
        weights = sample_weights(mode, lengths, global_batch_size=seqs, horizon=horizon)
        assert sum(w * float(x.sum()) for w, x in zip(weights, samples)) == pytest.approx(expected), mode


def test_entropy_is_asked_by_the_trainers_rule():
    assert entropy_asked(LossSettings(entropy_coeff=0.0)) is False
    assert entropy_asked(LossSettings(entropy_coeff=0.0, calculate_entropy=True)) is True
    assert entropy_asked(LossSettings(entropy_coeff=0.01)) is True


def test_sample_terms_adds_each_term_with_its_coefficient():
    log_prob, entropy = _t(-1.0, -2.0), _t(3.0, 4.0)
    old, ref = _t(-1.0, -2.0), _t(-1.5, -2.5)
    loss = SimpleNamespace(
        clip_ratio=0.2,
        clip_ratio_low=None,
        clip_ratio_high=None,
        clip_ratio_c=3.0,
        entropy_coeff=0.5,
        calculate_entropy=False,
        loss_mode="vanilla",
        use_kl_loss=True,
        kl_loss_coef=2.0,
        kl_loss_type="k2",
    )
    terms = sample_terms(log_prob, entropy, old, ref, 1.0, loss)
    # ratio 1: pg = -1 per token; entropy bonus -0.5 * H; KL 2 * 0.125
    assert terms["total"].tolist() == pytest.approx([-1 - 1.5 + 0.25, -1 - 2.0 + 0.25])
    loss.entropy_coeff, loss.use_kl_loss = 0.0, False
    terms = sample_terms(log_prob, entropy, old, ref, 1.0, loss)
    assert terms["entropy"] is None and terms["kl"] is None
    assert terms["total"].tolist() == pytest.approx([-1.0, -1.0])
