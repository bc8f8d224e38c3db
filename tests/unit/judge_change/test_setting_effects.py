"""`harness sensitivity` (judge_change/setting_effects.py): every update scenario's settings and loss terms are seen by
the verdict, each moving some judged number by at least 10 of its tolerances when set back to its library's default
or turned off, or the scenario declares it in `cannot_see` with why. The check runs the oracle alone (torch and
transformers in this process, no verl, no torchrun), seconds per scenario: make unit and make test check the default
set's scenarios, the nightly (make test-nightly) the rest."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.inputs.scenario import load_all, load_scenario
from harness.judge_change.setting_effects import (
    SEES,
    Reach,
    SettingChange,
    changed,
    changes,
    findings,
    first_step_alone,
)

UPDATE_SCENARIOS = [s for s in load_all() if s.steps]


def test_the_changes_are_the_settings_build_optimizer_passes_the_files_settings_and_the_terms(tmp_path):
    path = tmp_path / "u.yaml"
    path.write_text("path: engine\nranks: 2\nsteps: 2\noptim: {optimizer: SGD, lr: 0.1, lr_warmup_steps: 1}\n")
    names = [c.name for c in changes(load_scenario(path))]
    # SGD: no betas; momentum is its keyword; a schedule field the file writes; clip, dual clip, entropy, grad clip.
    assert names == [
        "optim.lr",
        "optim.weight_decay",
        "optim.momentum",
        "optim.clip_grad",
        "optim.lr_warmup_steps",
        "term.clip",
        "term.dual_clip",
        "term.entropy",
        "term.grad_clip",
    ]
    weight_decay = next(c for c in changes(load_scenario(path)) if c.name == "optim.weight_decay")
    assert weight_decay.fields == {"optim.weight_decay": 0.0}  # torch.optim.SGD's default, not verl's 0.01


def test_a_changed_scenario_changes_only_the_named_fields():
    s = next(s for s in UPDATE_SCENARIOS if s.name == "engine-update-adamw")
    other = changed(s, {"optim.weight_decay": 0.01, "loss.clip_ratio_c": 1e9, "temperature": 1.0})
    assert (other.optim.weight_decay, other.loss.clip_ratio_c, other.temperature) == (0.01, 1e9, 1.0)
    assert other.optim.betas == s.optim.betas and other.loss.clip_ratio == s.loss.clip_ratio


def test_the_first_step_alone_is_taken_only_where_it_is_the_updates_own_first_step():
    s = next(s for s in UPDATE_SCENARIOS if s.name == "engine-update-adamw")
    assert first_step_alone(s).steps == 1
    assert first_step_alone(changed(s, {"optim.lr_warmup_steps_ratio": 0.5})) is None


def test_findings_accept_only_declared_changes_and_refuse_stale_declarations():
    s = next(s for s in UPDATE_SCENARIOS if s.name == "engine-update-adamw")
    unseen, seen = SettingChange("optim.betas", "x -> y", {}), SettingChange("optim.clip_grad", "x -> y", {})
    lines = findings(s, [Reach(unseen, 1.0, "n"), Reach(seen, SEES, "n")])
    assert any("optim.betas" in line and "declare it in `cannot_see`" in line for line in lines)
    assert any("cannot_see declares optim.clip_grad, but it moves" in line for line in lines)


def test_cannot_see_names_a_field_or_a_term(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("path: engine\nranks: 2\nsteps: 1\ncannot_see: {optim.nothing: why}\n")
    with pytest.raises(UsageError, match="cannot_see"):
        load_scenario(path)


# A nightly scenario's check is the nightly's too (make test-nightly): 5-13 s of CPU each, and its verdicts are; so is
# a family scenario's (its cells are the nightly's in make test: conftest.py).
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(s, id=s.name, marks=[pytest.mark.nightly] if {"nightly", "family"} & set(s.tags) else [])
        for s in UPDATE_SCENARIOS
    ],
)
def test_every_update_scenario_sees_its_settings_or_says_which_it_cannot(scenario):
    from harness.judge_change.setting_effects import sensitivity

    assert not findings(scenario, sensitivity(scenario))


def test_a_scenario_without_an_update_is_a_usage_error(cli_in_process):
    done = cli_in_process("sensitivity", "direct-1gpu")
    assert done.returncode == 2 and "direct-1gpu: no training update (steps: 0)" in done.stderr, done.stderr
