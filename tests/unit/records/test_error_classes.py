"""The one table of error classes (records/error_classes.py): every class has a signature and words, and
judge_cell/diagnosis.py finds it on a sample error (the samples of the diagnosis tests, tests/unit/judge_cell/); its
signature, reference and words are written in the table alone, never again in judge_cell/diagnosis.py,
records/known_failures.py or render/cause_words.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.judge_cell.diagnosis import error_diagnosis
from harness.records.error_classes import ERROR_CLASSES, class_named, known_classes
from harness.records.known_failures import known_failure
from harness.records.results import RankError, Record

pytestmark = pytest.mark.unit

AT_W2 = Record(scenario="fsdp2-multigpu", arm="upstream", outcome="error", lm_head_shape=[256, 64], world_size=2)
HEAD_TAIL = (
    '  File "/x/torch_functional.py", line 42, in _fused_linear_for_ppo_fwd\n'
    "    logits = (hidden_states @ vocab_weights.t()) / temperature\n"
)
HARNESS_TAIL = (
    '  File "/home/u/fsdp2-harness/harness/rank/measures/parity.py", line 32, in chunk\n'
    "    return distribute_tensor(full.detach(), mesh, placements, src_data_rank=None).to_local().cpu()\n"
    '  File "/u/h/.venv/lib/python3.11/site-packages/torch/distributed/tensor/_api.py", line 941, in '
    "distribute_tensor\n"
    "    raise ValueError(\n"
)
SPEC = (
    "DTensorSpec(mesh=DeviceMesh((ddp=2, fsdp=2), 'cpu', stride=(2, 1)), placements=({}), tensor_meta=TensorMeta("
    "shape=torch.Size([]), stride=(), dtype=torch.float32), shard_order=(), use_strided_shard_as_shard_order=False)"
)

# A sample error of each class: (type, message, traceback tail, phase, full message), as the diagnosis tests have
# them (tests/unit/judge_cell/test_diagnosis.py, test_known_failures_named.py, test_patch_verdict_closing.py).
SAMPLES = {
    "dtensor-outside-fsdp-forward": (
        "RuntimeError",
        "aten.mm.default got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor",
        HEAD_TAIL,
    ),
    "fp32-master-weight-meets-bf16": (
        "RuntimeError",
        "expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != float",
        HEAD_TAIL,
    ),
    "no-sync-post-backward-without-forward": (
        "AttributeError",
        "'FSDPParam' object has no attribute '_unsharded_param'",
        '  File "/c/torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", line 9, in post_backward\n    x\n',
    ),
    "glm4v-vision-position-embedding": (
        "RuntimeError",
        "aten.grid_sampler_2d.default got mixed torch.Tensor and DTensor, for which ...",
        '  File "/x/transformers/models/glm4v/modeling_glm4v.py", line 220, in forward\n'
        "    pos_embed_weight = self.position_embedding.weight\n",
    ),
    "glm4v-vision-output-unpacked": ("AttributeError", "'BaseModelOutputWithPooling' object has no attribute 'shape'"),
    "packed-vl-attention-needs-flash-attn": ("NameError", "name '_flash_use_top_left_mask' is not defined"),
    "placements-misfit-mesh": (
        "RuntimeError",
        "tuple index out of range",
        "",
        "forward",
        "tuple index out of range\n\nSharding propagation failed for aten.stack.default(["
        + ", ".join([SPEC.format("Replicate(), _NormPartial(2.0)")] * 3 + [SPEC.format("Replicate(),")])
        + "]) on None)",
    ),
    "packed-position-ids-layout": (
        "RuntimeError",
        "index 128 is out of bounds for dimension 1 with size 128",
        '  File "/site/transformers/masking_utils.py", line 184, in inner_mask\n'
        "    return packed_sequence_mask[batch_idx, q_idx] == packed_sequence_mask[batch_idx, kv_idx]\n",
    ),
    "shard-used-as-whole-weight": ("RuntimeError", "index 248 is out of bounds for dimension 1 with size 128"),
    "arm-output-unreadable": (
        "ArmOutputUnreadable",
        "lm_head.weight's gradient has 1 placement(s) (Partial(sum)) on a 2-D mesh (2, 2): a DTensor needs one "
        "per mesh dimension",
        HARNESS_TAIL,
        "compare",
    ),
    "harness-side": (
        "ValueError",
        "`placements` must have the same length as `device_mesh.ndim`! Found placements length: 1, and "
        "device_mesh.ndim: 2.",
        HARNESS_TAIL,
        "compare",
    ),
}


def _error(kind: str, message: str, tail: str = "", phase: str = "step", full: str | None = None) -> RankError:
    return RankError(
        type=kind, message=message, phase=phase, rank=0, traceback_tail=tail, full_message=full,
        root_cause={"type": kind, "message": message},
    )  # fmt: skip


@pytest.mark.parametrize("found", ERROR_CLASSES, ids=lambda c: c.name)
def test_every_class_has_a_signature_and_words_and_diagnosis_finds_it_on_a_sample(found):
    assert found.signature and all(found.signature) and found.words.strip()
    assert (found.reference is None) == (found.why is None)  # a known failure says its why; no other class has one
    error = _error(*SAMPLES[found.name])
    diagnosis = error_diagnosis(error, AT_W2)
    if found.reference:  # a known failure: named by its reference, its why ending the error's
        text = " ".join(x for x in (error.message, error.full_message, error.root_cause.message) if x)
        assert known_failure(f"{text}\n{error.traceback_tail}") is found
        assert diagnosis.reference == found.reference and diagnosis.text.endswith(found.why)
        assert diagnosis.error_class in (found.name, "dtensor-outside-fsdp-forward")  # GLM-4V's read comes first
    else:
        assert diagnosis.error_class == found.name, diagnosis.text


def test_the_table_has_one_entry_per_class_and_a_sample_of_each():
    names = [c.name for c in ERROR_CLASSES]
    assert len(names) == len(set(names)) and set(names) == set(SAMPLES)
    assert class_named("no such class") is None and class_named(None) is None
    assert [c.name for c in known_classes()] == [c.name for c in ERROR_CLASSES if c.reference]


def test_a_classs_strings_are_written_in_the_table_alone():
    """The name, signature, reference, words and why of each class: none repeated in the modules that read them."""
    root = Path(__file__).resolve().parents[3] / "harness"
    readers = {p: (root / p).read_text() for p in ("judge_cell/diagnosis.py", "records/known_failures.py")}
    readers["render/cause_words.py"] = (root / "render/cause_words.py").read_text()
    for found in ERROR_CLASSES:
        words = [*found.words.split("{object}"), found.object_words, found.unnamed]  # the words around the object
        strings = [found.name, *found.signature, *words, found.why, found.reference]
        for text in filter(None, strings):
            if len(text.strip()) < 16:
                continue  # too short to be the table's own ("glm4v", "this rank's ")
            assert not [p for p, source in readers.items() if text in source], (found.name, text)


def test_a_class_says_its_object_where_it_is_known_and_what_stands_for_it_where_not():
    from harness.records.error_classes import DTENSOR_OUTSIDE_FORWARD, FP32_MASTER_MEETS_BF16

    assert FP32_MASTER_MEETS_BF16.said("lm_head.weight") == (
        "a gathered fp32 master weight (lm_head.weight) meeting bf16 activations"
    )
    assert FP32_MASTER_MEETS_BF16.said() == FP32_MASTER_MEETS_BF16.bare()
    assert DTENSOR_OUTSIDE_FORWARD.said("w") == "sharded w read outside its FSDP unit's forward"
    assert DTENSOR_OUTSIDE_FORWARD.said().startswith("a sharded parameter (DTensor; which one: not found) read")
