"""pytest collects every scenarios/*.yaml: each scenario x arm with an expected outcome is one test item that
runs the real thing (torchrun, verl, FSDP2) and fails on drift from scenarios/expectations.yaml.

    pytest scenarios/ -k multigpu
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# This project's hosts and CI set PYTHONDONTWRITEBYTECODE. In a test process only, Python and pytest may still write
# bytecode, into the checkout's own (git-ignored) __pycache__ folders: pytest's rewritten test modules (~2.5 s of each
# pytest process's collection, paid again by every run and every worker) and the harness's modules, which every
# command a test starts (and every server, torchrun and rank) then reads instead of compiling them again. The
# variable stays as it was, so no process this one starts writes any.
sys.dont_write_bytecode = False

from harness.inputs.scenario import NON_SCENARIO_FILES  # noqa: E402
from harness.paths import SCENARIOS_DIR  # noqa: E402 (after the switch above)
from harness.records.results import Record  # noqa: E402

_results_files = {}


def _results_file():
    """One results file per pytest process (xdist worker), so parallel workers never share a file."""
    from harness.records.store import ResultsFile

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if worker not in _results_files:
        _results_files[worker] = ResultsFile(f"pytest-{worker}")
    return _results_files[worker]


_cells: dict = {}
# The run batch of this process's shipped cells: one directory, as one command's cells share one, so that a
# scenario's arms share its oracle (rank/verl_side/engine_path.py _of_this_command).
_batch = f"pytest-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}"


def shipped_cell(scenario, arm_name: str) -> tuple[dict, str]:
    """(record, FILE:N where it was appended) of a shipped scenario x arm, launched once per pytest process through
    the harness's runner and shared: its scenario item checks it against expectations.yaml, and tests that ask
    other questions of the same run (its diagnosis, its bytes, a rerun of it) read it instead of launching again."""
    from harness.plan.arms import resolve_arm
    from harness.records.store import invocation_info
    from harness.run.runner import run_cell

    if (scenario.name, arm_name) not in _cells:
        record, line = run_cell(
            "pytest",
            scenario,
            resolve_arm(arm_name),
            results=_results_file(),
            invocation=invocation_info("pytest"),
            batch_id=_batch,
        )
        _cells[scenario.name, arm_name] = record, f"{_results_file().path}:{line}"
    return _cells[scenario.name, arm_name]


def _shipped(name: str, arm_name: str) -> tuple[dict, str]:
    from harness.inputs.scenario import load_scenario

    return shipped_cell(load_scenario(SCENARIOS_DIR / f"{name}.yaml"), arm_name)


@pytest.fixture(scope="session")
def shared_cell():
    """shared_cell(scenario name, arm) -> the record of that shipped cell, the one its scenario item checks (see
    shipped_cell). Mark the test `xdist_group(scenario name)` so that it runs in the same process as the items."""
    return lambda name, arm_name: _shipped(name, arm_name)[0]


@pytest.fixture(scope="session")
def shared_cell_ref():
    """shared_cell_ref(scenario name, arm) -> FILE:N, the line of this process's results file that holds the
    shipped cell's record (as `harness rerun` and `harness report` take it)."""
    return lambda name, arm_name: _shipped(name, arm_name)[1]


def pytest_configure(config):
    """Under xdist, one preloaded parent (harness/processes/) for every worker, started here in the controller
    before the workers start and collect, instead of one per worker at its first launch (client.lend). A worker
    takes the variable out of its environment, so that no process it starts sees it (a CLI a test starts borrows
    through shared_with_children, as before, or starts its own)."""
    from harness.processes import client

    # No parent outlives the test that started it (test_interrupt counts what a CLI leaves behind), and none a user's
    # command kept is borrowed: the tests' processes are their own. The tests of keeping set it themselves.
    os.environ[client.KEEP] = "0"
    if hasattr(config, "workerinput"):  # an xdist worker
        token = os.environ.pop(client.LENT, None)
        if token:
            client.expect_lent(token)
    elif _workers(config) > 1 and client.enabled() and _may_launch(config):
        from harness.rank.environment import rank_environment

        os.environ[client.LENT] = client.lend(rank_environment(None))


def _workers(config) -> int:
    count = getattr(config.option, "numprocesses", None)
    return count if isinstance(count, int) else 0


def _may_launch(config) -> bool:
    """False where nothing is run (--collect-only) or only torchrun-free tests were asked for (`make unit`: -m
    unit, or paths inside tests/unit/): a parent would be started for nothing."""
    from harness.paths import ROOT

    if getattr(config.option, "collectonly", False) or (config.option.markexpr or "").strip() == "unit":
        return False
    unit = ROOT / "tests" / "unit"
    paths = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    return not paths or not all(path == unit or unit in path.parents for path in paths)


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".yaml" and file_path.parent == SCENARIOS_DIR and file_path.name not in NON_SCENARIO_FILES:
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


_expectations: dict = {}


def _expected() -> dict:
    """scenarios/expectations.yaml, read once per collection (it was read again for each of ~75 scenario files:
    about 1 s of each pytest process's collection)."""
    from harness.inputs.expectations import load_expectations

    if "table" not in _expectations:
        _expectations["table"] = load_expectations()
    return _expectations["table"]


