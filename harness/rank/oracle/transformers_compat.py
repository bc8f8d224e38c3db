"""Adapters for transformers 4.x, which the verl releases written for it (0.6.0 to 0.7.1, scenarios/releases.yaml)
run on: transformers 4.57, the last 4.x, has Qwen3-VL. The harness is written for transformers 5. Each adapter is
named, keyed on the installed transformers' major version, and under transformers 5 gives back exactly what the
harness did without it (tests/unit/rank/oracle/test_transformers_compat.py). None touches transformers' or verl's code.

  rope-parameters   transformers 5 reads a config's RoPE from one `rope_parameters` mapping (rope_theta inside it);
                    4.x reads `rope_theta` and `partial_rotary_factor` from the config itself and the rest
                    (rope_type, mrope_section, mrope_interleaved) from `rope_scaling`: Qwen3-VL's text rotary
                    embedding in 4.57 calls `config.rope_scaling.get("mrope_section")` and fails on None.
  rope-index-ids    transformers 5's `get_rope_index` takes `mm_token_type_ids` (text 0, image 1, video 2), a required
                    argument; 4.x's finds an image by its token ids (the vision start token, then the image token)
                    and takes no such argument.

What does not differ, so needs no adapter: 4.57's vision tower returns a tuple (embeddings, deepstack features),
5.x's one ModelOutput, but only verl's forward reads it (and the releases on 4.57 were written for the tuple); the
harness calls the model as a whole, whose forward takes the same arguments and returns `.logits` in both.
"""

from __future__ import annotations

ROPE_PARAMETERS, ROPE_INDEX_IDS = "rope-parameters", "rope-index-ids"
# Keys of transformers 5's rope_parameters that transformers 4 reads from the config itself, not rope_scaling.
_TOP_LEVEL_ROPE_KEYS = ("rope_theta", "partial_rotary_factor")


def transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def config_fields(raw: dict, major: int) -> dict:
    """rope-parameters: a model config's fields (as in models/*.json) in the installed transformers' terms, its
    sub-configs included. Under transformers 5 `raw` itself, unchanged."""
    if major >= 5:
        return raw
    fields = {}
    for key, value in raw.items():
        if key == "rope_parameters" and isinstance(value, dict):
            rope = dict(value)
            fields.update({k: rope.pop(k) for k in _TOP_LEVEL_ROPE_KEYS if k in rope})
            fields["rope_scaling"] = rope
        elif isinstance(value, dict):
            fields[key] = config_fields(value, major)
        else:
            fields[key] = value
    return fields


def rope_index_kwargs(mm_token_type_ids, major: int) -> dict:
    """rope-index-ids: the keyword arguments of `get_rope_index` beyond ids, grid and mask: transformers 5's
    token types, nothing for 4.x (which reads the image's place from the token ids the batch already holds)."""
    return {"mm_token_type_ids": mm_token_type_ids} if major >= 5 else {}


def adapters_in_use(major: int) -> list[str]:
    return [] if major >= 5 else [ROPE_PARAMETERS, ROPE_INDEX_IDS]
