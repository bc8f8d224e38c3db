"""The scenario's `loss:` and `ref:` (inputs/scenario.py LossSettings, RefSettings): verl's names and values, refused
where they could not run."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.inputs.scenario import LossSettings, RefSettings, Scenario


def _scenario(**fields):
    return Scenario(name="x", ranks=2, **fields)


def test_the_defaults_keep_todays_loss():
    loss = LossSettings()
    assert (loss.clip_ratio, loss.entropy_coeff, loss.loss_agg_mode, loss.loss_mode) == (
        0.2,
        0.01,
        "token-mean",
        "vanilla",
    )
    assert (loss.use_kl_loss, loss.kl_loss_coef, loss.kl_loss_type) == (False, 0.001, "low_var_kl")
    assert loss.entropy_asked


def test_the_direct_path_refuses_what_only_verls_ppo_loss_runs():
    with pytest.raises(ValidationError, match="loss.loss_agg_mode: verl's ppo_loss runs it on the engine path only"):
        _scenario(loss=LossSettings(loss_agg_mode="token-sum"))
    with pytest.raises(ValidationError, match="loss.use_kl_loss"):
        _scenario(loss=LossSettings(use_kl_loss=True))
    # the fields the direct step honours stay
    assert _scenario(loss=LossSettings(clip_ratio=0.3, entropy_coeff=0.0)).loss.clip_ratio == 0.3
    assert _scenario(path="engine", loss=LossSettings(loss_mode="gspo")).loss.loss_mode == "gspo"


def test_a_ref_without_the_kl_loss_is_refused():
    with pytest.raises(ValidationError, match="ref: set for a reference engine that never runs"):
        _scenario(path="engine", ref=RefSettings(param_offload=True))
    assert _scenario(
        path="engine", loss=LossSettings(use_kl_loss=True), ref=RefSettings(param_offload=True)
    ).ref.param_offload


def test_a_kl_loss_without_a_backward_is_refused():
    with pytest.raises(ValidationError, match="forward_only"):
        _scenario(path="engine", forward_only=True, loss=LossSettings(use_kl_loss=True))


@pytest.mark.parametrize("field, value", [("loss_agg_mode", "seq-mean"), ("kl_loss_type", "k4"), ("loss_mode", "ppo")])
def test_values_verl_does_not_know_are_refused(field, value):
    with pytest.raises(ValidationError):
        LossSettings(**{field: value})


def test_the_new_alternatives_are_described_by_their_cause():
    from harness.judge_cell.diagnosis import _describe

    assert _describe("kl_sign", 1.0, 2) == "the KL loss with the wrong sign (subtracted from the loss, not added)"
    assert _describe("agg:seq-mean-token-sum-norm", 1.0, 2).startswith(
        "the loss aggregated as seq-mean-token-sum-norm, not as the scenario's loss_agg_mode"
    )
