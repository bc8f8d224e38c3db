"""issue 49: verify's closing block about the patch, numbers that are not judged, whys that name the cause."""

from __future__ import annotations

import pytest
from record_builder import make_record  # tests/record_builder.py (tests/ is on sys.path: its conftest)

pytestmark = pytest.mark.unit


def test_an_update_number_without_a_bound_shows_as_not_judged():
    """bf16: no bound on the update (spec/tolerances.py update_rel None): the column says so, not a number."""
    from harness.render.tables import row

    update = {"update_worst_rel": 0.27, "update_worst_param": "model.visual.blocks.0.norm2.weight"}
    bf16 = {"logprob_abs": 0.1, "update": {"update_rel": None, "param_rel": 0.02}}
    cells = row(make_record("engine-update-bf16", outcome="pass", update=update, tolerance=bf16))
    assert "update not judged" in cells and not any("0.27" in c for c in cells)
    fp32 = {"logprob_abs": 1e-5, "update": {"update_rel": 0.05, "param_rel": 1e-3}}
    cells = row(make_record("engine-update-adamw", outcome="pass", update=update, tolerance=fp32))
    assert "update 0.27 (visual.blocks.0.norm2.weight)" in cells


HSDP_TAIL = """Traceback (most recent call last):
  File "/home/u/fsdp2-harness/harness/rank/verl_side/engine_path.py", line 334, in _compare
    entry["grads"] = compare_gradients(handle.engine.module.named_parameters(), oracle.grads)
  File "/home/u/fsdp2-harness/harness/rank/measures/parity.py", line 120, in compare_gradients
    share = chunk(expected).float().cpu()
  File "/home/u/fsdp2-harness/harness/rank/measures/parity.py", line 32, in chunk
    return distribute_tensor(full.detach(), mesh, placements, src_data_rank=None).to_local().cpu()
  File "/u/h/.venv/lib/python3.11/site-packages/torch/distributed/tensor/_api.py", line 941, in distribute_tensor
    raise ValueError(
"""


def _error(type_, message, phase, tail=HSDP_TAIL):
    from harness.spec.results import RankError

    return RankError(
        type=type_, message=message, phase=phase, rank=0, traceback_tail=tail,
        root_cause={"type": type_, "message": message},
    )  # fmt: skip


def test_a_harness_side_traceback_while_reading_the_arm_is_named_as_such_never_no_known_pattern():
    """engine-hsdp under the sum fix (issue 49): torch's ValueError raised in the compare phase, in the harness's
    own code. Before: 'no known pattern', which reads like a harness crash."""
    from harness.driver.diagnosis import NO_PATTERN, error_diagnosis

    message = (
        "`placements` must have the same length as `device_mesh.ndim`! "
        "Found placements length: 1, and device_mesh.ndim: 2."
    )
    d = error_diagnosis(_error("ValueError", message, "compare"), make_record("engine-hsdp", world_size=4))
    assert d.error_class == "harness-side" and d.text != NO_PATTERN
    assert d.text.startswith("raised in the harness's own code while comparing the arm's results with the oracle's")
    assert "measures/parity.py:32" in d.text and message in d.text


def test_a_gradient_the_harness_cannot_read_is_named_by_the_arms_output():
    """What rank/measures/parity.py raises now for such a gradient: the parameter and its placements on the mesh."""
    from harness.driver.diagnosis import error_diagnosis

    message = (
        "lm_head.weight's gradient has 1 placement(s) (Partial(sum)) on a 2-D mesh (2, 2): a DTensor needs one "
        "per mesh dimension"
    )
    d = error_diagnosis(_error("ArmOutputUnreadable", message, "compare"), make_record("engine-hsdp", world_size=4))
    assert (d.error_class, d.object) == ("arm-output-unreadable", "lm_head.weight")
    assert d.text.startswith("the arm produced what the harness cannot read (comparing the arm's results")
    assert "lm_head.weight's gradient has 1 placement(s)" in d.text and "not a harness defect" in d.text


def test_the_gradient_reader_refuses_placements_that_do_not_fit_the_mesh():
    """The check itself, on a real DTensor-like gradient's attributes: one placement on a 2-D mesh is named."""
    from types import SimpleNamespace

    from harness.rank.measures.parity import ArmOutputUnreadable, _check_readable

    mesh = SimpleNamespace(ndim=2, mesh=SimpleNamespace(shape=(2, 2)))
    with pytest.raises(ArmOutputUnreadable, match=r"lm_head.weight's gradient has 1 placement\(s\) \('P'\) on a 2-D"):
        _check_readable("lm_head.weight", SimpleNamespace(placements=("P",), device_mesh=mesh))
    _check_readable("lm_head.weight", SimpleNamespace(placements=("P", "S"), device_mesh=mesh))  # fits: no error
