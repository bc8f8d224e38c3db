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
