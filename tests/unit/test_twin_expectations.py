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
