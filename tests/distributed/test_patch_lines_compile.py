"""Every compile scenario (torch.compile: dynamo and its trace hooks beside coverage.py's tracer) runs its patched arms
with the watch of the patch's lines on (rank/measures/line_watch.py), and the measurement changes no outcome: each
cell is judged as scenarios/expectations.yaml expects, and says which of the patch's lines it ran (issue 65: the
sys.settrace watcher it replaced raised `TypeError: unhashable type: 'dict'` in a compiled W=2 cell, a false FAIL).
No cell of its own: each reads the shipped cell its scenario's item runs (conftest.py shared_cell, same xdist group),
so the nightly scenarios' cases run with the nightly (make test-nightly, make matrix)."""

from __future__ import annotations

import pytest

from harness.inputs.expectations import drift, load_expectations
from harness.inputs.scenario import NON_SCENARIO_FILES, load_scenario
from harness.paths import SCENARIOS_DIR

PATCHED_ARMS = ("none", "fsdp2-lmhead-forward")  # the arms with diffs: the ranks watch their lines
FIX_FILE = "verl/models/transformers/qwen3_vl.py"  # the file both diffs change


def _compile_cells() -> list:
    expected = load_expectations()
    cells = []
    for path in sorted(SCENARIOS_DIR.glob("*.yaml")):
        if path.name in NON_SCENARIO_FILES:
            continue
        scenario = load_scenario(path)
        if not scenario.compile:
            continue
        for arm in PATCHED_ARMS:
            marks = [pytest.mark.xdist_group(scenario.name), pytest.mark.slow]
            if "nightly" in scenario.tags:
                marks.append(pytest.mark.nightly)
            cells.append(pytest.param(scenario.name, arm, expected[scenario.name][arm], marks=marks))
    return cells


CELLS = _compile_cells()


def test_every_compile_scenario_is_here():
    """The scenarios with compile: true, the nightly's too (9 at this writing), each with both patched arms."""
    names = {c.values[0] for c in CELLS}
    assert {"fsdp2-compile", "direct-compile", "engine-update-compile-head", "fsdp2-compile-inductor"} <= names
    assert len(CELLS) == 2 * len(names) and len(names) >= 9


@pytest.mark.parametrize("name, arm, expectation", CELLS, ids=[f"{c.values[0]}[{c.values[1]}]" for c in CELLS])
def test_a_compiled_cell_runs_with_the_watch_on_and_is_judged_as_expected(shared_cell, name, arm, expectation):
    record = shared_cell(name, arm)
    assert drift(record, expectation) == [], (record.outcome, record.verdict)
    ran = record.measures.patch_lines_run
    assert ran is not None, record.measures.patch_lines_unseen  # watched, and measured
    assert record.measures.patch_lines_unseen is None  # CPU: nothing out of its reach, nothing failed
    if expectation.outcome == "pass":  # the fix ran: its lines in the fused head's forward were seen
        assert ran[FIX_FILE], ran
