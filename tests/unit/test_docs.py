"""The docs checked against the code: docs/SCENARIOS.md's field table against the scenario model
(harness/inputs/scenario.py), its tolerance table against harness/inputs/tolerances.py, every path a tracked text file
names (docs, code, tests, scenarios, tools), every relative link of the docs, against the tree, and docs/MODULES.md
against the docstrings it is generated from (tools/modules.py)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import typing
from pathlib import Path

import pytest

from harness.inputs.scenario import (
    BatchSettings,
    EngineSettings,
    LossSettings,
    OptimizerSettings,
    RefSettings,
    Scenario,
)
from harness.inputs.tolerances import TOLERANCES, UPDATE_TOLERANCES
from harness.paths import ROOT

SCENARIOS_DOC = ROOT / "docs" / "SCENARIOS.md"
# Fields the table leaves to the prose: the name is the file's.
NOT_IN_TABLE = {"name"}
SUB_MODELS = {
    "batch": BatchSettings,
    "loss": LossSettings,
    "engine": EngineSettings,
    "optim": OptimizerSettings,
    "ref": RefSettings,
}


def _section(doc: str, title: str) -> str:
    return doc.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _rows(section: str) -> list[list[str]]:
    """The table rows of a section, header and rule left out, as lists of cells."""
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


@pytest.fixture(scope="module")
def field_rows() -> dict[str, str]:
    """field name -> the text of the row that documents it (a row may name several fields)."""
    rows = {}
    for first, meaning in _rows(_section(SCENARIOS_DOC.read_text(), "Scenarios")):
        for name in re.findall(r"`([a-z_]+)`", first):
            rows[name] = meaning
    return rows


def test_every_scenario_field_has_a_row_and_every_row_a_field(field_rows):
    assert set(field_rows) == set(Scenario.model_fields) - NOT_IN_TABLE


@pytest.mark.parametrize("field", sorted(SUB_MODELS))
def test_a_nested_fields_row_names_each_of_its_fields(field, field_rows):
    named = set(re.findall(r"`([a-z_]+)`", field_rows[field]))
    assert set(SUB_MODELS[field].model_fields) <= named, set(SUB_MODELS[field].model_fields) - named


def test_every_value_a_choice_field_allows_is_in_its_row(field_rows):
    for name, info in Scenario.model_fields.items():
        if typing.get_origin(info.annotation) is typing.Literal:
            for value in typing.get_args(info.annotation):
                assert f"`{value}`" in field_rows[name], (name, value)


def test_the_tolerance_table_is_tolerances_py():
    rows = _rows(_section(SCENARIOS_DOC.read_text(), "Tolerances"))
    table = {}
    for precision, reference, logprob, entropy, grad, floor in rows:
        table[precision, reference] = (
            [float(logprob), float(entropy), float(grad)],
            [float(x) for x in floor.split(",")],
        )
    assert set(table) == set(TOLERANCES)
    for key, tol in TOLERANCES.items():
        bounds, floor = table[key]
        assert bounds == [tol.logprob_abs, tol.entropy_abs, tol.grad_rel], key
        assert floor == [tol.noise_floor[k] for k in ("logprob_abs", "entropy_abs", "grad_rel")], key


def test_the_update_tolerance_table_is_tolerances_py():
    rows = _rows(_section(SCENARIOS_DOC.read_text(), "Tolerances of the training update"))
    measures = ("update_rel", "param_rel", "metric_rel", "metric_abs", "logprob_abs", "grad_rel")
    table = {row[0]: (row[1:7], [float(x) for x in row[7].split(",")]) for row in rows}
    assert set(table) == set(UPDATE_TOLERANCES)
    for precision, tol in UPDATE_TOLERANCES.items():
        bounds, floor = table[precision]
        expected = [getattr(tol, m) for m in measures]
        assert [None if b == "not judged" else float(b) for b in bounds] == expected, precision
        assert floor == [tol.noise_floor[m] for m in measures], precision


# A path in the tree: tests/..., docs/..., harness/..., scenarios/..., patches/... with a file suffix.
_PATH = re.compile(
    r"(?<![\w./-])((?:tests|docs|harness|scenarios|patches|constraints)/[\w./-]*\w\.(?:py|md|yaml|"
    r"diff|json|txt|png|svg)(?:\.in)?)(?![\w])"
)


# Named but never meant to exist in the tree: made-up test data, and the scenarios tools/cuda-check.sh writes.
NOT_IN_THE_TREE = {
    "tests/x.py",  # a made-up pytest node id
    "tests/test_lm_head.py",  # the file outside verl/ that tests/verl_tree.py's pull request adds to its checkout
    "harness/x.py",  # a made-up line of `git status`
    "harness/room/bare.py",  # the module without a docstring the listing's test plants in its tmp_path
    "scenarios/cuda-engine-bf16-w1.yaml",
    "scenarios/cuda-direct-bf16-w1.yaml",
    "scenarios/cuda-engine-update-w1.yaml",
    "scenarios/mine-three-ranks.yaml",  # the user's own scenario test_own_scenario writes into its copy
}


def _tracked_files() -> list:
    """Every file git tracks here, and those it would (untracked, not ignored): a fresh clone's files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [ROOT / name for name in sorted(set(listed.split("\0"))) if name]


