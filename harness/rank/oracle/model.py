"""Build the tiny model a scenario names: a real transformers model from a config file in models/, seeded."""

from __future__ import annotations

import torch

from harness.inputs.models import model_fields


def load_config(name: str, overrides: dict | None = None):
    from transformers import AutoConfig

    from harness.rank.oracle.transformers_compat import config_fields, transformers_major

    raw = model_fields(name, overrides)
    # The configs are written for transformers 5; under 4.x their RoPE fields are renamed (adapter rope-parameters).
    raw = config_fields(raw, transformers_major())
    model_type = raw.pop("model_type")
    raw.pop("architectures", None)
    config = AutoConfig.for_model(model_type, **raw)
    # sdpa is what runs on CPU and on any CUDA device without flash-attn installed.
    config._attn_implementation = "sdpa"
    for sub in ("text_config", "vision_config"):
        if getattr(config, sub, None) is not None:
            getattr(config, sub)._attn_implementation = "sdpa"
    return config


def model_auto_class(config):
    """Text-only families (no vision_config) build as causal LMs, the others as image-text-to-text models."""
    import transformers

    if getattr(config, "vision_config", None) is None:
        return transformers.AutoModelForCausalLM
    return transformers.AutoModelForImageTextToText


def build_model(name: str, seed: int, overrides: dict | None = None) -> torch.nn.Module:
    """Every rank builds the same weights from the same seed, so no broadcast is needed before sharding."""
    config = load_config(name, overrides)
    torch.manual_seed(seed)
    model = model_auto_class(config).from_config(config, torch_dtype=torch.float32)
    return model.float()


def vocab_size(config) -> int:
    text = getattr(config, "text_config", None) or config
    return text.vocab_size


def hidden_size(config) -> int:
    text = getattr(config, "text_config", None) or config
    return text.hidden_size
