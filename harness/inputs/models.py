"""The model a scenario names: its config file in models/ with the scenario's model_overrides applied, read as
plain JSON (no transformers: the user's side reads a model's family without importing it). The rank builds the
model from the same fields (rank/oracle/model.py)."""

from __future__ import annotations

import json

from harness.paths import model_config_path


def merge_overrides(base: dict, overrides: dict) -> dict:
    """Nested update: {"text_config": {"num_hidden_layers": 1}} changes one field of the sub-config."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_overrides(merged[key], value)
        else:
            merged[key] = value
    return merged


def model_fields(name: str, overrides: dict | None = None) -> dict:
    """The config file's fields with the overrides applied, as the rank's AutoConfig is given them."""
    return merge_overrides(json.loads(model_config_path(name).read_text()), overrides or {})


def type_and_tie(name: str, overrides: dict | None = None) -> tuple[str, bool]:
    """(model_type, tied lm_head). Every file in models/ states tie_word_embeddings at its top level
    (tests/unit/commands/test_sweep_plan.py checks it, and that
    transformers reads the same family), so no library default is guessed here."""
    fields = model_fields(name, overrides)
    return fields["model_type"], bool(fields.get("tie_word_embeddings", False))
