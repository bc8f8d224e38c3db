"""Each finding's package as `harness upstream` writes it, without running it (harness/upstream/packages.py): a
pytest file in verl's CPU-test style that imports torch, transformers and verl only (plus pytest and the standard
library), every placeholder filled; fix.diff is the finding's fix without its description, and applies to the
installed verl."""

from __future__ import annotations

import ast
import json
import sys

import pytest

from harness.inputs.findings import load_findings
from harness.paths import ROOT

pytestmark = pytest.mark.unit

FINDINGS = {f.name: f for f in load_findings()}


def _imported_roots(text: str) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("name", list(FINDINGS))
def test_each_packages_test_imports_torch_transformers_and_verl_only(name):
    from harness.upstream.packages import render_test

    text = render_test(FINDINGS[name])
    assert "{{" not in text
    roots = _imported_roots(text)
    allowed = {"torch", "transformers", "verl", "pytest"} | set(sys.stdlib_module_names)
    assert roots <= allowed, roots - allowed
    assert "verl" in roots and "pytest" in roots
    tests = [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    assert tests, "a test file without a test"


def test_the_qwen3_5_tests_build_one_linear_attention_layer_of_the_tiny_model_with_bounds_above_their_floor():
    from harness.inputs.tolerances import QWEN3_5_LAYER_TEST_TOLERANCES as TOL
    from harness.upstream.packages import render_test

    values = {}
    for name in ("qwen3-5-packed-rows", "pr-7471-missing-conv-kernel"):
        tree = ast.parse(render_test(FINDINGS[name]))
        values[name] = {
            n.targets[0].id: ast.literal_eval(n.value)
            for n in tree.body
            if isinstance(n, ast.Assign) and n.targets[0].id in ("TINY_QWEN3_5_TEXT_CONFIG", "TOLERANCES", "LENGTHS")
        }
    config = json.loads((ROOT / "models" / "tiny-qwen3-5.json").read_text())["text_config"]
    config.update(num_hidden_layers=1, layer_types=["linear_attention"])
    for got in values.values():
        assert got["TINY_QWEN3_5_TEXT_CONFIG"] == config
        assert got["TOLERANCES"] == {k: v for k, v in TOL.items() if k != "noise_floor"}
    assert all(TOL[k] > floor for k, floor in TOL["noise_floor"].items())
    assert values["qwen3-5-packed-rows"]["LENGTHS"] == (7, 9)  # two samples share a row: the defect can show
    assert values["pr-7471-missing-conv-kernel"]["LENGTHS"] == (9,)  # one: passes wherever verl runs at all


def test_write_package_writes_the_test_and_the_fix_without_its_description_checked(tmp_path):
    from harness.upstream.packages import diff_body, render_test, write_package

    finding = FINDINGS["qwen3-5-packed-rows"]
    written = write_package(finding, tmp_path / finding.name)
    assert written["test"].read_text() == render_test(finding)
    fix = (ROOT / finding.fix).read_text()
    assert (tmp_path / finding.name / "fix.diff").read_text() == diff_body(fix) and fix.endswith(diff_body(fix))
    assert written["fix_check"].startswith("`git apply --check` passes on installed verl")
    assert "verl/models/transformers/qwen3_5.py" in written["fix_check"]


def test_a_pull_requests_package_has_no_fix(tmp_path):
    from harness.upstream.packages import write_package

    finding = FINDINGS["pr-7370-dense-response-mask"]
    where = tmp_path / finding.name
    where.mkdir()
    (where / "fix.diff").write_text("stale")  # from an earlier run: not this package's
    written = write_package(finding, where)
    assert written["fix_check"] is None and not (where / "fix.diff").exists()
    assert sorted(p.name for p in where.iterdir()) == [finding.test.file]
