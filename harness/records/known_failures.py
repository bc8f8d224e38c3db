"""Known failures and known defects: an error whose text shows a known failure's signature is that known failure
(records/error_classes.py, the one table of error classes: its class, signature, public reference, words and why);
judge_cell/diagnosis.py names its class and ends its why line with the entry's `why`: the public reference, the cause
and what avoids it. Known defects that show as numbers off (KNOWN_MISMATCHES) join a mismatch's why
(judge_cell/verdict.py with_known_defect); known hazards among the warnings (KNOWN_WARNINGS) and the optional GPU
packages (OPTIONAL_GPU_PACKAGES) are named here. Data only: a new entry goes into a table, not into the matching
code."""

from __future__ import annotations

from harness.records import error_classes
from harness.records.error_classes import ErrorClass

# What judge_change/patch_verdict.py says of a recipe's failure that is upstream's own (an imported recipe has no
# expectation to name upstream's failure: the same failure beside it is upstream's own); the closing block names it.
RECIPE_AS_UPSTREAM = "upstream's own failure in this recipe (a recipe: no expectation names it)"

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
        # The code it describes: a tree without it (before verl #6660) cannot have this defect (bisect names it only
        # where the tree has it: commands/bisect.py).
        "code": ("verl/models/transformers/qwen3_5.py", "cu_seqlens"),
        "name": "the Qwen3.5 packed-samples defect (cu_seqlens handed to transformers' chunk rule)",
    },
)


def known_cause_in(why: str | None) -> dict | None:
    """The known defect or failure whose words a record's why carries: {"words": its words in the why, "name",
    "code": (the verl file, a text in it) the tree must hold for it to apply, or None where not known}."""
    if not why:
        return None
    for k in KNOWN_MISMATCHES:
        if k["why"] in why:
            return {"words": k["why"], "name": k["name"], "code": k.get("code")}
    for c in error_classes.known_classes():
        if c.why and c.why in why:
            return {"words": c.why, "name": c.reference or c.name, "code": c.code}
    return None


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


def known_failure(text: str) -> ErrorClass | None:
    """The known failure (records/error_classes.py) whose signature the error's text (messages and traceback) shows,
    if any."""
    return next((k for k in error_classes.known_classes() if k.found_in(text)), None)


# Warnings known to be hazards: a warning whose text contains `signature` is named by verify's verdict as that hazard
# (render/verify_closing.py warning_lines). `harmless` maps an arm to the evidence that the hazard cannot bite there:
# a test that shows it, named, never an assumption.
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
# importing one of them says what this host lacks, not what a patch does. judge_change/base_change.py classifies such a
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
