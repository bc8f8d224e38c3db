"""Every error class the harness names, in one table: how judge_cell/diagnosis.py finds it in a rank's error (its
signature), its public reference where it is a known failure (an issue, a pull request, the project's fix), and its
words: what verify's closing block and the pictures say of a group of cells of the class (render/cause_words.py),
and what the why of one error leads with where judge_cell/diagnosis.py says the class as such. A known failure's why
(records/known_failures.py known_failure) ends with its `why`: the reference, the cause and what avoids it.

Data only, in records/ so that judge_cell/, judge_change/ and render/ all read it (render/ never imports a judge room).
A new class goes here; the code that matches it reads the entry by name (class_named), never repeats a signature or the
words. The order is the order diagnosis tries them: the first class whose signature an error shows is its class."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ErrorClass:
    """One error class. signature: regular expressions, every one found in what `searched` names: the error's
    messages, its messages and traceback ("text"), its type and its root cause's, or a traceback frame's file.
    words: the class in words, {object} where the object it concerns goes: shown as object_words says (its name at
    {}), or as unnamed where none is known."""

    name: str
    signature: tuple[str, ...]
    words: str
    searched: Literal["message", "text", "type", "frame"] = "text"
    reference: str | None = None  # a known failure's public reference: judge_cell/diagnosis.py names it after the class
    why: str | None = None  # a known failure: its reference, cause and what avoids it, which end the error's why
    object: str | None = None  # the parameter a known failure reads, where its error names none
    object_words: str = "{}"
    unnamed: str = "a parameter"
    # (a verl file, a text in it): the code a known failure describes; a tree without it does not have the failure
    # (harness bisect names the class only where the commit's tree holds it). None: not checked.
    code: tuple[str, str] | None = None
    # Its message is worded differently by each device (CPU's "m1 and m2", CUDA's "mat1 and mat2"): an expectation
    # names the class (error_class), never those words (inputs/expectations.py refuses them).
    worded_by_device: bool = False

    def found_in(self, text: str) -> bool:
        """Whether `text` (what `searched` names) shows every part of the signature."""
        return all(re.search(part, text) for part in self.signature)

    def said(self, obj: str | None = None) -> str:
        """The class in words, with the object it concerns."""
        return self.words.format(object=self.object_words.format(obj) if obj else self.unnamed)

    def bare(self) -> str:
        """The class in words without the object it concerns."""
        return self.words.format(object="")


DTENSOR_OUTSIDE_FORWARD = ErrorClass(
    name="dtensor-outside-fsdp-forward",
    signature=(r"mixed torch\.Tensor and DTensor",),
    searched="message",
    words="{object} read outside its FSDP unit's forward",
    object_words="sharded {}",
    unnamed="a sharded parameter (DTensor; which one: not found)",
)
FP32_MASTER_MEETS_BF16 = ErrorClass(
    name="fp32-master-weight-meets-bf16",
    signature=(
        r"expected m1 and m2 to have the same dtype|expected (mat1|scalar type).*(BFloat16|Half).*Float"
        r"|(BFloat16|Half) != float|float != (c10::)?(BFloat16|Half)",
    ),
    searched="message",
    worded_by_device=True,
    words="a gathered fp32 master weight{object} meeting bf16 activations",
    object_words=" ({})",
    unnamed="",
)
# Known failures: their public reference or the project's fix.
NO_SYNC_WITHOUT_FORWARD = ErrorClass(
    name="no-sync-post-backward-without-forward",
    signature=(r"'FSDPParam' object has no attribute '_unsharded_param'",),
    reference="verl issue #7520",
    words="FSDP's no-sync post-backward on a unit whose forward never ran",
    why="verl issue #7520: the weight was read outside lm_head's FSDP forward, so under no-sync accumulation "
    "FSDP2's post-backward finds the unit never unsharded; what avoids it: running the head through FSDP's "
    "forward (lm_head's own forward, as patches/fsdp2-lmhead-forward.diff does)",
)
GLM4V_POSITION_EMBEDDING = ErrorClass(
    name="glm4v-vision-position-embedding",
    signature=(r"aten\.grid_sampler_2d\.default got mixed torch\.Tensor and DTensor", r"glm4v"),
    reference="patches/glm4v-vision.diff",
    object="model.visual.embeddings.position_embedding.weight",
    words="GLM-4V's vision embeddings read the sharded position_embedding.weight outside its FSDP unit",
    why="a known defect outside the lm_head: transformers' Glm4vVisionEmbeddings reads "
    "position_embedding.weight without calling the embedding, which verl wraps in an FSDP unit of its own when "
    "untied; the project's fix: patches/glm4v-vision.diff (arm glm4v-vision; joined with a head fix: "
    "glm4v-vision+fsdp2-lmhead-forward-all)",
)
GLM4V_OUTPUT_UNPACKED = ErrorClass(
    name="glm4v-vision-output-unpacked",
    signature=(r"'BaseModelOutputWithPooling' object has no attribute 'shape'",),
    reference="patches/glm4v-vision.diff",
    words="GLM-4V's vision tower output used as a tensor (transformers 5.x returns BaseModelOutputWithPooling)",
    why="a known defect outside the lm_head: verl's glm4v.py _get_input_embeds uses the vision tower's output "
    "as a tensor, with or without FSDP; the project's fix: patches/glm4v-vision.diff (arm glm4v-vision)",
)
# An environment limit of this host, not a defect of the patch: named so that no one reads it as one.
PACKED_VL_NEEDS_FLASH_ATTN = ErrorClass(
    name="packed-vl-attention-needs-flash-attn",
    signature=(r"name '_flash_use_top_left_mask' is not defined",),
    reference="scenarios/engine-qwen2-5-vl-multigpu.yaml",
    words="verl's packed attention of qwen2_vl.py / glm4v.py calls flash-attn, which this host lacks",
    why="a known limit of this CPU host, not the patch's: verl's packed (use_remove_padding true) attention "
    "for Qwen2.5-VL and GLM-4V needs flash-attn; the harness runs those families padded "
    "(engine.use_remove_padding false, as engine-qwen2-5-vl-multigpu)",
)
PLACEMENTS_MISFIT_MESH = ErrorClass(
    name="placements-misfit-mesh",
    signature=(r"Sharding propagation failed for (aten\.\w+)",),
    words="a DTensor whose placements do not fit the mesh",
)
# With a frame of transformers' packed-sequence mask on the stack (judge_cell/diagnosis.py).
PACKED_POSITION_IDS = ErrorClass(
    name="packed-position-ids-layout",
    signature=(r"out of bounds",),
    searched="message",
    words="packed position ids that do not describe the packed sequence",
)
# Where the size times the world size is the lm_head's vocabulary (judge_cell/diagnosis.py).
SHARD_AS_WHOLE_WEIGHT = ErrorClass(
    name="shard-used-as-whole-weight",
    signature=(r"index (\d+) is out of bounds for dimension \d+ with size (\d+)",),
    searched="message",
    words="this rank's lm_head.weight shard used as the whole weight",
)
# Raised by the harness's own reader of the arm's results (rank/measures/parity.py ArmOutputUnreadable).
ARM_OUTPUT_UNREADABLE = ErrorClass(
    name="arm-output-unreadable",
    signature=(r"^ArmOutputUnreadable$",),
    searched="type",
    words="the arm's results cannot be read{object}",
    object_words=" ({})",
    unnamed=" (a parameter)",
)
# A frame of the harness's own package (not of an installed library, not of a patched verl copy), innermost or
# while the harness reads the arm's results (judge_cell/diagnosis.py).
HARNESS_SIDE = ErrorClass(
    name="harness-side",
    signature=(r"/harness/(?:rank|driver|spec|processes|commands)/", r"^(?!.*site-packages)"),
    searched="frame",
    words="raised in the harness's own code (a harness defect, or an arm's output it does not expect)",
)

# In the order diagnosis tries them.
ERROR_CLASSES = (
    DTENSOR_OUTSIDE_FORWARD,
    FP32_MASTER_MEETS_BF16,
    NO_SYNC_WITHOUT_FORWARD,
    GLM4V_POSITION_EMBEDDING,
    GLM4V_OUTPUT_UNPACKED,
    PACKED_VL_NEEDS_FLASH_ATTN,
    PLACEMENTS_MISFIT_MESH,
    PACKED_POSITION_IDS,
    SHARD_AS_WHOLE_WEIGHT,
    ARM_OUTPUT_UNREADABLE,
    HARNESS_SIDE,
)


def class_named(name: str | None) -> ErrorClass | None:
    """The table's entry of that name; None for none (an error of no class)."""
    return next((c for c in ERROR_CLASSES if c.name == name), None)


def device_worded_class(words: str) -> ErrorClass | None:
    """The class whose device-specific message these words are (worded_by_device), or None."""
    return next((c for c in ERROR_CLASSES if c.worded_by_device and c.found_in(words)), None)


def known_classes() -> tuple[ErrorClass, ...]:
    """The known failures: the classes with a public reference, in the table's order."""
    return tuple(c for c in ERROR_CLASSES if c.reference)
