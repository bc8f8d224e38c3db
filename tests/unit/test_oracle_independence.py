"""The project's first invariant, checked on the source: the oracle never touches verl. Every module the oracle is
built from imports neither verl nor any module of the rank side that drives verl, at module level or inside a
function, directly or through another oracle module. (rank/oracle.py and rank/oracle_update.py also assert at run
time that verl is not imported yet; this test needs no run.)"""

from __future__ import annotations

import ast

import pytest

from harness.paths import ROOT

pytestmark = pytest.mark.unit

RANK = ROOT / "harness" / "rank"
# What the oracle is made of: the model and the batches both sides start from, the losses written from their
# definitions, the references (the per-sample oracle, its update, FSDP's own unfused path without verl), and the
# pure helpers they call.
ORACLE_SIDE = {
    "model",
    "batch",
    "loss",
    "oracle",
    "oracle_update",
    "references",
    "sequence_parallel",
    "transformers_compat",
}
# What drives verl: its configuration, engine, patches, the paths that run it and the adapters that let it run here.
VERL_SIDE = {
    "verl_config",
    "engine",
    "engine_path",
    "engine_update",
    "direct_path",
    "adapters",
    "varlen_attention",
    "step",
}


def _imports(module: str, directory=RANK) -> set[str]:
    """Every module name an import statement anywhere in the file names (function bodies included)."""
    tree = ast.parse((directory / f"{module}.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_two_sides_cover_the_modules_they_name():
    present = {p.stem for p in RANK.glob("*.py")}
    assert present >= ORACLE_SIDE and present >= VERL_SIDE, (ORACLE_SIDE | VERL_SIDE) - present


@pytest.mark.parametrize("module", sorted(ORACLE_SIDE))
def test_an_oracle_module_imports_no_verl_and_nothing_of_the_verl_side(module):
    imported = _imports(module)
    assert not {name for name in imported if name == "verl" or name.startswith("verl.")}, imported
    rank_modules = {name.split(".")[2] for name in imported if name.startswith("harness.rank.")}
    assert not rank_modules & VERL_SIDE, rank_modules & VERL_SIDE
    # Only other oracle modules (and the neutral ones below), so nothing reaches verl indirectly either.
    assert rank_modules <= ORACLE_SIDE, rank_modules - ORACLE_SIDE


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    (tmp_path / "sneaky.py").write_text("def f():\n    from verl.utils import tensordict_utils\n    import verl\n")
    assert {"verl.utils", "verl"} <= _imports("sneaky", tmp_path)
