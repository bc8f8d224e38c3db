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
    return lm_head_unit_in((Path(verl_dir) / "utils" / "fsdp_utils.py").read_text())


def lm_head_unit_in(text: str) -> dict:
    """lm_head_unit of fsdp_utils.py's text (a patched one: plan/families.py)."""
    for number, code in _code_lines(text):
        if re.search(r"""["']lm_head["']""", code):
            return {"value": "own unit (untied)", "where": f"utils/fsdp_utils.py:{number}"}
    return {"value": "root unit", "where": "utils/fsdp_utils.py (no lm_head)"}


def weight_read(verl_dir: Path) -> dict:
    """How forward_with_torch_backend of verl/models/transformers/qwen3_vl.py reads lm_head.weight."""
    path = Path(verl_dir) / "models" / "transformers" / "qwen3_vl.py"
    return lm_head_read(path.read_text() if path.is_file() else "", "models/transformers/qwen3_vl.py")


def lm_head_read(text: str, where: str) -> dict:
    """How the forward_with_torch_backend in a family file's text (where: its path under verl/) reads
    lm_head.weight: through full_tensor(), as is, or not at all (the fused head runs through lm_head itself)."""
    start = text.find("def forward_with_torch_backend(")
    if start < 0:
        return {"value": "no fused torch path", "where": where}
    end = text.find("\ndef ", start + 1)
    body = text[start : end if end > 0 else len(text)]
    first_line = text[:start].count("\n") + 1
    for offset, code in _code_lines(body):
        if ".full_tensor()" in code:
            return {"value": "full_tensor()", "where": f"{where}:{first_line + offset - 1}"}
    for offset, code in _code_lines(body):  # a gather with its own gradient placements: not #6659's call
        if ".full_tensor(" in code:
            return {"value": "full_tensor(...) with arguments", "where": f"{where}:{first_line + offset - 1}"}
    for offset, code in _code_lines(body):
        if "lm_head.weight" in code:
            return {"value": "as is (self.lm_head.weight)", "where": f"{where}:{first_line + offset - 1}"}
    return {"value": "does not read lm_head.weight", "where": where}


def release_facts(verl_dir: Path) -> dict:
    return {"lm_head_unit": lm_head_unit(verl_dir), "lm_head_weight_read": weight_read(verl_dir)}
