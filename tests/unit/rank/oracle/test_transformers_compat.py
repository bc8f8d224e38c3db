"""The transformers 4.x adapters of rank/oracle/transformers_compat.py: under transformers 5 each gives back what the
harness
did without it; under 4.x each renames what 4.57 reads differently. The facts each stands on are checked here against
the installed transformers (5); against transformers 4.57 in a release environment by
tests/distributed/test_releases.py (the same rotary embedding and M-RoPE ids under both)."""

from __future__ import annotations

import json

import pytest

from harness.paths import model_config_path
from harness.rank.oracle.transformers_compat import (
    ROPE_INDEX_IDS,
    ROPE_PARAMETERS,
    adapters_in_use,
    config_fields,
    rope_index_kwargs,
)

pytestmark = pytest.mark.unit


def _raw(name: str) -> dict:
    return json.loads(model_config_path(name).read_text())


def test_under_transformers_5_nothing_changes():
    raw = _raw("tiny-qwen3-vl")
    assert config_fields(raw, 5) is raw
    types = object()
    assert rope_index_kwargs(types, 5) == {"mm_token_type_ids": types}
    assert adapters_in_use(5) == []


def test_rope_parameters_become_rope_theta_and_rope_scaling_under_transformers_4():
    raw = _raw("tiny-qwen3-vl")
    fields = config_fields(raw, 4)
    text = fields["text_config"]
    assert "rope_parameters" not in text and text["rope_theta"] == 10000.0
    assert text["rope_scaling"] == {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True}
    # Everything else, and the file's own mapping, as they were.
    assert {k: v for k, v in text.items() if k not in ("rope_theta", "rope_scaling")} == {
        k: v for k, v in raw["text_config"].items() if k != "rope_parameters"
    }
    assert fields["vision_config"] == raw["vision_config"] and "rope_parameters" in raw["text_config"]
    # A partial rotary factor is a config field of its own in transformers 4 (its default RoPE reads it there).
    glm = config_fields(_raw("tiny-glm4v"), 4)["text_config"]
    assert glm["partial_rotary_factor"] == 0.5 and "partial_rotary_factor" not in glm["rope_scaling"]
    # A dense model's RoPE sits at the top level.
    assert config_fields(_raw("tiny-qwen3"), 4)["rope_theta"] == 10000.0


def test_get_rope_index_takes_no_token_types_under_transformers_4():
    assert rope_index_kwargs(object(), 4) == {}
    assert adapters_in_use(4) == [ROPE_PARAMETERS, ROPE_INDEX_IDS]


def test_the_installed_transformers_reads_what_the_adapters_give_it():
    import inspect

    import transformers
    from transformers.models.qwen3_vl import modeling_qwen3_vl

    from harness.rank.oracle.model import load_config
    from harness.rank.oracle.transformers_compat import transformers_major

    major = transformers_major()
    assert major == int(transformers.__version__.split(".")[0])
    takes_types = "mm_token_type_ids" in inspect.signature(modeling_qwen3_vl.Qwen3VLModel.get_rope_index).parameters
    assert takes_types == ("mm_token_type_ids" in rope_index_kwargs(None, major))
    text = load_config("tiny-qwen3-vl").text_config
    rope = text.rope_parameters if major >= 5 else text.rope_scaling
    assert rope["mrope_section"] == [4, 2, 2]
