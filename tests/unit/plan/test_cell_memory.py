"""plan/cell_memory.py: a tiny model's cell that would not fit this host's available memory is refused right before
its launch (skipped, saying both), while every shipped scenario fits a 16 GiB runner; the check is what the runner's
launch asks (plan/head_memory_model.py launch_short)."""

from __future__ import annotations

import pytest

from harness.inputs.scenario import SCENARIOS_DIR, Scenario, load_each
from harness.plan import cell_memory, head_memory_model

pytestmark = pytest.mark.unit

GIB = 1 << 30


def test_every_shipped_scenario_fits_a_16_gib_runner():
    loaded, _ = load_each()
    swept, _ = load_each(SCENARIOS_DIR / "sweep")
    for scenario in (s for s in loaded + swept if s.path != "head"):
        assert cell_memory.memory_short(scenario, 16 * GIB) is None, scenario.name


def test_a_cell_at_several_ceilings_is_refused_saying_what_it_needs_and_what_there_is(monkeypatch):
    big = Scenario(name="big", ranks=64, batch={"micro_batch_size": 64, "seq_len": 512, "response_len": 12})
    assert cell_memory.tokens_per_micro_batch(big) == 64 * 512
    why = cell_memory.memory_short(big, 24 * GIB)
    assert why.startswith("needs ~176.0 GiB (64 ranks x 2.75 GiB: 32768 tokens a micro-batch); 24.0 GiB available")
    monkeypatch.setattr(head_memory_model, "available_bytes", lambda: 24 * GIB)
    assert head_memory_model.launch_short(big) == why  # what the launch asks, right before it
    small = Scenario(name="small", ranks=2)
    assert head_memory_model.launch_short(small) is None


def test_the_engine_path_counts_its_samples_not_seq_len():
    """The engine's samples are a response and a prompt of a few tokens (an image's added), whatever seq_len says."""
    engine = Scenario(
        name="e", ranks=1, path="engine", batch={"micro_batch_size": 4, "seq_len": 260, "response_len": 250}
    )
    t, h, w = engine.batch.image_grid
    assert cell_memory.tokens_per_micro_batch(engine) == 4 * (250 + cell_memory.ENGINE_PROMPT_TOKENS + t * h * w + 2)
