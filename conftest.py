"""pytest collects every scenarios/*.yaml: each scenario x arm with an expected outcome is one test item that
runs the real thing (torchrun, verl, FSDP2) and fails on drift from scenarios/expectations.yaml.

    pytest scenarios/ -k multigpu
"""
from __future__ import annotations

import os

import pytest

from harness.paths import SCENARIOS_DIR
from harness.spec.scenario import NON_SCENARIO_FILES

_results_files = {}


def _results_file():
    """One results file per pytest process (xdist worker), so parallel workers never share a file."""
    from harness.driver.records import ResultsFile

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if worker not in _results_files:
        _results_files[worker] = ResultsFile(f"pytest-{worker}")
    return _results_files[worker]


@pytest.fixture
def run_cell():
    """Run one cell through the harness's own runner (the records land in this worker's results file, as those of
    any command): run_cell(scenario, arm name or diff path) -> record."""
    from harness.driver.arms import resolve_arm
    from harness.driver.runner import run_cell as runner_cell

    def run(scenario, arm: str) -> dict:
        return runner_cell("pytest", scenario, resolve_arm(arm), results=_results_file())

    return run


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".yaml" and file_path.parent == SCENARIOS_DIR and file_path.name not in NON_SCENARIO_FILES:
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


class ScenarioFile(pytest.File):
    def collect(self):
        from harness.spec.expectations import load_expectations
        from harness.spec.scenario import load_scenario

        scenario = load_scenario(self.path)
        expected = load_expectations().get(scenario.name, {})
        if not expected:
            raise pytest.UsageError(f"{self.path}: no entry in scenarios/expectations.yaml")
        for arm_name, expectation in expected.items():
            item = ScenarioItem.from_parent(self, name=arm_name, scenario=scenario, arm_name=arm_name,
                                            expectation=expectation)
            if scenario.compile:
                item.add_marker(pytest.mark.slow)
            if "nightly" in scenario.tags:
                item.add_marker(pytest.mark.nightly)
            yield item


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario, arm_name, expectation, **kwargs):
        super().__init__(**kwargs)
        self.scenario, self.arm_name, self.expectation = scenario, arm_name, expectation

    def runtest(self):
        from harness.driver.arms import resolve_arm
        from harness.driver.runner import run_cell
        from harness.spec.expectations import drift

        record = run_cell("pytest", self.scenario, resolve_arm(self.arm_name), results=_results_file())
        self.user_properties.append(("record", record))
        report_as_expected(record, self.expectation, drift(record, self.expectation))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ScenarioDrift):
            from harness.render.tables import verdict_table

            return "\n".join(excinfo.value.problems) + "\n" + verdict_table([excinfo.value.record])
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, f"{self.scenario.name}[{self.arm_name}]"


def report_as_expected(record: dict, expectation, problems: list[str]) -> None:
    """pytest's words for a cell: drift from the expectation (an unexpected pass too) fails; an expected error,
    mismatch or hang is XFAIL with the expectation's reason; an expected skip is SKIPPED; an expected pass passes."""
    if problems:
        raise ScenarioDrift(record, problems)
    if expectation.outcome in ("error", "mismatch", "hang"):
        shown = (record.get("failures") or [""])[0] if record.get("outcome") == "mismatch" else (
            (record.get("error") or {}).get("type", ""))
        pytest.xfail(f"{expectation.outcome} as expected ({shown}): {expectation.reason}")
    if expectation.outcome == "skipped":
        pytest.skip(f"skipped as expected ({record.get('skipped_reason', '')}): {expectation.reason}")


class ScenarioDrift(Exception):
    def __init__(self, record, problems):
        super().__init__("; ".join(problems))
        self.record, self.problems = record, problems


def pytest_collection_modifyitems(config, items):
    """tests/unit/ is the torchrun-free part of the suite (`make unit`, or `pytest -m unit`)."""
    for item in items:
        if "tests/unit/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.unit)
