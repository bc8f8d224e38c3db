"""Plausible-but-wrong fixes must each get the verdict that exposes them (real torchrun runs, one each)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.expectations import Expectation, drift

FIXTURES = Path(__file__).parent / "wrong_patches"
TABLE = yaml.safe_load((FIXTURES / "expectations.yaml").read_text())


def test_every_fixture_has_an_expectation():
    assert sorted(p.stem for p in FIXTURES.glob("*.diff")) == sorted(TABLE)
    assert len(TABLE) >= 5


@pytest.mark.parametrize("patch", sorted(TABLE))
def test_wrong_patch_is_caught(patch):
    from harness.arms import materialise, resolve_arm
    from harness.launch import launch
    from harness.paths import SCENARIOS_DIR
    from harness.report import markdown_table
    from harness.scenario import load_scenario
    from harness.verdict import judge

    entry = dict(TABLE[patch])
    scenario = load_scenario(SCENARIOS_DIR / f"{entry.pop('scenario')}.yaml")
    arm = resolve_arm(str(FIXTURES / f"{patch}.diff"))
    record = judge(launch(scenario, arm.name, materialise(arm)))
    problems = drift(record, Expectation(**entry))
    assert not problems, "\n".join(problems) + "\n" + markdown_table([record])
