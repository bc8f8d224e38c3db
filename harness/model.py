"""Build the tiny model a scenario names: a real transformers model from a config file in models/, seeded."""
from __future__ import annotations

import json
from pathlib import Path

import torch

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


def model_config_path(name: str) -> Path:
    return MODELS_DIR / f"{name}.json"


def load_config(name: str):
    from transformers import AutoConfig

    raw = json.loads(model_config_path(name).read_text())
    model_type = raw.pop("model_type")
    raw.pop("architectures", None)
    config = AutoConfig.for_model(model_type, **raw)
    # sdpa is what runs on CPU and on any CUDA device without flash-attn installed.
    config._attn_implementation = "sdpa"
    for sub in ("text_config", "vision_config"):
        if getattr(config, sub, None) is not None:
            getattr(config, sub)._attn_implementation = "sdpa"
    return config


def build_model(name: str, seed: int) -> torch.nn.Module:
    """Every rank builds the same weights from the same seed, so no broadcast is needed before sharding."""
    from transformers import AutoModelForImageTextToText

    config = load_config(name)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, torch_dtype=torch.float32)
    return model.float()


def vocab_size(config) -> int:
    text = getattr(config, "text_config", None) or config
    return text.vocab_size


def hidden_size(config) -> int:
    text = getattr(config, "text_config", None) or config
    return text.hidden_size
