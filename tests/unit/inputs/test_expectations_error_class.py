"""An expectation pins an error by its class (records/error_classes.py), the same on every device; one device's
wording of a class is refused where the file is read, and the stub of a new cell names the class."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.inputs.expectations import Expectation, drift, error_class_of, load_expectations, stub_yaml
from harness.records.error_classes import FP32_MASTER_MEETS_BF16

CPU = "expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != float"
CUDA = "expected mat1 and mat2 to have the same dtype, but got: c10::BFloat16 != float"


def _crash(record, message: str):
    return record(outcome="error", error={"type": "RuntimeError", "message": message})


@pytest.mark.parametrize("message", [CPU, CUDA])
def test_the_class_matches_each_devices_wording(record, message):
    expected = Expectation(outcome="error", reason="r", error_class=FP32_MASTER_MEETS_BF16.name)
    crash = _crash(record, message)
    assert error_class_of(crash) == FP32_MASTER_MEETS_BF16.name
    assert drift(crash, expected) == []


def test_an_error_of_another_class_drifts(record):
    expected = Expectation(outcome="error", reason="r", error_class=FP32_MASTER_MEETS_BF16.name)
    problems = drift(_crash(record, "aten.mm.default got mixed torch.Tensor and DTensor"), expected)
    assert len(problems) == 1 and "dtensor-outside-fsdp-forward" in problems[0]
    assert len(drift(_crash(record, "CUDA out of memory"), expected)) == 1  # no class at all


def test_the_diagnosis_class_is_the_records_own(record):
    crash = _crash(record, CPU)
    crash.verdict.diagnosis = {"error": {"class": "dtensor-outside-fsdp-forward"}}
    assert error_class_of(crash) == "dtensor-outside-fsdp-forward"


def test_one_devices_wording_and_an_unknown_class_are_refused(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(f"s1:\n  upstream:\n    outcome: error\n    reason: r\n    error_contains: '{CPU[:41]}'\n")
    with pytest.raises(
        UsageError, match="field 's1.upstream.error_contains'.*error_class: fp32-master-weight-meets-bf16"
    ):
        load_expectations(path)
    path.write_text("s1:\n  upstream:\n    outcome: error\n    reason: r\n    error_class: fp32-master\n")
    with pytest.raises(UsageError, match="field 's1.upstream.error_class'.*no error class 'fp32-master'"):
        load_expectations(path)


def test_the_shipped_expectations_name_the_bf16_crash_by_its_class():
    entries = [e for arms in load_expectations().values() for e in arms.values()]
    assert sum(e.error_class == FP32_MASTER_MEETS_BF16.name for e in entries) >= 5
    assert not any(e.error_contains and FP32_MASTER_MEETS_BF16.found_in(e.error_contains) for e in entries)


def test_a_new_cells_stub_names_a_device_worded_class(record):
    crash = _crash(record, CPU)
    text = stub_yaml([crash], {})
    assert f"error_class: {FP32_MASTER_MEETS_BF16.name}" in text and "error_contains" not in text
