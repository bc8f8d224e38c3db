"""How a scenario x arm reads in pytest (conftest.py's ScenarioItem): an expected failure is XFAIL with its reason,
drift fails (an unexpected pass included), an expected skip is SKIPPED. The records are synthetic: what is tested
is the reporting of a verdict, not the verdict (tests/distributed/ and scenarios/ run the real cells)."""

from __future__ import annotations

import importlib.util

import pytest
from _pytest.outcomes import Skipped, XFailed

from harness.inputs.expectations import Expectation, drift
from harness.paths import ROOT
from harness.records.results import Record

_spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
root_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(root_conftest)

CELL = {"scenario": "fsdp2-multigpu", "arm": "upstream"}
ERROR = {
    **CELL,
    "outcome": "error",
    "error": {
        "type": "RuntimeError",
        "message": "aten.mm.default got mixed torch.Tensor and DTensor",
        "phase": "forward",
        "rank": 0,
    },
    "failures": [],
}
MISMATCH = {
    **CELL,
    "outcome": "mismatch",
    "error": None,
    "failures": ["grad lm_head.weight: relative error 1 > 0.0001"],
    "parity": {"grads_over_tolerance": {"lm_head.weight": 1.0}, "missing_grads": []},
}
PASS = {
    **CELL,
    "outcome": "pass",
    "error": None,
    "failures": [],
    "parity": {"grads_over_tolerance": {}, "missing_grads": []},
}


def report(record, outcome, reason="the reason"):
    expectation = Expectation(outcome=outcome, reason=reason)
    record = Record.model_validate(record)
    root_conftest.report_as_expected(record, expectation, drift(record, expectation))


def test_an_expected_error_is_xfail_with_its_reason():
    with pytest.raises(XFailed, match=r"error as expected \(RuntimeError\): before #6659 the sharded weight"):
        report(ERROR, "error", "before #6659 the sharded weight")


def test_an_expected_mismatch_is_xfail_naming_the_failure():
    with pytest.raises(XFailed, match=r"mismatch as expected \(grad lm_head.weight: relative error 1"):
        report(MISMATCH, "mismatch")


def test_an_unexpected_pass_fails():
    with pytest.raises(root_conftest.ScenarioDrift, match="outcome pass"):
        report(PASS, "error")


def test_drift_between_failures_fails():
    with pytest.raises(root_conftest.ScenarioDrift, match="outcome mismatch"):
        report(MISMATCH, "error")


def test_an_expected_pass_passes_and_an_expected_skip_skips():
    report(PASS, "pass")
    with pytest.raises(Skipped, match="needs 4 CUDA"):
        report({**CELL, "outcome": "skipped", "skipped_reason": "needs 4 CUDA device(s), 0 visible"}, "skipped")


def test_a_group_that_did_not_take_under_loadgroup_stops_the_session(request):
    """make test's --dist loadgroup: a grouped item whose nodeid xdist did not suffix with @group would split its
    group over processes (and run shared cells twice); the session stops, naming it."""
    from types import SimpleNamespace

    grouped = pytest.mark.xdist_group("fsdp2-multigpu").mark

    def item(nodeid):
        return SimpleNamespace(nodeid=nodeid, get_closest_marker={"xdist_group": grouped}.get)

    config = SimpleNamespace(option=SimpleNamespace(loadgroup=True))
    root_conftest._check_groups_took(config, [item("tests/x.py::test_a@fsdp2-multigpu")])
    with pytest.raises(pytest.UsageError, match=r"tests/x.py::test_b: its xdist_group did not take"):
        root_conftest._check_groups_took(config, [item("tests/x.py::test_b")])
    root_conftest._check_groups_took(SimpleNamespace(option=SimpleNamespace()), [item("tests/x.py::test_b")])


def test_an_xfail_is_described_by_its_reason_and_other_failures_by_pytest():
    """ScenarioItem.repr_failure: an expected failure's text is its reason, without pytest's formatting of the
    traceback (which its report never shows); drift keeps its table, anything else pytest's own text."""
    with pytest.raises(XFailed) as xfail:
        report(ERROR, "error", "before #6659 the sharded weight")
    text = root_conftest.ScenarioItem.repr_failure(None, xfail)
    assert text == "error as expected (RuntimeError): before #6659 the sharded weight"

    item = object.__new__(root_conftest.ScenarioItem)  # no collection tree: only the fallback is asked of it
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pytest.Item, "repr_failure", lambda self, excinfo: f"pytest's text of {excinfo.typename}")
        with pytest.raises(KeyError) as other:
            {}["missing"]
        assert item.repr_failure(other) == "pytest's text of KeyError"


def test_the_controller_lends_a_parent_only_where_the_run_may_launch():
    """_may_launch: not for `make unit` (-m unit, or paths inside tests/unit/) nor --collect-only, where the
    controller's one server for its workers (pytest_configure, client.lend) would preload for nothing."""
    from types import SimpleNamespace

    def config(markexpr, *args, collectonly=False):
        option = SimpleNamespace(markexpr=markexpr, collectonly=collectonly)
        return SimpleNamespace(option=option, args=[str(ROOT / a) for a in args])

    assert not root_conftest._may_launch(config("unit", "tests/unit"))
    assert not root_conftest._may_launch(config("", "tests/unit/test_cli.py::test_x", "tests/unit"))
    assert root_conftest._may_launch(config("not nightly and not ray", "."))
    assert not root_conftest._may_launch(config("not nightly and not ray", ".", collectonly=True))
    assert root_conftest._may_launch(config("", "tests/unit", "scenarios/fsdp2-1gpu.yaml"))
