"""The family sweep's plan (scenarios/sweep/ against its expectations.yaml) and the per-family batches it relies
on: no torchrun. The cells themselves run in tests/distributed/test_sweep.py."""

from __future__ import annotations

import json

import pytest

from harness.commands.sweep import SWEEP_DIR, SWEEP_EXPECTATIONS, family_of, sweep_scenarios
from harness.inputs.expectations import load_expectations
from harness.inputs.scenario import load_all
from harness.paths import MODELS_DIR
from harness.plan.arms import resolve_arm

EXPECTED = load_expectations(SWEEP_EXPECTATIONS)
SCENARIOS = sweep_scenarios()
REQUIRED_FAMILIES = {"qwen3_vl", "qwen3_vl_moe", "qwen2_5_vl", "glm4v", "qwen3_5", "qwen3", "llama"}


def test_every_required_family_is_swept_tied_and_untied():
    torch_cells = [s for s in SCENARIOS if s.fused_backend == "torch"]
    seen = {family_of(s) for s in torch_cells}
    for family in REQUIRED_FAMILIES:
        assert (family, True) in seen and (family, False) in seen, f"{family}: needs a tied and an untied scenario"
    assert {s.name for s in SCENARIOS if s.fused_backend == "triton"} == {s.name + "-triton" for s in torch_cells}


def test_every_cell_has_both_arms_and_reasons():
    for name, arms in EXPECTED.items():
        assert {"upstream", "fsdp2-lmhead-forward-all"} <= set(arms), name
        assert all(e.reason and e.reason != "TODO" for e in arms.values()), name


def test_every_model_file_states_whether_its_head_is_tied():
    """family_of reads tie_word_embeddings as written (inputs/models.py): a file without it would fall to a guess."""
    files = sorted(MODELS_DIR.glob("*.json")) + sorted((MODELS_DIR / "real").glob("*.json"))
    assert files and all("tie_word_embeddings" in json.loads(f.read_text()) for f in files)


def test_the_family_read_as_json_is_the_one_transformers_reads():
    """The sweep's plan reads a family without transformers; the rank builds the model through AutoConfig."""
    from harness.rank.oracle.model import load_config

    for s in sweep_scenarios():
        config = load_config(s.model, s.model_overrides)
        assert family_of(s) == (config.model_type, bool(config.tie_word_embeddings)), s.name


def test_sweep_scenarios_stay_out_of_the_main_matrix():
    main = {s.name for s in load_all()}
    assert not main & {s.name for s in SCENARIOS}
    assert all(p.parent == SWEEP_DIR for p in SWEEP_DIR.glob("*.yaml"))


def test_joined_arm_applies_its_diffs_in_order():
    arm = resolve_arm("glm4v-vision+fsdp2-lmhead-forward-all")
    assert [p.stem for p in arm.patches] == ["glm4v-vision", "fsdp2-lmhead-forward-all"]


# Rows of M-RoPE position ids verl's forward wants: 4 (a text row first) where verl's process_position_ids
# insists on it, transformers' 3 elsewhere; dense families take none and build plain 1-D positions.
POSITION_ROWS = {
    "qwen3_vl": 3,
    "qwen3_vl_moe": 3,
    "qwen3_5": 3,
    "qwen2_5_vl": 4,
    "glm4v": 4,
    "qwen3": None,
    "llama": None,
}


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.fused_backend == "torch"], ids=lambda s: s.name)
def test_family_batch(scenario):
    """The model builds from its config alone, ties when the scenario says so, and gets the family's batch."""
    from harness.rank.oracle.batch import make_micro_batch, with_position_ids
    from harness.rank.oracle.model import build_model

    model = build_model(scenario.model, scenario.seed, scenario.model_overrides)
    family, tied = family_of(scenario)
    assert (model.lm_head.weight is model.get_input_embeddings().weight) == tied
    batch = with_position_ids(model, make_micro_batch(model.config, scenario.batch, scenario.seed, 0, 0))
    rows = POSITION_ROWS[family]
    if rows is None:
        assert batch.position_ids is None and batch.pixel_values is None
        return
    assert tuple(batch.position_ids.shape) == (rows, *batch.input_ids.shape)
    t, h, w = scenario.batch.image_grid
    per_image = t * h * w // model.config.vision_config.spatial_merge_size**2
    n_image_tokens = (batch.input_ids == model.config.image_token_id).sum(dim=1)
    assert n_image_tokens.tolist() == [per_image * scenario.batch.images_per_sample] * batch.input_ids.shape[0]
    # Image tokens share one temporal position; the text after the image resumes past its largest position.
    vision = batch.position_ids[-3:]
    image = batch.input_ids[0] == model.config.image_token_id
    assert vision[0, 0, image].unique().numel() == 1
    if rows == 4:
        assert batch.position_ids[0, 0].tolist() == list(range(batch.input_ids.shape[1]))