def _texts():
    for path in _tracked_files():
        if path.is_symlink() or not path.is_file():
            continue  # .venv's link; a file deleted but not yet staged
        try:
            yield path, path.read_text()
        except UnicodeDecodeError:
            continue  # a picture


def test_every_path_a_tracked_text_file_names_exists():
    texts = dict(_texts())
    assert ROOT / "tests/unit/test_docs.py" in texts and ROOT / "scenarios/sweep/expectations.yaml" in texts
    missing = [
        f"{path.relative_to(ROOT)}: {named}"
        for path, text in texts.items()
        for named in _PATH.findall(text)
        if "<" not in named and "*" not in named and named not in NOT_IN_THE_TREE and not (ROOT / named).exists()
    ]
    assert not missing, missing


def test_every_relative_link_of_the_docs_resolves_from_its_file():
    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+://|#|mailto:", target):
                continue
            if not (doc.parent / target.split("#")[0]).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, broken


def _modules_tool():
    """tools/modules.py, imported here (it is no package): the listing's writer and its check, run in-process."""
    spec = importlib.util.spec_from_file_location("modules_listing", ROOT / "tools" / "modules.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_module_listing_is_what_the_docstrings_write():
    """docs/MODULES.md is generated from the docstrings: a module added, moved or redescribed without
    `python tools/modules.py` fails here, named."""
    tool = _modules_tool()
    assert tool.check(tool.PACKAGE, tool.LISTING) is None


def _planted_tree(root: Path) -> Path:
    """A harness/ of two rooms, every package and module with its docstring, and its listing written beside it."""
    package = root / "harness"
    (package / "room").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The floor. More words."""\n')
    (package / "room" / "__init__.py").write_text('"""A room of one job (e.g. this one). Its second sentence."""\n')
    (package / "room" / "said.py").write_text('"""What it holds: `a.b` and `[ ... ]`.\n\nThe rest."""\nX = 1\n')
    (root / "MODULES.md").write_text(_modules_tool().listing(package))
    return package


def test_a_module_without_a_docstring_is_the_checks_one_line_naming_it(tmp_path, monkeypatch, capsys):
    tool = _modules_tool()
    package = _planted_tree(tmp_path)
    listing = tmp_path / "MODULES.md"
    assert tool.check(package, listing) is None
    assert "| `room/said.py` | What it holds: `a.b` and `[ ... ]`. |" in listing.read_text()
    assert "A room of one job (e.g. this one)." in listing.read_text()
    (package / "room" / "bare.py").write_text("import os\n")
    monkeypatch.setattr(tool, "PACKAGE", package)
    monkeypatch.setattr(tool, "LISTING", listing)
    assert tool.main(["--check"]) == 1
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and said.startswith("harness/room/bare.py: no module docstring"), said
    assert tool.main([]) == 1  # nothing to write its row from: the listing stays as it was
    assert "bare.py" not in listing.read_text()


def test_a_changed_docstring_or_a_removed_module_names_its_row_stale(tmp_path):
    tool = _modules_tool()
    package = _planted_tree(tmp_path)
    listing = tmp_path / "MODULES.md"
    (package / "room" / "said.py").write_text('"""What it holds now."""\n')
    (package / "room" / "new.py").write_text('"""A new one."""\n')
    said = tool.check(package, listing)
    assert said == "MODULES.md is stale (room/new.py, room/said.py): python tools/modules.py", said
    listing.write_text(tool.listing(package))
    (package / "room" / "new.py").unlink()
    assert tool.check(package, listing) == "MODULES.md is stale (room/new.py (gone)): python tools/modules.py"
