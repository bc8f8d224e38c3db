"""The generated regression test: test_template.py.in with the tiny model's config and the tolerances filled in.

The template is a pytest file that imports only torch, transformers and verl (see its docstring); it is kept as
a template rather than a module of ours so that nothing of the harness can leak into what verl would run.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.inputs.tolerances import UPSTREAM_TEST_TOLERANCES
from harness.paths import ROOT, model_config_path
from harness.upstream.verl_style import comment_block, python_literal, with_license

TEMPLATE = Path(__file__).with_name("test_template.py.in")
# verl runs tests/**/*_on_cpu.py in its CPU lane.
TEST_FILE_NAME = "test_fsdp2_untied_lm_head_fused_on_cpu.py"
MODEL = "tiny-qwen3-vl"


def render_test_file() -> str:
    config = json.loads(model_config_path(MODEL).read_text())
    config.pop("architectures", None)  # the test sets it when it saves the model
    tolerances = {
        case: {k: v for k, v in tol.items() if k != "noise_floor"} for case, tol in UPSTREAM_TEST_TOLERANCES.items()
    }
    floors = "; ".join(f"{case}: {tol['noise_floor']}" for case, tol in UPSTREAM_TEST_TOLERANCES.items())
    text = TEMPLATE.read_text()
    for key, value in {
        "{{SOURCE}}": str(model_config_path(MODEL).relative_to(ROOT)),
        "{{CONFIG}}": python_literal(config),
        "{{TOLERANCES}}": python_literal(tolerances),
        "{{TOLERANCE_NOTE}}": comment_block(
            f"Each bound sits above the largest error a correct fix showed (its noise floor, {floors}) and far "
            "below what the defects give (an unreduced lm_head gradient: relative error ~1).",
            "# Tolerances against the plain fp32 model. ",
        ),
    }.items():
        if key not in text:
            raise RuntimeError(f"{TEMPLATE}: placeholder {key} missing")
        text = text.replace(key, value)
    return with_license(text)
