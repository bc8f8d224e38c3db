"""The model family a verl script trains, read from its model path (a Hugging Face name or a local directory named
after one), and the tiny model of models/ that stands for it. A family without a tiny model, or a path that names
none, is refused in one line naming the families there are: a verdict on another family than the script trains
would judge another file of verl (each family has its own fused forward: docs/SWEEP.md)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from harness.errors import UsageError
from harness.paths import model_config_path

# (family, its tiny model or None where models/ has none, a pattern of the lower-cased model name). In order: the
# first match wins, so each MoE comes before its dense family.
FAMILIES = (
    ("Qwen3-VL-MoE", "tiny-qwen3-vl-moe", r"qwen3[-_.]?vl.*(a\d+b|moe)"),
    ("Qwen3-VL", "tiny-qwen3-vl", r"qwen3[-_.]?vl"),
    ("Qwen3.5-MoE", None, r"qwen3[._-]5.*(a\d+b|moe)"),
    ("Qwen3.5", "tiny-qwen3-5", r"qwen3[._-]5"),
    ("Qwen2.5-VL", "tiny-qwen2-5-vl", r"qwen2[._-]5[-_.]?vl"),
    ("Qwen2-VL", None, r"qwen2[-_.]?vl"),
    ("GLM-4.1V", "tiny-glm4v", r"glm[-_.]?4(\.\d+)?[-_.]?v"),
    ("Qwen3-MoE", None, r"qwen3.*(a\d+b|moe)"),
    ("Qwen3 dense", "tiny-qwen3", r"qwen3"),
    ("Qwen2/Qwen2.5 dense", None, r"qwen2"),
    ("Llama dense", "tiny-llama", r"llama"),
)


def families_with_tiny() -> str:
    return ", ".join(f"{family} ({tiny})" for family, tiny, _ in FAMILIES if tiny)


def tiny_model_of(model_path) -> tuple[str, str]:
    """(the tiny model, the family's name) for the script's actor_rollout_ref.model.path; UsageError otherwise."""
    if model_path is None:
        raise UsageError(
            "the script does not set actor_rollout_ref.model.path, so its model family is unknown; the families "
            f"with a tiny model: {families_with_tiny()} (choose one with --model)"
        )
    # The directory's own name first (Qwen3-VL-8B-Instruct), then the whole path (/ckpt/Qwen3-VL-8B/hf).
    for name in (PurePosixPath(str(model_path).rstrip("/")).name.lower(), str(model_path).lower()):
        for family, tiny, pattern in FAMILIES:
            if not re.search(pattern, name):
                continue
            if tiny is None:
                raise UsageError(
                    f"actor_rollout_ref.model.path={model_path}: a {family} model, and models/ has no tiny model of "
                    f"that family; the families with one: {families_with_tiny()}"
                )
            return tiny, family
    raise UsageError(
        f"actor_rollout_ref.model.path={model_path}: no known model family in its name; the families with a tiny "
        f"model: {families_with_tiny()} (choose one with --model)"
    )


def chosen_model(name: str) -> str:
    """--model: a tiny model of models/ by name; UsageError naming the ones there are."""
    if not model_config_path(name).is_file():
        raise UsageError(
            f"--model {name}: no models/{name}.json; the families with a tiny model: {families_with_tiny()}"
        )
    return name
