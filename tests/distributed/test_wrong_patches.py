"""Plausible-but-wrong fixes must each get the verdict that exposes them (real torchrun runs, one each)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.spec.expectations import Expectation, drift

FIXTURES = Path(__file__).parent.parent / "fixtures" / "wrong_patches"
TABLE = yaml.safe_load((FIXTURES / "expectations.yaml").read_text())


def test_every_fixture_has_an_expectation():
    assert sorted(p.stem for p in FIXTURES.glob("*.diff")) == sorted(TABLE)
    assert len(TABLE) >= 5
    # Slips in verl's engine and loss code, outside verl/models/, in at least two different files.
    outside = {line.split()[1] for p in FIXTURES.glob("*.diff") for line in p.read_text().splitlines()
               if line.startswith("+++ ") and "/models/" not in line}
    assert len(outside) >= 2, outside


@pytest.mark.parametrize("patch", sorted(TABLE))
def test_wrong_patch_is_caught(patch, run_cell):
    from harness.paths import SCENARIOS_DIR
    from harness.render.tables import verdict_table
    from harness.spec.scenario import load_scenario

    entry = dict(TABLE[patch])
    scenario = load_scenario(SCENARIOS_DIR / f"{entry.pop('scenario')}.yaml")
    base = entry.pop("on_top_of", None)
    record = run_cell(scenario, (f"{base}+" if base else "") + str(FIXTURES / f"{patch}.diff"))
    problems = drift(record, Expectation(**entry))
    assert not problems, "\n".join(problems) + "\n" + verdict_table([record])
