"""Scenarios that describe one training configuration on two paths (twins) must be expected to reach one outcome
for every arm: a verdict that depends on which path ran a configuration is about the harness, not the patch."""

from __future__ import annotations

import pytest

from harness.inputs.expectations import load_expectations
from harness.inputs.scenario import load_all, training_configuration, twins


def test_twins_are_found_from_the_configuration_alone(scenario):
    padded = scenario("engine-padded")
    direct = scenario("direct-multigpu")
    assert [(a.name, b.name) for a, b in twins([direct, padded])] == [("direct-multigpu", "engine-padded")]
    # The engine's default packs the batch; the direct step pads it: different configurations.
    assert twins([scenario("fsdp2-multigpu"), direct]) == []
    assert twins([scenario("fsdp2-multigpu"), scenario("engine-padded")]) == []  # one path: no twins
    assert training_configuration(direct)["engine"]["use_remove_padding"] is False


def test_twins_expect_the_same_outcome_for_every_arm():
    pairs = twins(load_all())
    if not pairs:
        pytest.skip("no two scenarios describe one configuration on two paths")
    expected = load_expectations()
    disagreements = [
        f"{a.name} / {b.name} x {arm}: {expected[a.name][arm].outcome} / {expected[b.name][arm].outcome}"
        for a, b in pairs
        for arm in sorted(set(expected[a.name]) & set(expected[b.name]))
        if expected[a.name][arm].outcome != expected[b.name][arm].outcome
    ]
    assert not disagreements, disagreements
    assert all(set(expected[a.name]) == set(expected[b.name]) for a, b in pairs), "twins must list the same arms"


def test_one_configuration_under_both_trainers_is_expected_alike_unless_a_known_defect_says_why():
    """Scenarios that differ only in `trainer` (the batch verl's engine gets): one outcome per arm, except where the
    v1 scenario's upstream entry names the verl defect its layout brings out (a finding, docs/FINDINGS.md)."""
    from harness.inputs.scenario import configuration_but_trainer

    by_key: dict = {}
    for s in load_all():
        if s.path == "engine":
            by_key.setdefault(configuration_but_trainer(s.model_dump()), {})[s.trainer] = s.name
    pairs = [(both["ray"], both["v1"]) for both in by_key.values() if {"ray", "v1"} <= set(both)]
    assert {("fsdp2-multigpu", "engine-v1"), ("engine-update-adamw", "engine-update-v1")} <= set(pairs), pairs
    expected = load_expectations()
    disagreements = [
        f"{ray} / {v1} x {arm}: {expected[ray][arm].outcome} / {expected[v1][arm].outcome}"
        for ray, v1 in pairs
        if not expected[v1]["upstream"].known_defect
        for arm in sorted(set(expected[ray]) & set(expected[v1]))
        if expected[ray][arm].outcome != expected[v1][arm].outcome
    ]
    assert not disagreements, disagreements
