"""The family sweep (scenarios/sweep/): its cells against scenarios/sweep/expectations.yaml.

Real runs (torchrun, verl, FSDP2, 2 ranks) for the untied cells under every arm, and for the tied cells under
installed verl ("upstream"): the cells where the outcome depends on verl's code. The tied cells under the other
arms (a forward method registered on an lm_head that is no FSDP unit, a no-op) run in `make sweep`, which checks
the same file, or here with HARNESS_SWEEP_FULL=1. Triton cells are skipped without CUDA at no cost.
"""

from __future__ import annotations

import os

import pytest

from harness.commands.sweep import SWEEP_EXPECTATIONS, family_of, plan, sweep_scenarios
from harness.inputs.expectations import drift, load_expectations

# The nightly's (make test-nightly): the bug class across seven model families (make sweep): the nightly's.
pytestmark = pytest.mark.nightly

EXPECTED = load_expectations(SWEEP_EXPECTATIONS)
SCENARIOS = sweep_scenarios()
CELLS = plan(SCENARIOS, EXPECTED)
FULL = os.environ.get("HARNESS_SWEEP_FULL") == "1"


def _runs_here(scenario, arm_name) -> bool:
    # Triton cells cost nothing without CUDA (skipped before any process starts).
    return FULL or arm_name == "upstream" or not family_of(scenario)[1] or scenario.fused_backend == "triton"


@pytest.mark.parametrize("scenario,arm_name", CELLS, ids=[f"{s.name}[{a}]" for s, a in CELLS])
def test_sweep_cell(scenario, arm_name, run_cell):
    from harness.render.tables import verdict_table

    if not _runs_here(scenario, arm_name):
        pytest.skip("tied cell under a patched arm: run by `make sweep`, or here with HARNESS_SWEEP_FULL=1")
    record = run_cell(scenario, arm_name)
    problems = drift(record, EXPECTED[scenario.name][arm_name])
    assert not problems, "\n".join(problems) + "\n" + verdict_table([record])
