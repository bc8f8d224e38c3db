"""The one table of model families (harness/inputs/model_families.py): each model_type's fused-forward file, as verl
0.9.1's monkey_patch.py routes it, and the tiny models agreeing with the table on their model_type."""

from __future__ import annotations

import json

import pytest

from harness.inputs.model_families import DENSE_FILE, FAMILIES, fused_file, tiny_model_of
from harness.paths import model_config_path

pytestmark = pytest.mark.unit


def test_each_model_type_maps_to_the_file_monkey_patch_routes_it_to():
    assert fused_file("qwen3_vl") == fused_file("qwen3_vl_moe") == "qwen3_vl.py"
    assert fused_file("qwen3_5") == fused_file("qwen3_5_moe") == "qwen3_5.py"
    assert fused_file("qwen2_5_vl") == fused_file("qwen2_vl") == "qwen2_vl.py"
    assert fused_file("glm4v") == "glm4v.py"
    assert fused_file("qwen3") == fused_file("llama") == DENSE_FILE  # monkey_patch.py's last branch
    assert fused_file("a_type_no_family_has") == DENSE_FILE


def test_every_model_type_is_one_familys_and_every_tiny_model_is_of_its_familys_type():
    types = [t for f in FAMILIES for t in f.model_types]
    assert len(types) == len(set(types))
    for family in FAMILIES:
        if family.tiny:
            model_type = json.loads(model_config_path(family.tiny).read_text())["model_type"]
            assert model_type in family.model_types, (family.name, model_type)


@pytest.mark.parametrize(
    "path, tiny",
    [
        ("Qwen/Qwen3-VL-8B-Instruct", "tiny-qwen3-vl"),
        ("Qwen/Qwen3-VL-30B-A3B-Instruct", "tiny-qwen3-vl-moe"),
        ("/ckpt/Qwen3.5-9B/hf", "tiny-qwen3-5"),
        ("Qwen/Qwen2.5-VL-7B-Instruct", "tiny-qwen2-5-vl"),
        ("Qwen/Qwen3-8B", "tiny-qwen3"),
    ],
)
def test_a_checkpoint_name_finds_its_familys_tiny_model(path, tiny):
    assert tiny_model_of(path)[0] == tiny
