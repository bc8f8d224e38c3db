"""pytest collects every scenarios/*.yaml: each scenario x arm with an expected outcome is one test item that
runs the real thing (torchrun, verl, FSDP2) and fails on drift from scenarios/expectations.yaml.

    pytest scenarios/ -k multigpu
"""
from __future__ import annotations

import os

import pytest

from harness.paths import SCENARIOS_DIR

_results_files = {}


def _results_file():
    """One results file per pytest process (xdist worker), so parallel workers never share a file."""
    from harness.record import ResultsFile

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if worker not in _results_files:
        _results_files[worker] = ResultsFile(f"pytest-{worker}")
    return _results_files[worker]


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".yaml" and file_path.parent == SCENARIOS_DIR and file_path.name != "expectations.yaml":
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


class ScenarioFile(pytest.File):
    def collect(self):
        from harness.expectations import load_expectations
        from harness.scenario import load_scenario

        scenario = load_scenario(self.path)
        expected = load_expectations().get(scenario.name, {})
        if not expected:
            raise pytest.UsageError(f"{self.path}: no entry in scenarios/expectations.yaml")
        for arm_name, expectation in expected.items():
            item = ScenarioItem.from_parent(self, name=arm_name, scenario=scenario, arm_name=arm_name,
                                            expectation=expectation)
            if scenario.compile:
                item.add_marker(pytest.mark.slow)
            yield item


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario, arm_name, expectation, **kwargs):
        super().__init__(**kwargs)
        self.scenario, self.arm_name, self.expectation = scenario, arm_name, expectation

    def runtest(self):
        from harness.arms import arm_fingerprint, materialise, resolve_arm
        from harness.expectations import drift
        from harness.launch import launch
        from harness.record import invocation_info, stamp_record
        from harness.verdict import judge

        arm = resolve_arm(self.arm_name)
        record = judge(launch(self.scenario, arm.name, materialise(arm)))
        stamp_record(record, scenario_file=self.path, arm_fingerprint=arm_fingerprint(arm),
                     invocation=invocation_info("pytest"))
        _results_file().append(record)
        self.user_properties.append(("record", record))
        problems = drift(record, self.expectation)
        if problems:
            raise ScenarioDrift(record, problems)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ScenarioDrift):
            from harness.report import markdown_table

            return "\n".join(excinfo.value.problems) + "\n" + markdown_table([excinfo.value.record])
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, f"{self.scenario.name}[{self.arm_name}]"


class ScenarioDrift(Exception):
    def __init__(self, record, problems):
        super().__init__("; ".join(problems))
        self.record, self.problems = record, problems
