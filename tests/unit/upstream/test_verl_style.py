"""The rules the generated tests follow so that verl's own pre-commit checks take them (harness/upstream/
verl_style.py), checked without verl's repository: the license header verl's check_license.py looks for, B905's
`strict=` on every zip, verl's line length, double-quoted literals as ruff format leaves them, the CPU lane's name
and a folder of verl's tests/ (test_verl_checks.py runs verl's own scripts where the repository is there)."""

from __future__ import annotations

import ast

import pytest

from harness.inputs.findings import load_findings
from harness.upstream.packages import render_test
from harness.upstream.verl_style import (
    COPYRIGHT_LINE,
    CPU_TEST_NAME,
    FORBIDDEN_SPELLINGS,
    LINE_LENGTH,
    comment_block,
    python_literal,
)

pytestmark = pytest.mark.unit

FINDINGS = load_findings()
# The copyright lines verl's special_sanity/check_license.py accepted at main of 2026-08-22 (the one we write
# among them; the others for the record of what "accepted" means).
VERL_ACCEPTS = (
    "Copyright 2024 Bytedance Ltd. and/or its affiliates",
    "Copyright 2025 Bytedance Ltd. and/or its affiliates",
    "Copyright 2026 Bytedance Ltd. and/or its affiliates",
    "Copyright 2025 Individual Contributor:",
)


@pytest.fixture(scope="module", params=[f.name for f in FINDINGS])
def rendered(request):
    finding = next(f for f in FINDINGS if f.name == request.param)
    return finding, render_test(finding)


def test_every_test_starts_with_verls_apache_header_holding_a_line_its_checker_accepts(rendered):
    _, text = rendered
    assert any(COPYRIGHT_LINE.startswith(accepted) for accepted in VERL_ACCEPTS)  # the checker matches a prefix
    head = text.splitlines()[:13]
    assert head[0] == f"# {COPYRIGHT_LINE}" and "Apache License, Version 2.0" in head[2]
    assert head[-1] == "# limitations under the License."


def test_every_zip_says_strict_and_every_line_fits_verls_length(rendered):
    _, text = rendered
    tree = ast.parse(text)
    zips = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "zip"]
    assert all(any(k.arg == "strict" for k in z.keywords) for z in zips)
    assert max(len(line) for line in text.splitlines()) <= LINE_LENGTH


def test_the_name_is_the_cpu_lanes_and_the_folder_one_of_verls_packages(rendered):
    finding, text = rendered
    assert CPU_TEST_NAME.fullmatch(finding.test.file)
    top = finding.test.dest.split("/")
    assert top[0] == "tests" and not top[1].startswith("special_")
    assert not FORBIDDEN_SPELLINGS.search(text)


def test_literals_are_double_quoted_and_dicts_keep_one_key_a_line():
    text = python_literal({"a": "b", "n": [1, 2], "t": (3,), "d": {}, "f": 1e-06, "x": True})
    assert "'" not in text and text.splitlines()[1] == '    "a": "b",'
    assert eval(text) == {"a": "b", "n": [1, 2], "t": (3,), "d": {}, "f": 1e-06, "x": True}


def test_a_comment_is_wrapped_within_the_line_length_counting_what_stands_before_it():
    prefix = "# Tolerances against the plain fp32 model. "
    lines = (prefix + comment_block("word " * 80, prefix)).splitlines()
    assert len(lines) > 1 and all(len(line) <= LINE_LENGTH and line.startswith("# ") for line in lines)
