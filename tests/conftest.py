"""Fixtures the tests share (the collection of scenarios/*.yaml as test items is the root conftest.py's):

- `harness_cli`: `python -m harness ...` as a user runs it, in a subprocess, its results under the test's tmp dir
  (`launching_cli`, `session_cli`, `new_launching_cli()`: the same, its cells forked by this process's preloaded
  parent, the last two for a flow that several tests check, the third's results in a directory of its own;
  `cli_in_process`, `new_cli_in_process()`: the same command through harness.cli.main in this process, for tests of
  what it prints, writes and exits with, the second for a flow that several tests check);
- `upstream_verified`: `verify --scenario fsdp2-multigpu --alone` of upstream through harness.cli.main in this
  process, once per pytest process (its output and record);
- `verified_once(arm, *scenarios)`: `verify --patch ARM --scenario ... --alone` run once per pytest process, its
  output and records shared by the tests that ask for the same command;
- `scenario(name, **overrides)`: a shipped scenario, fields replaced;
- `record(**fields)`: a record of the shape the verdict writes, for tests of what reads records;
- `verl_repo`: verl's real git repository, a clone at $HARNESS_VERL_REPO (tests marked `verl_repo`; skipped, saying
  why, where it is unset: CI has none);
- `run_cell(scenario, arm)`: one launch and judge through the harness's own runner (run/runner.py), the record
  stamped and appended as any command's are (`shared_cell`, the root conftest.py's, shares a shipped cell's
  record with its scenario item).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from record_builder import make_record  # tests/record_builder.py (tests/ is on sys.path: its conftest)
from user_checkout import parent_lent_to_children  # tests/user_checkout.py

from harness.paths import ROOT, SCENARIOS_DIR


class HarnessCli:
    """`python -m harness ARGS` in a fresh interpreter, as a user runs it: its results files land in
    `results_dir`, never in the checkout's results/.

    share_parent: the command's launches are forked by this pytest process's preloaded parent
    (harness/processes/client.py shared_with_children) rather than by one it starts itself, which would import
    torch, transformers and verl's dependencies again; for tests whose subject is what the command does, not its
    process tree or its parent's start (tests/distributed/test_forked_cells.py has those)."""

    def __init__(self, results_dir: Path, *, share_parent: bool = False):
        self.results_dir = Path(results_dir)
        self.share_parent = share_parent

    def _env(self, env: dict | None) -> dict:
        shared = parent_lent_to_children() if self.share_parent else {}
        return {**os.environ, "HARNESS_RESULTS_DIR": str(self.results_dir), **shared, **(env or {})}

    def __call__(self, *args, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "harness", *map(str, args)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env=self._env(env),
        )

    def start(self, *args, env: dict | None = None, **popen) -> subprocess.Popen:
        """The same command, started and left running (to be signalled, say); stdout and stderr are pipes."""
        return subprocess.Popen(
            [sys.executable, "-m", "harness", *map(str, args)],
            cwd=ROOT,
            env=self._env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **popen,
        )

    def usage_error(self, *args) -> str:
        """Runs a command that must stop with a usage error (exit 2, one line naming what is wrong, no traceback);
        returns that line."""
        done = self(*args, timeout=60)
        assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
        return lines[0]

    def results_files(self, command: str) -> list[Path]:
        """The results files the commands named `command` wrote, oldest first."""
        return sorted(self.results_dir.glob(f"*-{command}-*.jsonl"))