class ScenarioFile(pytest.File):
    def collect(self):
        from harness.inputs.scenario import load_scenario

        scenario = load_scenario(self.path)
        expected = _expected().get(scenario.name, {})
        if not expected:
            raise pytest.UsageError(f"{self.path}: no entry in scenarios/expectations.yaml")
        for arm_name, expectation in expected.items():
            item = ScenarioItem.from_parent(
                self, name=arm_name, scenario=scenario, arm_name=arm_name, expectation=expectation
            )
            # With `--dist loadgroup` (make test) one process runs a scenario's items and the tests that share
            # their records (shared_cell).
            item.add_marker(pytest.mark.xdist_group(scenario.name))
            if scenario.compile:
                item.add_marker(pytest.mark.slow)
            # A family's scenarios (Qwen3.5, Qwen2.5-VL, dense Qwen3: plan/families.py) are the same mechanisms on
            # another model: make test leaves their cells to make matrix and the nightly, verify runs them where a
            # patch touches the family's file, and tests/distributed/test_verify_families.py runs two every change.
            if "nightly" in scenario.tags or "family" in scenario.tags:
                item.add_marker(pytest.mark.nightly)
            yield item


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario, arm_name, expectation, **kwargs):
        super().__init__(**kwargs)
        self.scenario, self.arm_name, self.expectation = scenario, arm_name, expectation

    def runtest(self):
        from harness.inputs.expectations import drift

        record, _ = shipped_cell(self.scenario, self.arm_name)
        # Plain data: xdist sends a report's user properties between processes (execnet: no pydantic objects).
        self.user_properties.append(("record", record.written()))
        report_as_expected(record, self.expectation, drift(record, self.expectation))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ScenarioDrift):
            from harness.render.tables import verdict_table

            return "\n".join(excinfo.value.problems) + "\n" + verdict_table([excinfo.value.record])
        if excinfo.errisinstance(pytest.xfail.Exception):
            # An expected error, mismatch or hang (report_as_expected), reported by its reason (the report's
            # wasxfail), never by this text. pytest's own formatting of the traceback, each frame's statement found
            # in its parsed source, took 0.14 s of the test process an item (59 such items in make test; py-spy).
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, f"{self.scenario.name}[{self.arm_name}]"


def report_as_expected(record: Record, expectation, problems: list[str]) -> None:
    """pytest's words for a cell: drift from the expectation (an unexpected pass too) fails; an expected error,
    mismatch or hang is XFAIL with the expectation's reason; an expected skip is SKIPPED; an expected pass passes."""
    if problems:
        raise ScenarioDrift(record, problems)
    if expectation.outcome in ("error", "mismatch", "hang"):
        shown = (
            (record.verdict.failure_words() or [""])[0]
            if record.outcome == "mismatch"
            else (record.verdict.error.type if record.verdict.error else "")
        )
        pytest.xfail(f"{expectation.outcome} as expected ({shown}): {expectation.reason}")
    if expectation.outcome == "skipped":
        pytest.skip(f"skipped as expected ({(record.verdict.skipped_reason or '')}): {expectation.reason}")


class ScenarioDrift(Exception):
    def __init__(self, record, problems):
        super().__init__("; ".join(problems))
        self.record, self.problems = record, problems


@pytest.hookimpl(tryfirst=True)  # before xdist's, which names each item after its xdist_group
def pytest_collection_modifyitems(config, items):
    """tests/unit/ is the torchrun-free part of the suite (`make unit`, or `pytest -m unit`). The `ray` tests share
    one local Ray cluster (tests/distributed/test_ray.py): one process runs them all. The torchrun-free tests run
    last (a stable sort, so each worker orders them alike)."""
    grouping = any(line.startswith("xdist_group") for line in config.getini("markers"))  # xdist is loaded
    for item in items:
        if _torchrun_free(item):
            item.add_marker(pytest.mark.unit)
        if item.get_closest_marker("ray") and grouping:
            item.add_marker(pytest.mark.xdist_group("ray-cluster"))
    # xdist hands the workers their work in this order. The scenario items are collected last, and their groups are
    # the suite's longest (an update scenario's three cells: 25-30 s of a worker); ending on one can leave a worker
    # idle while the other runs it. The many short torchrun-free tests (about 80 s of both workers) fill that end.
    items.sort(key=_torchrun_free)


def _torchrun_free(item) -> bool:
    return "tests/unit/" in str(item.path).replace("\\", "/")


def pytest_collection_finish(session):
    # After every plugin's collection_modifyitems: xdist's marks the groups there.
    _check_groups_took(session.config, session.items)
    _freeze_what_collection_made()


def _freeze_what_collection_made():
    """What collection made lives as long as the session: the imports (torch's, transformers', the harness's) and
    the items, ~0.3M objects a worker. Frozen (gc.freeze), they are no longer walked by each full collection, 11-19
    a worker in make unit (3 s of CPU in all before, 2 s now), as the preloaded parent freezes its imports
    (harness/processes/server.py). What a test makes is collected as before; what was garbage before the freeze is
    freed first."""
    import gc

    gc.collect()
    gc.freeze()


def _check_groups_took(config, items):
    """Under `--dist loadgroup` (make test) xdist sends an xdist_group's tests to one process by suffixing their
    nodeids with @group in each worker. Where that does not take (pytest 9.2 with xdist 3.8), the groups silently
    split: every shared cell then ran once in its scenario's process and again in each test's. The error stops the
    session (xdist reports it as an INTERNALERROR about that nodeid) instead of letting it run twice as long."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
            raise pytest.UsageError(
                f"{item.nodeid}: its xdist_group did not take (pytest {pytest.__version__} with this pytest-xdist);"
                " install the pins of constraints.txt (make venv)"
            )
