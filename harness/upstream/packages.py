"""One package per finding (inputs/findings.py): its pytest file filled from its template, its fix as a diff checked
with `git apply --check` on a copy of the installed verl. The report is written once the test has been proven on
its refs (upstream/prove.py, upstream/finding_report.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

from harness.errors import UsageError
from harness.inputs.findings import TEMPLATES_DIR, Finding
from harness.inputs.tolerances import QWEN3_5_LAYER_TEST_TOLERANCES
from harness.paths import ROOT, model_config_path, shown_path
from harness.plan.arms import installed_verl_dir
from harness.plan.diffs import ENCODING, read_patch
from harness.upstream.verl_style import comment_block, python_literal, with_license

FIX_FILE = "fix.diff"


def diff_body(text: str) -> str:
    """The diff without the description our patch files carry above the first `--- ` line."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("--- ")), None)
    if start is None:
        raise UsageError("no '--- ' line: not a unified diff")
    return "".join(lines[start:])


def git_apply_check(diff: Path) -> str:
    """`git apply --check` inside a copy of the installed verl's parent directory (verl/ and nothing else), as a
    maintainer applies it at the top of a verl checkout. Returns a one-line summary; raises UsageError if it fails."""
    git = shutil.which("git")
    if git is None:
        raise UsageError(f"{shown_path(diff)}: cannot check it: no git on PATH")
    with tempfile.TemporaryDirectory(prefix="harness-upstream-apply-") as tmp:
        shutil.copytree(installed_verl_dir(), Path(tmp) / "verl", ignore=shutil.ignore_patterns("__pycache__"))
        done = subprocess.run(
            [git, "apply", "--check", "-v", str(diff.resolve())], cwd=tmp, capture_output=True, text=True
        )
    if done.returncode != 0:
        raise UsageError(
            f"{shown_path(diff)}: git apply --check fails on installed verl: "
            f"{(done.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    files = sorted(set(re.findall(r"^Checking patch (\S+)\.\.\.", done.stderr, re.M)))
    return f"`git apply --check` passes on installed verl ({', '.join(files)})."


def _qwen3_5_layer_fill() -> dict[str, str]:
    """The tiny Qwen3.5's text config with one linear-attention layer (all the test builds), and its bounds."""
    config = json.loads(model_config_path("tiny-qwen3-5").read_text())["text_config"]
    config.update(num_hidden_layers=1, layer_types=["linear_attention"])
    tol = QWEN3_5_LAYER_TEST_TOLERANCES
    return {
        "SOURCE": str(model_config_path("tiny-qwen3-5").relative_to(ROOT)),
        "CONFIG": python_literal(config),
        "TOLERANCES": python_literal({k: v for k, v in tol.items() if k != "noise_floor"}),
        "TOLERANCE_NOTE": comment_block(
            f"Above a correct forward's floor ({tol['noise_floor']}), far below a sample that inherits its "
            "predecessor's state (outputs ~5e-4, gradients 3e-4 to 1e-2 off).",
            "# Against transformers' own forward on each sample alone, fp32. ",
        ),
    }


def render_test(finding: Finding) -> str:
    """The finding's pytest file: verl's license header, then its template with every placeholder filled (the
    computed ones, then the finding's own `fill`, prose re-wrapped to the file's width): verl_style.py's rules."""
    if finding.test.template == "test_template.py.in":  # #6659's test: its own renderer, as before
        from harness.upstream.regression_test import render_test_file

        return render_test_file()
    text = (TEMPLATES_DIR / finding.test.template).read_text()
    fill = _qwen3_5_layer_fill() if "{{CONFIG}}" in text else {}
    for key, value in finding.test.fill.items():
        fill[key] = textwrap.fill(value, 116) if len(value) > 60 else value
    for key, value in fill.items():
        text = text.replace("{{" + key + "}}", value)
    left = sorted(set(re.findall(r"\{\{(\w+)\}\}", text)))
    if left:
        raise UsageError(
            f"{finding.test.template}: placeholder {{{{{left[0]}}}}} has no value (finding {finding.name})"
        )
    return with_license(text)


def write_package(finding: Finding, where: Path) -> dict:
    """The test and fix.diff (checked) into WHERE (`harness upstream`: OUT/<name>/); returns {"dir", "test",
    "fix_check"}."""
    where.mkdir(parents=True, exist_ok=True)
    test = where / finding.test.file
    test.write_text(render_test(finding))
    fix_check = None
    (where / FIX_FILE).unlink(missing_ok=True)
    if finding.fix:
        fix = where / FIX_FILE
        fix.write_bytes(diff_body(read_patch(ROOT / finding.fix).decode(*ENCODING)).encode(*ENCODING))
        fix_check = git_apply_check(fix)
    return {"dir": where, "test": test, "fix_check": fix_check}