class InProcessCli(HarnessCli):
    """`harness ARGS` as harness.cli.main(ARGS) in this process, its stdout, stderr and exit code returned as
    HarnessCli's are, its results files under the test's tmp dir: for tests whose subject is what a command prints,
    writes or exits with (a report, a usage error, a verify's closing block), where a fresh interpreter's start and
    imports (0.3-1 s a call; 1-2.5 s for a verify) would be most of the test or add nothing it checks. What only a
    real process shows (its exit status, what it imports, its signals) keeps harness_cli.

    capfd: what the command writes to this process's file descriptors is its output; without it (a session-scoped
    user, which has no capfd), what it writes to sys.stdout and sys.stderr."""

    def __init__(self, results_dir: Path, capfd: pytest.CaptureFixture | None = None):
        super().__init__(results_dir)
        self.capfd = capfd

    def __call__(self, *args, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
        from harness.cli import main
        from harness.processes import client

        argv = [str(a) for a in args]
        # main() sets KEEP where it is unset (os.environ.setdefault): set for the call, as a subprocess's would be
        keep = os.environ.get(client.KEEP, client.keep_default())
        env = {"HARNESS_RESULTS_DIR": str(self.results_dir), client.KEEP: keep, **(env or {})}
        if self.capfd:
            self.capfd.readouterr()  # what the test printed before is not the command's
        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as patched, self._captured(out, err):
            patched.chdir(ROOT)  # where harness_cli runs its command
            for name, value in env.items():
                patched.setenv(name, value)
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors, and sys.exit in a command
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if self.capfd:
            captured = self.capfd.readouterr()
            return subprocess.CompletedProcess(["harness", *argv], code, captured.out, captured.err)
        return subprocess.CompletedProcess(["harness", *argv], code, out.getvalue(), err.getvalue())

    def _captured(self, out: io.StringIO, err: io.StringIO) -> contextlib.AbstractContextManager:
        if self.capfd:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        return stack


@pytest.fixture
def harness_cli(tmp_path) -> HarnessCli:
    return HarnessCli(tmp_path / "results")


@pytest.fixture
def cli_in_process(tmp_path, capfd) -> InProcessCli:
    return InProcessCli(tmp_path / "results", capfd)


@pytest.fixture
def launching_cli(tmp_path) -> HarnessCli:
    """The same, for a command that launches cells: they are forked by this process's preloaded parent."""
    return HarnessCli(tmp_path / "results", share_parent=True)


@pytest.fixture(scope="session")
def new_launching_cli(tmp_path_factory):
    """new_launching_cli() -> a launching CLI with a results directory of its own, for a flow shared by a module's
    tests whose commands read what the earlier ones wrote there (reuse, estimates) and nothing of other flows'."""
    return lambda: HarnessCli(tmp_path_factory.mktemp("results"), share_parent=True)


@pytest.fixture(scope="session")
def new_cli_in_process(tmp_path_factory):
    """new_cli_in_process(results_dir=None) -> an InProcessCli with a results directory of its own, or the one given
    (another CLI's: a flow's commands that read what the others wrote there), without capfd (what the commands write
    to sys.stdout and sys.stderr): for a flow of commands a module's tests share whose subject is what they print
    and write, not a fresh interpreter's start (1-1.5 s of CPU a command). Its cells are launched as a launching
    CLI's are, by this process's preloaded parent."""
    return lambda results_dir=None: InProcessCli(results_dir or tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="session")
def session_cli(new_launching_cli) -> HarnessCli:
    """A launching CLI for session-scoped fixtures (one user-level flow shared by the tests that check it)."""
    return new_launching_cli()


@pytest.fixture(scope="session")
def upstream_verified(session_cli, new_cli_in_process):
    """(the CompletedProcess, its record) of `verify --scenario fsdp2-multigpu --alone` (upstream), once per pytest
    process, through harness.cli.main in this process (its cells forked by this process's parent as a user's are; a
    fresh interpreter would add ~1.1 s of CPU and no fact), its results in session_cli's directory, where the `report
    --full` line it prints is run as a user runs it: test_verify_rerun_report.py checks what it prints,
    test_determinism_and_gather_bytes.py compares its record with the scenario item's run of the same cell. Mark each
    such test `xdist_group("fsdp2-multigpu")`, the scenario's items' process. The record is None where the command
    wrote none."""
    from harness.records.store import load_records

    before = set(session_cli.results_files("verify"))
    done = new_cli_in_process(session_cli.results_dir)("verify", "--scenario", "fsdp2-multigpu", "--alone")
    written = [path for path in session_cli.results_files("verify") if path not in before]
    records = load_records(written[-1]) if written else []
    return done, records[0] if len(records) == 1 else None


@pytest.fixture(scope="session")
def verified_once(tmp_path_factory):
    """verified_once(patch arm, *scenarios) -> (the CompletedProcess, {scenario: record}) of `verify --patch ARM
    --scenario S... --alone`, run once per pytest process and shared: a test of what verify prints and a test of the
    typed facts of the same cells read one run instead of launching each cell twice. Mark each such test
    `xdist_group` with one name, so that one process runs it. Through harness.cli.main in this process
    (InProcessCli): the tests check what verify prints and writes (its results in `verified_once.results_dir`)."""
    from harness.records.store import load_records

    runs: dict = {}
    session_cli = InProcessCli(tmp_path_factory.mktemp("verified-results"))

    def verify(arm: str, *scenarios: str):
        key = (str(arm), *scenarios)
        if key not in runs:
            out = tmp_path_factory.mktemp("verified") / "records.json"
            chosen = [arg for name in scenarios for arg in ("--scenario", name)]
            done = session_cli("verify", "--patch", arm, *chosen, "--alone", "--json", out)
            records = {r.scenario: r for r in load_records(out)} if out.is_file() else {}
            runs[key] = done, records
        return runs[key]

    verify.results_dir = session_cli.results_dir
    return verify


def load_named_scenario(name: str, **overrides):
    """A scenario from scenarios/ (the sweep's included) by name; overrides replace fields as they are."""
    from harness.inputs.scenario import load_scenario

    found = sorted(SCENARIOS_DIR.rglob(f"{name}.yaml"))
    assert found, f"no scenario {name} under {SCENARIOS_DIR}"
    loaded = load_scenario(found[0])
    return loaded.model_copy(update=overrides) if overrides else loaded


@pytest.fixture(scope="session")
def scenario():
    return load_named_scenario


@pytest.fixture(scope="session")
def record():
    """tests/record_builder.py's make_record, the one record builder of the tests."""
    return make_record


@pytest.fixture
def fake_process_group():
    """join(rank, world): this process as that rank of torch's fake process group, destroyed after the test. A real
    DTensor with real placements, in process: every collective is a c10d op that does nothing, with no peer."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def join(rank: int, world: int):
        dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())

    yield join
    if dist.is_initialized():
        dist.destroy_process_group()


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture(scope="session")
def _cell_results():
    """This pytest process's results file for the cells the tests run (records are kept, as any command's)."""
    from harness.records.store import ResultsFile

    results = ResultsFile(f"pytest-{_worker()}-cells")
    yield results
    results.close()


@pytest.fixture(scope="session")
def run_cell(_cell_results):
    """run_cell(scenario or its name, arm name or diff path, **runner options) -> the judged, stamped record.

    Launch and judge through run/runner.py's run_cell, as every command does: a test sees what a user's
    command records, and the record's run_dir says where the ranks' files are."""
    from harness.plan.arms import resolve_arm
    from harness.records.store import invocation_info
    from harness.run.runner import run_cell as runner_cell

    invocation = invocation_info("pytest")  # versions, commit and host: the same for every cell of the session

    def run(scenario, arm: str, **options) -> dict:
        if isinstance(scenario, str):
            scenario = load_named_scenario(scenario)
        record, _ = runner_cell(
            "pytest", scenario, resolve_arm(arm), results=_cell_results, invocation=invocation, **options
        )
        return record

    return run


VERL_REPO_ENV = "HARNESS_VERL_REPO"


@pytest.fixture(scope="session")
def verl_repo() -> Path:
    """verl's own git repository (a clone of verl-project/verl with its history and, for pull requests,
    `refs/pull/N/head` fetched as needed): the tests marked `verl_repo` judge real commits and pull requests in it.
    CI has no copy of it and must pass without one, so these tests skip, saying why."""
    path = os.environ.get(VERL_REPO_ENV)
    if not path:
        pytest.skip(f"{VERL_REPO_ENV} is unset: these tests need a clone of verl's real repository")
    repo = Path(path)
    if not (repo / ".git").exists() and not (repo / "HEAD").exists():
        pytest.skip(f"{VERL_REPO_ENV}={path} is not a git repository")
    return repo
