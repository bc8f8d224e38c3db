"""Known failure signatures and their public references: the one table. An error whose text contains a signature
is that known failure: its class and the class's words are the entry's (judge/diagnosis.py _error_class), and its
why line (error_diagnosis) ends with the entry's `why`: the public reference, the cause and what avoids it. Data
only: a new entry goes here, not into the matching code."""

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
)


def known_failure(text: str) -> dict | None:
    """The known failure whose signature the error text contains, if any."""
    return next((k for k in KNOWN_FAILURES if k["signature"] in text), None)


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
