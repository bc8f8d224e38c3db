"""The model families, in one table keyed by model_type (FAMILIES), and the family a verl script trains, read from
its model path (a Hugging Face name or a local directory named after one), with the tiny model of models/ that
stands for it. A family without a tiny model, or a path that names none, is refused in one line naming the
families there are: a verdict on another family than the script trains would judge another file of verl (each
family has its own fused forward: docs/SWEEP.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from harness.errors import UsageError
from harness.paths import model_config_path


@dataclass(frozen=True)
class Family:
    """One model family, the one table every part of the harness reads: its name as a user says it, the
    transformers model_types it covers, its tiny model in models/ (None: models/ has none), the pattern of a
    lower-cased checkpoint name that means it (import), and the verl file of its fused forward (verl 0.9.1's
    models/transformers/monkey_patch.py branches on model_type: a type it does not name runs dense_common.py)."""

    name: str
    model_types: tuple[str, ...]
    tiny: str | None
    pattern: str
    fused_file: str


DENSE_FILE = "dense_common.py"

# In order: the first pattern that matches wins, so each MoE comes before its dense family.
FAMILIES = (
    Family("Qwen3-VL-MoE", ("qwen3_vl_moe",), "tiny-qwen3-vl-moe", r"qwen3[-_.]?vl.*(a\d+b|moe)", "qwen3_vl.py"),
    Family("Qwen3-VL", ("qwen3_vl",), "tiny-qwen3-vl", r"qwen3[-_.]?vl", "qwen3_vl.py"),
    Family("Qwen3.5-MoE", ("qwen3_5_moe",), None, r"qwen3[._-]5.*(a\d+b|moe)", "qwen3_5.py"),
    Family("Qwen3.5", ("qwen3_5",), "tiny-qwen3-5", r"qwen3[._-]5", "qwen3_5.py"),
    Family("Qwen2.5-VL", ("qwen2_5_vl",), "tiny-qwen2-5-vl", r"qwen2[._-]5[-_.]?vl", "qwen2_vl.py"),
    Family("Qwen2-VL", ("qwen2_vl",), None, r"qwen2[-_.]?vl", "qwen2_vl.py"),
    Family("GLM-4.1V", ("glm4v",), "tiny-glm4v", r"glm[-_.]?4(\.\d+)?[-_.]?v", "glm4v.py"),
    Family("Qwen3-MoE", ("qwen3_moe",), None, r"qwen3.*(a\d+b|moe)", DENSE_FILE),
    Family("Qwen3 dense", ("qwen3",), "tiny-qwen3", r"qwen3", DENSE_FILE),
    Family("Qwen2/Qwen2.5 dense", ("qwen2",), None, r"qwen2", DENSE_FILE),
    Family("Llama dense", ("llama",), "tiny-llama", r"llama", DENSE_FILE),
)


def fused_file(model_type: str) -> str:
    """The verl file whose forward_with_torch_backend a model of this type runs (dense_common.py for any other)."""
    return next((f.fused_file for f in FAMILIES if model_type in f.model_types), DENSE_FILE)


def families_with_tiny() -> str:
    return ", ".join(f"{f.name} ({f.tiny})" for f in FAMILIES if f.tiny)


def tiny_model_of(model_path) -> tuple[str, str]:
    """(the tiny model, the family's name) for the script's actor_rollout_ref.model.path; UsageError otherwise."""
    if model_path is None:
        raise UsageError(
            "the script does not set actor_rollout_ref.model.path, so its model family is unknown; the families "
            f"with a tiny model: {families_with_tiny()} (choose one with --model)"
        )
    # The directory's own name first (Qwen3-VL-8B-Instruct), then the whole path (/ckpt/Qwen3-VL-8B/hf).
    for name in (PurePosixPath(str(model_path).rstrip("/")).name.lower(), str(model_path).lower()):
        for family in FAMILIES:
            if not re.search(family.pattern, name):
                continue
            if family.tiny is None:
                raise UsageError(
                    f"actor_rollout_ref.model.path={model_path}: a {family.name} model, and models/ has no tiny model "
                    f"of that family; the families with one: {families_with_tiny()}"
                )
            return family.tiny, family.name
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
