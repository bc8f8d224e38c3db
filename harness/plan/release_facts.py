"""Two facts of a verl release, read from its source text (never imported): whether an untied lm_head gets an FSDP
unit of its own, and how Qwen3-VL's fused torch forward reads lm_head.weight. Together they say why a release is
hit: a weight read outside its own unit's forward is a sharded DTensor there (the crash); read as a full tensor,
its gradient is the one rank's (the silent error of #6659)."""

from __future__ import annotations

import re
from pathlib import Path


def _code_lines(text: str):
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if code.strip() and not code.lstrip().startswith(('"""', "'''")):
            yield number, code


def lm_head_unit(verl_dir: Path) -> dict:
    """verl/utils/fsdp_utils.py names lm_head among the modules it wraps (0.7.1 on), or it does not: lm_head's
    parameters then belong to the root unit, gathered for the whole forward."""
    path = Path(verl_dir) / "utils" / "fsdp_utils.py"
    for number, code in _code_lines(path.read_text()):
        if re.search(r"""["']lm_head["']""", code):
            return {"value": "own unit (untied)", "where": f"utils/fsdp_utils.py:{number}"}
    return {"value": "root unit", "where": "utils/fsdp_utils.py (no lm_head)"}


def weight_read(verl_dir: Path) -> dict:
    """How forward_with_torch_backend of verl/models/transformers/qwen3_vl.py reads lm_head.weight."""
    path = Path(verl_dir) / "models" / "transformers" / "qwen3_vl.py"
    text = path.read_text() if path.is_file() else ""
    start = text.find("def forward_with_torch_backend(")
    if start < 0:
        return {"value": "no fused torch path", "where": "models/transformers/qwen3_vl.py"}
    end = text.find("\ndef ", start + 1)
    body = text[start : end if end > 0 else len(text)]
    first_line = text[:start].count("\n") + 1
    for offset, code in _code_lines(body):
        if ".full_tensor()" in code:
            return {"value": "full_tensor()", "where": f"models/transformers/qwen3_vl.py:{first_line + offset - 1}"}
    for offset, code in _code_lines(body):
        if "lm_head.weight" in code:
            return {
                "value": "as is (self.lm_head.weight)",
                "where": f"models/transformers/qwen3_vl.py:{first_line + offset - 1}",
            }
    return {"value": "does not read lm_head.weight", "where": "models/transformers/qwen3_vl.py"}


def release_facts(verl_dir: Path) -> dict:
    return {"lm_head_unit": lm_head_unit(verl_dir), "lm_head_weight_read": weight_read(verl_dir)}
