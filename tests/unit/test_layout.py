"""The user's side stays light: its rooms (inputs, plan, launch, run, judge_cell, judge_change, records,
render, commands, ...) import
with torch (and ray) blocked, so `harness list` and a usage error never pay for torch, nothing there depends on the
rank side's stack, and ray is imported only by a run given --ray (run/ray_executor.py imports it in its functions)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

from harness.paths import ROOT

# The packages of the user's process, every module of each (walked, so a new module is checked the day it lands),
# and the user side's modules outside them. rank/ runs in torchrun's ranks; of it, only the phase names (the
# contract between the two sides) and the environment a rank is started with are the user's too.
USER_PACKAGES = (
    "inputs",
    "plan",
    "launch",
    "run",
    "judge_cell",
    "judge_change",
    "records",
    "render",
    "commands",
    "processes",
    "upstream",
)
USER_MODULES = (
    "harness.cli",
    "harness.paths",
    "harness.errors",
    "harness.git",
    "harness.python_ast",
    "harness.rank.phases",
    "harness.rank.environment",
)


def _user_side() -> list[str]:
    names = list(USER_MODULES)
    for package in USER_PACKAGES:
        names.append(f"harness.{package}")
        names += [f"harness.{package}.{m.name}" for m in pkgutil.iter_modules([str(ROOT / "harness" / package)])]
    return names


USER_SIDE = _user_side()


def test_the_walk_finds_every_module_of_the_user_side():
    on_disk = {p.stem for package in USER_PACKAGES for p in (ROOT / "harness" / package).glob("*.py")} - {"__init__"}
    walked = {name.rsplit(".", 1)[1] for name in USER_SIDE}
    assert on_disk <= walked and {"launch", "client", "server", "stand_in", "tables", "run", "scenario"} <= walked
    assert {p.name for p in (ROOT / "harness").iterdir() if p.is_dir() and (p / "__init__.py").exists()} == {
        *USER_PACKAGES,
        "rank",
    }, "a new package of harness/: say which side it is on"


def test_user_side_imports_with_torch_blocked():
    code = (
        "import sys\nfor name in ('torch', 'verl', 'transformers', 'ray'):\n    sys.modules[name] = None\n"
        "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in USER_SIDE)
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_list_runs_with_torch_blocked():
    code = "import sys\nsys.modules['torch'] = None\nfrom harness.cli import main\nraise SystemExit(main(['list']))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "fsdp2-multigpu" in done.stdout


def test_without_an_nvidia_driver_the_device_check_does_not_import_torch():
    """On a host with no NVIDIA device node no GPU can be used: the driver answers 0 without paying for torch."""
    import os

    import pytest

    from harness.plan.devices import NVIDIA_NODES as _NVIDIA_NODES

    if any(os.path.exists(node) for node in _NVIDIA_NODES):
        pytest.skip("this host has an NVIDIA driver: the check asks torch")
    code = (
        "import sys\nfrom harness.plan.devices import visible_cuda_devices\n"
        "print(visible_cuda_devices(), 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "False"]


def test_no_class_name_is_defined_in_two_modules():
    """One concept, one name: a class of the same name in two modules (two `Change`s, two `_Reader`s) is two things
    a reader takes for one."""
    import ast

    where: dict[str, list[str]] = {}
    for path in sorted((ROOT / "harness").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(path.relative_to(ROOT).as_posix())
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}


# Records typed end to end (issue 65): the driver's data is models and dataclasses read by attribute, not dicts.
MOST_DICT_LOOKUPS = 40


def test_the_driver_side_reads_typed_data_with_at_most_40_dict_lookups():
    """Counted: every `.get("` in harness/ outside rank/ (the text, so `x.get("k")`, `os.environ.get("K")` and an
    XML element's `.get("name")` alike; processes/, the fork server's plumbing, counts). rank/ is outside: it runs in
    torchrun's ranks and reads verl's and torch's own dicts (configs, state dicts), which are not ours to type. What
    is left are lookups in mappings keyed by data (parameter names, environment variables, file names, verl
    names), XML attributes, and a few raw files and rank-written dicts read before or without a model of their own.
    A new one where a record, a request or a file's fields could be read as a model's attributes fails here: type
    the data (records/results.py, records/measures.py) rather than add a lookup."""
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "harness").rglob("*.py"))
        if "rank" not in path.relative_to(ROOT / "harness").parts[:1]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for _ in range(line.count('.get("'))
    ]
    assert len(found) <= MOST_DICT_LOOKUPS, f'{len(found)} `.get("` lookups outside rank/: {found}'
