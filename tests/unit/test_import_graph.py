"""Imports run one way through the rooms of harness/ (docs/ARCHITECTURE.md, "Rooms"), read from the source with ast
(nothing imported), function bodies included:

- errors and paths are the floor; inputs/ and the record models (records/results, measures, rank_measures) are data
  every room may import, and they import only the floor and each other;
- every other module belongs to a room of ROOM_ORDER and imports only the floor, the data, its own room and the
  rooms listed before its own: render (it draws data only), the tools a stage calls (rank, processes), then the
  flow's stages (plan -> launch -> judge -> records), then the runner that walks a cell through them, then the
  commands;
- outside rank/, only the rank's public face is imported (RANK_FACE);
- no module imports another module's private (_underscore) name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.paths import ROOT

pytestmark = pytest.mark.unit

FLOOR = {"harness.errors", "harness.paths"}
DATA_ROOMS = {"inputs"}
DATA_MODULES = {
    "harness.records",
    "harness.records.results",
    "harness.records.measures",
    "harness.records.rank_measures",
    "harness.records.causes",
}
# Lowest first. A module of a room may import the rooms before its own. render draws data only (records, inputs), so
# it sits below every stage: a table never runs a stage's code. "records" is records/store.py (its models are data);
# "cli" is harness/cli.py and harness/__main__.py.
ROOM_ORDER = ("render", "rank", "processes", "plan", "launch", "judge", "records", "run", "upstream", "commands", "cli")
# What the user's side may import of the rank: the phase names, the stack signal, the environment a rank starts
# with, and the package itself (the preloading server walks it); and the update oracle run alone, in the calling
# process, which `harness sensitivity` measures settings with (no verl, no torchrun).
RANK_FACE = {
    "harness.rank",
    "harness.rank.phases",
    "harness.rank.stacks",
    "harness.rank.environment",
    "harness.rank.oracle.update_alone",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names taken from it) for every harness import in the file, relative ones resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            names = [alias.name for alias in node.names]
            # `from harness.launch import run_dir` imports the module harness.launch.run_dir.
            modules = [f"{target}.{n}" for n in names if (ROOT / Path(*target.split("."), f"{n}.py")).exists()]
            found += [(m, []) for m in modules] or [(target, names)]
    return [(m, names) for m, names in found if m == "harness" or m.startswith("harness.")]


def room_of(module: str) -> str:
    """'floor', 'data', or a room of ROOM_ORDER."""
    if module in FLOOR:
        return "floor"
    if module in DATA_MODULES or module.split(".")[1] in DATA_ROOMS:
        return "data"
    room = module.split(".")[1]
    return "cli" if room in ("cli", "__main__") else room


def problems(importer: str, imported: str, names: list[str]) -> list[str]:
    """What is wrong with `importer` importing `names` of `imported`, one line each; [] where nothing is."""
    found = []
    private = [n for n in names if n.startswith("_")]
    if private and imported != importer:
        found.append(f"{importer} imports private {private} of {imported}")
    if imported == "harness":
        return found
    mine, theirs = room_of(importer), room_of(imported)
    if theirs == "rank" and mine != "rank" and imported not in RANK_FACE:
        found.append(f"{importer} reaches into the rank ({imported}); outside rank/ only {sorted(RANK_FACE)}")
    if theirs in ("floor", "data") or mine == theirs:
        return found
    if mine in ("floor", "data"):
        found.append(f"{importer} is data or floor and imports the room {theirs} ({imported})")
    elif ROOM_ORDER.index(theirs) > ROOM_ORDER.index(mine):
        found.append(f"{importer} (room {mine}) imports {imported} of the later room {theirs}: it runs back")
    return found


def harness_modules() -> list[Path]:
    return sorted((ROOT / "harness").rglob("*.py"))


def test_every_package_of_harness_has_a_place():
    packages = {p.name for p in (ROOT / "harness").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(ROOM_ORDER) - {"cli"} | DATA_ROOMS, "a new package of harness/: give it a place here"
    loose = {p.stem for p in (ROOT / "harness").glob("*.py")} - {"__init__"}
    assert {f"harness.{m}" for m in loose} <= FLOOR | {"harness.cli", "harness.__main__"}, loose


def test_no_import_runs_back():
    found = [
        line
        for path in harness_modules()
        for imported, names in imports(path)
        for line in problems(module_name(path), imported, names)
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "importer, imported, names, says",
    [
        # The four of issue 51, as they would read in today's rooms.
        ("harness.processes.bytecode", "harness.launch.launch", [], "runs back"),
        ("harness.render.tables", "harness.judge.head_memory", ["logits_cell"], "runs back"),
        ("harness.commands.sweep", "harness.rank.oracle.model", ["load_config"], "reaches into the rank"),
        ("harness.run.ray_runner", "harness.run.runner", ["_StopOnSignal"], "private"),
        ("harness.judge.verdict", "harness.run.runner", ["run_plan"], "runs back"),
        ("harness.inputs.scenario", "harness.plan.arms", ["Arm"], "data or floor"),
    ],
)
def test_the_check_finds_an_import_that_runs_back(importer, imported, names, says):
    assert says in " ".join(problems(importer, imported, names))


@pytest.mark.parametrize(
    "importer, imported, names",
    [
        ("harness.run.runner", "harness.judge.verdict", ["judge"]),
        ("harness.judge.verdict", "harness.launch.launch", ["RawRun"]),
        ("harness.rank.worker", "harness.inputs.scenario", ["Scenario"]),
        ("harness.plan.reuse", "harness.records.results", ["SCHEMA_VERSION"]),
        ("harness.launch.launch", "harness.rank.stacks", ["SIGNAL"]),
    ],
)
def test_the_check_lets_an_import_down_the_rooms_pass(importer, imported, names):
    assert problems(importer, imported, names) == []


def test_the_walk_sees_imports_inside_functions_and_relative_ones(tmp_path, monkeypatch):
    package = tmp_path / "harness" / "judge"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "x.py").write_text("def f():\n    from harness.run import runner\n    from . import verdict\n")
    (tmp_path / "harness" / "run").mkdir()
    (tmp_path / "harness" / "run" / "runner.py").write_text("")
    (package / "verdict.py").write_text("")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert [m for m, _ in imports(package / "x.py")] == ["harness.run.runner", "harness.judge.verdict"]
