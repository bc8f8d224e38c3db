"""issue 64: a failure that matches a known defect of the harness's table (records/known_failures.py) is named as such
wherever it shows, an imported recipe's cells too: GLM-4V's vision embedding with its fix patches/glm4v-vision.diff,
the Qwen3.5 packed-samples defect on its mismatches."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.judge_cell.diagnosis import error_diagnosis
from harness.judge_cell.verdict import with_known_defect
from harness.records.known_failures import known_mismatch
from harness.records.results import RankError

pytestmark = pytest.mark.unit

GLM_TAIL = """Traceback (most recent call last):
  File "/x/verl/models/transformers/glm4v.py", line 421, in forward_with_torch_backend
    vocab_weights=self.lm_head.weight,
  File "/x/transformers/models/glm4v/modeling_glm4v.py", line 220, in forward
    pos_embed_weight = self.position_embedding.weight
"""


def test_glm4v_visions_crash_names_its_parameter_and_the_projects_fix(record):
    message = "aten.grid_sampler_2d.default got mixed torch.Tensor and DTensor, for which ..."
    err = RankError(type="RuntimeError", message=message, phase="step", rank=0, traceback_tail=GLM_TAIL)
    d = error_diagnosis(err, record("glm4v-untied", world_size=2))
    assert d.object == "model.visual.embeddings.position_embedding.weight"  # not lm_head.weight
    assert d.text.startswith("sharded model.visual.embeddings.position_embedding.weight read outside its FSDP unit")
    assert "patches/glm4v-vision.diff" in d.text and d.reference == "patches/glm4v-vision.diff"


def test_glm4v_tied_output_error_names_the_fix_too(record):
    message = "'BaseModelOutputWithPooling' object has no attribute 'shape'"
    err = RankError(type="AttributeError", message=message, phase="step", rank=0, traceback_tail="")
    d = error_diagnosis(err, record("glm4v-tied", world_size=2))
    assert d.error_class == "glm4v-vision-output-unpacked" and "patches/glm4v-vision.diff" in d.text


def test_the_qwen3_5_packed_samples_mismatch_is_named_in_any_scenario_of_that_family(record):
    failing = ["model.language_model.layers.0.linear_attn.conv1d.weight"]
    imported = SimpleNamespace(model="tiny-qwen3-5", model_overrides={}, use_remove_padding=True)
    mine = record("run-qwen3-5-27b-fsdp", "upstream", "mismatch")
    why = with_known_defect(
        imported, mine, "grad model.language_model.layers.0.linear_attn.conv1d.weight 6e-4", failing
    )
    assert why.startswith(
        "grad model.language_model.layers.0.linear_attn.conv1d.weight 6e-4; known: the Qwen3.5 packed"
    )
    padded = SimpleNamespace(model="tiny-qwen3-5", model_overrides={}, use_remove_padding=False)
    assert with_known_defect(padded, mine, "grad x", failing) == "grad x"  # padded rows do not mix samples
    other = SimpleNamespace(model="tiny-qwen3-vl", model_overrides={}, use_remove_padding=True)
    assert with_known_defect(other, mine, "grad x", failing) == "grad x"
    assert known_mismatch("qwen3_5", True, "lm_head.weight") is None  # #6659's, not this one


def test_packed_vl_attention_without_flash_attn_is_named_a_limit_of_this_host(record):
    message = "name '_flash_use_top_left_mask' is not defined"
    err = RankError(type="NameError", message=message, phase="step", rank=0, traceback_tail="")
    d = error_diagnosis(err, record("run-qwen2-5-vl-7b-fsdp", world_size=2))
    assert d.error_class == "packed-vl-attention-needs-flash-attn"
    assert "not the patch's" in d.text and "engine.use_remove_padding false" in d.text
