"""Imports run one way through the rooms of harness/ (docs/ARCHITECTURE.md, "Rooms"), and no module's imports come
back to it: read from the source with ast (nothing imported), function bodies included.

- A room is a folder of harness/ (every module under harness/X/ is of room X, found from the tree, never listed);
  the modules directly under harness/ are the floor (errors, paths), but cli and __main__, the room "cli";
- a module imports only the floor, its own room and the rooms before its own in ROOM_ORDER: the record models and
  the results files (records: every stage writes or reads them, a rank its RankResult), what a run is asked to do
  (inputs), render (it draws data only), the tools a stage calls (rank, processes), then the flow's stages (plan ->
  launch -> judge_cell), then the runner that walks a cell through them, then judging a change across the cells
  the runner gave (judge_change), then the commands;
- no circle, inside a room or across rooms: a module never reaches itself through its imports;
- outside rank/, only the rank's public face is imported (RANK_FACE);
- no module imports another module's private (_underscore) name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.paths import ROOT

pytestmark = pytest.mark.unit

# The folders of harness/, lowest first: a module may import the rooms before its own. "cli" is harness/cli.py and
# harness/__main__.py.
ROOM_ORDER = (
    "records",
    "inputs",
    "render",
    "rank",
    "processes",
    "plan",
    "launch",
    "judge_cell",
    "run",
    "judge_change",
    "upstream",
    "commands",
    "cli",
)
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
    """'floor', or the room (the folder of harness/) the module is in."""
    parts = module.split(".")
    if len(parts) == 1:
        return "floor"
    if parts[1] in ("cli", "__main__"):
        return "cli"
    return parts[1] if len(parts) > 2 or (ROOT / "harness" / parts[1]).is_dir() else "floor"


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
    if mine == theirs or theirs == "floor" and mine != "floor":
        return found
    if mine == "floor":
        found.append(f"{importer} is the floor and imports {imported}")
    elif ROOM_ORDER.index(theirs) > ROOM_ORDER.index(mine):
        found.append(f"{importer} (room {mine}) imports {imported} of the later room {theirs}: it runs back")
    return found


def harness_modules() -> list[Path]:
    return sorted((ROOT / "harness").rglob("*.py"))


def test_every_package_of_harness_has_a_place():
    packages = {p.name for p in (ROOT / "harness").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(ROOM_ORDER) - {"cli"}, "a new package of harness/: give it a place in ROOM_ORDER"


def import_graph() -> dict[str, set[str]]:
    """module -> the harness modules it imports (itself left out), over every module of harness/."""
    modules = {module_name(path): path for path in harness_modules()}
    graph = {}
    for name, path in modules.items():
        graph[name] = {m for m, _ in imports(path) if m in modules and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that reach themselves through their imports, each group once (Tarjan's strongly connected
    components of more than one module), sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_module_reaches_itself_through_its_imports():
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(group) for group in found)


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
        ("harness.render.tables", "harness.judge_change.head_memory", ["logits_cell"], "runs back"),
        ("harness.commands.sweep", "harness.rank.oracle.model", ["load_config"], "reaches into the rank"),
        ("harness.run.ray_runner", "harness.run.runner", ["_StopOnSignal"], "private"),
        ("harness.judge_cell.verdict", "harness.run.runner", ["run_plan"], "runs back"),
        ("harness.inputs.scenario", "harness.plan.arms", ["Arm"], "runs back"),
        # The arrow back up of issue 59: the results files computing a key of the planner's.
        ("harness.records.store", "harness.plan.reuse", ["key_for"], "runs back"),
        ("harness.paths", "harness.records.results", ["Record"], "the floor"),
    ],
)
def test_the_check_finds_an_import_that_runs_back(importer, imported, names, says):
    assert says in " ".join(problems(importer, imported, names))


@pytest.mark.parametrize(
    "importer, imported, names",
    [
        ("harness.run.runner", "harness.judge_cell.verdict", ["judge"]),
        ("harness.judge_cell.verdict", "harness.launch.launch", ["RawRun"]),
        ("harness.rank.worker", "harness.inputs.scenario", ["Scenario"]),
        ("harness.plan.reuse", "harness.records.results", ["SCHEMA_VERSION"]),
        ("harness.plan.estimate", "harness.records.history", ["history"]),
        ("harness.inputs.expectations", "harness.records.results", ["Record"]),
        ("harness.launch.launch", "harness.rank.stacks", ["SIGNAL"]),
    ],
)
def test_the_check_lets_an_import_down_the_rooms_pass(importer, imported, names):
    assert problems(importer, imported, names) == []


def test_the_walk_sees_imports_inside_functions_and_relative_ones(tmp_path, monkeypatch):
    package = tmp_path / "harness" / "judge_cell"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "x.py").write_text("def f():\n    from harness.run import runner\n    from . import verdict\n")
    (tmp_path / "harness" / "run").mkdir()
    (tmp_path / "harness" / "run" / "runner.py").write_text("")
    (package / "verdict.py").write_text("")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    assert [m for m, _ in imports(package / "x.py")] == ["harness.run.runner", "harness.judge_cell.verdict"]


def test_the_rooms_come_from_the_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    (tmp_path / "harness" / "judge_cell").mkdir(parents=True)
    assert room_of("harness.judge_cell.verdict") == "judge_cell"
    assert room_of("harness.judge_cell") == "judge_cell"
    assert room_of("harness.errors") == "floor"
    assert room_of("harness.cli") == room_of("harness.__main__") == "cli"
    assert room_of("harness.newroom.thing") == "newroom"  # a new folder is a room of its own, before it has a place


def test_a_circle_inside_a_room_is_found(tmp_path, monkeypatch):
    """Two modules of one room that import each other (one inside a function), planted in a copy of the layout."""
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    package = tmp_path / "harness" / "commands"
    package.mkdir(parents=True)
    (tmp_path / "harness" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "bench.py").write_text("def cmd_bench():\n    from harness.commands.bench_head import run\n")
    (package / "bench_head.py").write_text("from harness.commands.bench import cmd_bench\n")
    (package / "alone.py").write_text("from harness.commands import bench\n")
    monkeypatch.setattr(
        __import__(__name__, fromlist=["harness_modules"]),
        "harness_modules",
        lambda: sorted((tmp_path / "harness").rglob("*.py")),
    )
    assert circles(import_graph()) == [["harness.commands.bench", "harness.commands.bench_head"]]
    assert all(problems("harness.commands.bench", m, []) == [] for m in import_graph()["harness.commands.bench"])
