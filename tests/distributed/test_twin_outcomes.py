"""Twin scenarios (one training configuration, two paths: spec.scenario.twins) must reach one outcome under every
arm of patches/, the wrong patches, and a fix that keys on verl's configuration. Real torchrun runs.

Arms with an expectation for both twins are run by the scenario items (conftest.py) against expectations that
tests/unit/inputs/test_expectations_twins.py checks agree; this file runs the others. The wrong patches run in the
nightly."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.inputs.expectations import load_expectations
from harness.inputs.scenario import load_all, twins
from harness.paths import PATCHES_DIR

FIXTURES = Path(__file__).parent.parent / "fixtures"
CONFIG_KEYED_FIX = FIXTURES / "alternative_fixes" / "lm-head-root-unit-when-fused.diff"
PAIRS = twins(load_all())
NO_TWINS = "no two scenarios describe one configuration on two paths: nothing to compare"
EXPECTED = load_expectations()
ARMS = [
    pytest.param(p.stem, id=p.stem)
    for p in sorted(PATCHES_DIR.glob("*.diff"))
    if not any(p.stem in EXPECTED.get(a.name, {}) and p.stem in EXPECTED.get(b.name, {}) for a, b in PAIRS)
] + [
    pytest.param(str(p), id=p.stem, marks=pytest.mark.nightly)
    for p in sorted((FIXTURES / "wrong_patches").glob("*.diff"))
]


@pytest.mark.skipif(not PAIRS, reason=NO_TWINS)
@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("pair", PAIRS, ids=[f"{a.name}~{b.name}" for a, b in PAIRS])
def test_twins_reach_one_outcome(pair, arm, run_cell):
    from harness.render.tables import verdict_table

    records = [run_cell(scenario, arm) for scenario in pair]
    outcomes = {r.scenario: r.outcome for r in records}
    assert len(set(outcomes.values())) == 1, f"{outcomes}\n{verdict_table(records)}"


def test_a_fix_keyed_on_the_configuration_passes_where_the_trainer_sets_the_key(run_cell):
    """The fix reads use_fused_kernels inside apply_fsdp2; on both paths verl gets the engine config the trainer
    builds (rank/verl_side/verl_config.py), so it passes on both, with its lm_head gradient reduced across 2 ranks."""
    from harness.render.tables import verdict_table

    if not PAIRS:
        pytest.skip(NO_TWINS)
    for scenario in PAIRS[0]:
        record = run_cell(scenario, str(CONFIG_KEYED_FIX))
        assert record.outcome == "pass", verdict_table([record])
        assert record.measures.verl_config["engine_use_fused_kernels"] is True, record.measures.verl_config
