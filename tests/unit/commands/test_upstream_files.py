"""The files `harness upstream` writes, without running them: the regression test is self-contained (torch,
transformers, verl, stdlib and pytest only) and carries the model config and tolerances of this project; fix.diff
is the candidate's diff; the reports take every number from the records they are given."""

from __future__ import annotations

import ast
import json
import sys

import pytest

from harness.paths import ROOT
from harness.records.results import Record

pytestmark = pytest.mark.unit


def test_generated_test_imports_nothing_of_the_harness():
    from harness.upstream.regression_test import render_test_file

    tree = ast.parse(render_test_file())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add(node.module.split(".")[0])
    allowed = {"torch", "transformers", "verl", "pytest"} | set(sys.stdlib_module_names)
    assert roots <= allowed, roots - allowed
    assert {"torch", "transformers", "verl", "pytest"} <= roots


def test_generated_test_carries_the_model_config_and_tolerances():
    from harness.inputs.tolerances import UPSTREAM_TEST_TOLERANCES
    from harness.upstream.regression_test import render_test_file

    namespace = {}
    tree = ast.parse(render_test_file())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id in ("TINY_QWEN3_VL_CONFIG", "TOLERANCES"):
            namespace[node.targets[0].id] = ast.literal_eval(node.value)
    config = json.loads((ROOT / "models" / "tiny-qwen3-vl.json").read_text())
    config.pop("architectures")
    assert namespace["TINY_QWEN3_VL_CONFIG"] == config
    assert not config["tie_word_embeddings"]
    assert namespace["TOLERANCES"] == {
        case: {k: v for k, v in tol.items() if k != "noise_floor"} for case, tol in UPSTREAM_TEST_TOLERANCES.items()
    }
    for tol in UPSTREAM_TEST_TOLERANCES.values():  # every bound above its measured floor
        assert all(tol[k] > floor for k, floor in tol["noise_floor"].items())


def test_diff_body_drops_the_description_only():
    from harness.commands.upstream import diff_body
    from harness.errors import UsageError

    text = (ROOT / "patches" / "fsdp2-lmhead-forward.diff").read_text()
    body = diff_body(text)
    assert body.startswith("--- a/verl/") and text.endswith(body)
    with pytest.raises(UsageError):
        diff_body("just words\n")


def test_report_cells_name_existing_scenarios():
    from harness.commands.upstream import REPORT_CELLS
    from harness.inputs.scenario import load_all

    names = {s.name for s in load_all()}
    assert {name for name, _ in REPORT_CELLS} <= names


def test_report_numbers_come_from_the_records():
    from harness.upstream.report import NOT_MEASURED, render_report

    record = {
        "scenario": "fsdp2-multigpu",
        "arm": "upstream",
        "world_size": 2,
        "outcome": "mismatch",
        "scenario_spec": {"precision": "fp32"},
        "error": None,
        "failures": ["grad lm_head.weight: 0.987"],
        "parity": {"grad_worst_param": "lm_head.weight", "grad_worst_rel": 0.987, "logprob_max_abs": 1e-7},
        "comm": {
            "all_gather": {"by_origin": {"fsdp": {"bytes": 10, "count": 1}, "other": {"bytes": 12345, "count": 1}}}
        },
    }
    text = render_report(
        records=[Record.model_validate(record)],
        runs=[],
        candidate="fsdp2-lmhead-forward",
        fix_check="ok.",
        releases_table="",
        results_path="r.jsonl",
        out_dir="out",
    )
    assert "0.987" in text and "12345" in text
    assert NOT_MEASURED in text  # no bf16 record, no generated runs, no release table: said, not invented
