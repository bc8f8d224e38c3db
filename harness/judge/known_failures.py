"""Known failure signatures and their public references: the one table. An error whose text contains a signature
(every part of one given as a tuple) is that known failure: its class and the class's words are the entry's
(judge/diagnosis.py _error_class), and its why line (error_diagnosis) ends with the entry's `why`: the public
reference, the cause and what avoids it. Known defects that show as numbers off (KNOWN_MISMATCHES) join a
mismatch's why (judge/verdict.py with_known_defect). Data only: a new entry goes here, not into the matching code."""

from __future__ import annotations

KNOWN_FAILURES = (
    {
        "class": "no-sync-post-backward-without-forward",
        "signature": "'FSDPParam' object has no attribute '_unsharded_param'",
        "reference": "verl issue #7520",
        # the class in words, where no other class of judge/diagnosis.py matched the error first
        "class_words": "FSDP's no-sync post-backward on a unit whose forward never ran",
        "why": "verl issue #7520: the weight was read outside lm_head's FSDP forward, so under no-sync accumulation "
        "FSDP2's post-backward finds the unit never unsharded; what avoids it: running the head through FSDP's "
        "forward (lm_head's own forward, as patches/fsdp2-lmhead-forward.diff does)",
    },
    {
        "class": "glm4v-vision-position-embedding",
        "signature": ("aten.grid_sampler_2d.default got mixed torch.Tensor and DTensor", "glm4v"),  # every part
        "reference": "patches/glm4v-vision.diff",
        "object": "model.visual.embeddings.position_embedding.weight",
        "class_words": "GLM-4V's vision embeddings read the sharded position_embedding.weight outside its FSDP unit",
        "why": "a known defect outside the lm_head: transformers' Glm4vVisionEmbeddings reads "
        "position_embedding.weight without calling the embedding, which verl wraps in an FSDP unit of its own when "
        "untied; the project's fix: patches/glm4v-vision.diff (arm glm4v-vision; joined with a head fix: "
        "glm4v-vision+fsdp2-lmhead-forward-all)",
    },
    {
        "class": "glm4v-vision-output-unpacked",
        "signature": "'BaseModelOutputWithPooling' object has no attribute 'shape'",
        "reference": "patches/glm4v-vision.diff",
        "class_words": "GLM-4V's vision tower output used as a tensor (transformers 5.x returns "
        "BaseModelOutputWithPooling)",
        "why": "a known defect outside the lm_head: verl's glm4v.py _get_input_embeds uses the vision tower's output "
        "as a tensor, with or without FSDP; the project's fix: patches/glm4v-vision.diff (arm glm4v-vision)",
    },
)

# An environment limit of this host, not a defect of the patch: named so that no one reads it as one.
KNOWN_FAILURES += (
    {
        "class": "packed-vl-attention-needs-flash-attn",
        "signature": "name '_flash_use_top_left_mask' is not defined",
        "reference": "scenarios/engine-qwen2-5-vl-multigpu.yaml",
        "class_words": "verl's packed attention of qwen2_vl.py / glm4v.py calls flash-attn, which this host lacks",
        "why": "a known limit of this CPU host, not the patch's: verl's packed (use_remove_padding true) attention "
        "for Qwen2.5-VL and GLM-4V needs flash-attn; the harness runs those families padded "
        "(engine.use_remove_padding false, as engine-qwen2-5-vl-multigpu)",
    },
)

# Known defects that show as numbers off, not as an error: a mismatch of a model type (inputs/models.py
# type_and_tie) on packed rows whose failing names hold `subject` is that defect; its words join the record's why.
KNOWN_MISMATCHES = (
    {
        "class": "qwen3_5-packed-linear-attention",
        "model_types": ("qwen3_5", "qwen3_5_moe"),
        "packed": True,
        "subject": "linear_attn.",
        "why": "known: the Qwen3.5 packed-samples defect of verl's qwen3_5.py, not the lm_head's: it hands the row's "
        "cu_seqlens to transformers' torch_chunk_gated_delta_rule, which ignores them, so a row's samples run the "
        "gated delta rule as one sequence (every arm; docs/FINDINGS.md, engine-qwen3-5-packed-samples; fixture "
        "tests/fixtures/family_fixes/qwen3-5-packed-linear-attn.diff)",
    },
)


def known_mismatch(model_type: str, packed: bool, failing_text: str) -> dict | None:
    """The known defect a mismatch is (its model type, packed rows, a failing name with its subject), if any."""
    return next(
        (
            k
            for k in KNOWN_MISMATCHES
            if model_type in k["model_types"] and packed == k["packed"] and k["subject"] in failing_text
        ),
        None,
    )


def known_failure(text: str) -> dict | None:
    """The known failure whose signature the error text contains, if any."""

    def matches(signature) -> bool:
        return all(part in text for part in ((signature,) if isinstance(signature, str) else signature))

    return next((k for k in KNOWN_FAILURES if matches(k["signature"])), None)


# Warnings known to be hazards: a warning whose text contains `signature` is named by verify's verdict as that hazard
# (commands/run.py warning_lines). `harmless` maps an arm to the evidence that the hazard cannot bite there: a test
# that shows it, named, never an assumption.
KNOWN_WARNINGS = (
    {
        "signature": "returned a view tensor",
        "hazard": "FSDP2: an in-place op on a view that a wrapped module returned silently drops its pre-backward "
        "hook, the all-gather before that module's backward",
        "harmless": {
            "fsdp2-lmhead-forward": "not silent here: autograd refuses any in-place op on the fused head's outputs "
            "(tests/distributed/test_fused_head_view_hook.py)",
        },
    },
)


def known_warning(text: str) -> dict | None:
    """The known hazard whose signature the warning's text contains, if any."""
    return next((k for k in KNOWN_WARNINGS if k["signature"] in text), None)


# Packages verl imports only where a GPU stack is installed (kernels, inference engines): a run that stops on
# importing one of them says what this host lacks, not what a patch does. judge/base_change.py classifies such a
# cell "not judged here: cannot run here: <package>", in the patch's arm as in its base's.
OPTIONAL_GPU_PACKAGES = (
    "flash_attn",
    "flash_attn_interface",
    "liger_kernel",
    "fla",
    "causal_conv1d",
    "mamba_ssm",
    "triton",
    "apex",
    "transformer_engine",
    "flashinfer",
    "deep_gemm",
    "vllm",
    "sglang",
    "megatron",
    "cupy",
    "pynvml",
    "torch_npu",
)
