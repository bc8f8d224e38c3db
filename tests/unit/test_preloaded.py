"""The driver's side of the preloaded parent (driver/preloaded.py), without starting one."""

from __future__ import annotations

import pytest

from harness.driver import preloaded

pytestmark = pytest.mark.unit


def test_the_parents_key_is_the_environment_less_what_changes_per_launch_or_test():
    base = {"OMP_NUM_THREADS": "1", "PATH": "/bin"}
    same = [
        dict(base, PYTHONPATH="/arm-a"),
        dict(base, PYTHONPATH="/arm-b", HARNESS_PRELOAD_SOCKET="/s"),
        dict(base, PYTEST_CURRENT_TEST="tests/x.py::a (call)"),
        dict(base, PYTEST_CURRENT_TEST="b (setup)"),
    ]
    assert {preloaded._key(env) for env in same} == {preloaded._key(base)}
    # Anything read at import time may matter: another value is another parent.
    assert preloaded._key(dict(base, OMP_NUM_THREADS="2")) != preloaded._key(base)
    assert preloaded._key(dict(base, TORCH_LOGS="dynamo")) != preloaded._key(base)


def test_turned_off_means_no_parent(monkeypatch):
    monkeypatch.setenv("HARNESS_PRELOAD", "0")
    monkeypatch.setattr(preloaded, "_parent", None)
    assert preloaded.parent_for({"A": "1"}) is None and preloaded._parent is None
