"""verl's own pre-commit checks on a generated test, placed where it belongs in a checkout of the ref it targets.

A throwaway clone of verl's repository (`git clone --shared`: nothing is written into the repository itself) is
checked out at the ref; the test is written to its folder (the finding's test.dest) and staged as intent-to-add,
since verl's license script only looks at files git tracks. Then, from that ref's .pre-commit-config.yaml:

- ruff check and ruff format --check, with the ruff version its ruff-pre-commit hook pins (a ruff binary of that
  version: $HARNESS_VERL_RUFF, else `ruff` on PATH; otherwise "not run", saying which version to install) and
  verl's pyproject.toml;
- mypy, where a mypy of the hook's pinned version is given ($HARNESS_VERL_MYPY), else "not run";
- the local hooks whose scope takes in a test file, each run as its `entry` says: check-license,
  validate-structure, check-naming-conventions; compileall's rule (warnings are errors) on the test file alone.

The hooks about verl's own code (trainer config generation, docstrings of named modules, device API, example
script names, uv) do not look at tests/ and are not run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

RUFF_ENV = "HARNESS_VERL_RUFF"
MYPY_ENV = "HARNESS_VERL_MYPY"
TEST_HOOKS = ("check-license", "validate-structure", "check-naming-conventions")
OUTPUT_LINES = 12  # of a check's output kept for the report (the lines naming the test first)


@dataclass(frozen=True)
class Check:
    """One of verl's checks on the test: passed (True), failed (False) or not run (None, `output` says why)."""

    name: str
    command: str
    passed: bool | None
    output: str

    def line(self) -> str:
        said = {True: "passes", False: "FAILS", None: "not run"}[self.passed]
        return f"{self.name}: {said}" + (f" ({self.output.splitlines()[0]})" if self.output and not self.passed else "")


@dataclass(frozen=True)
class PackageChecks:
    ref: str
    commit: str
    path: str  # where the test went in verl's tree
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        """No check failed (one not run, e.g. no ruff of verl's pin here, is said, not counted)."""
        return all(c.passed is not False for c in self.checks)

    @property
    def complete(self) -> bool:
        """Every check ran."""
        return all(c.passed is not None for c in self.checks)


def target_ref(finding) -> str:
    """The ref a package's test is written for: an open pull request's head, else verl's main."""
    return f"refs/pr/{finding.pr}" if finding.kind == "pr" else "main"


class _Hook(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str
    entry: str = ""


class _Repo(BaseModel):
    model_config = ConfigDict(extra="ignore")
    repo: str
    rev: str = ""
    hooks: list[_Hook] = []


class _PreCommit(BaseModel):
    """What of a .pre-commit-config.yaml the checks read: each repo's url, pinned rev and hooks."""

    model_config = ConfigDict(extra="ignore")
    repos: list[_Repo] = []


def _config(config_text: str) -> _PreCommit:
    return _PreCommit.model_validate(yaml.safe_load(config_text) or {})


def pinned_versions(config_text: str) -> dict[str, str]:
    """{"ruff": "0.12.2", "mypy": "1.17.0"} from a .pre-commit-config.yaml's repos (their `rev`, without the v);
    "?" for one it does not pin."""
    pins = {"ruff": "?", "mypy": "?"}
    for repo in _config(config_text).repos:
        for tool, url_end in (("ruff", "ruff-pre-commit"), ("mypy", "mirrors-mypy")):
            if repo.repo.rstrip("/").endswith(url_end):
                pins[tool] = repo.rev.removeprefix("v")
    return pins


def local_hooks(config_text: str) -> dict[str, str]:
    """id -> entry of the config's local hooks."""
    return {h.id: h.entry for r in _config(config_text).repos if r.repo == "local" for h in r.hooks}


def _tool(env: str, name: str, version: str) -> tuple[str | None, str]:
    """A binary of NAME at VERSION ($ENV, else NAME on PATH), or None and why."""
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        return None, f"no {name} {version}: pip install {name}=={version} and set {env}"
    got = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    if not re.search(rf"\b{re.escape(version)}\b", got):
        return None, f"{path} is {got.strip() or '?'}, verl pins {version}: set {env} to a {name} {version}"
    return path, ""


def _kept(output: str, rel: str) -> str:
    """The output's lines that name the test (the license script prints every file it reads), else its tail."""
    lines = [line for line in output.splitlines() if line.strip()]
    mine = sorted((line for line in lines if rel in line), key=lambda line: line.endswith(rel))  # the message first
    rest = [line for line in lines[-OUTPUT_LINES:] if line not in mine and not line.endswith(".py")]
    return "\n".join((mine + rest)[:OUTPUT_LINES])


def _run(name: str, argv: list[str], tree: Path, rel: str, env: dict | None = None, shown: str = "") -> Check:
    """ARGV in TREE; the check is shown as SHOWN (else ARGV), its output without the temporary tree's path."""
    done = subprocess.run(argv, cwd=tree, capture_output=True, text=True, env=env, timeout=600)
    output = (done.stdout + done.stderr).replace(f"{tree}/", "")
    return Check(name, shown or shlex.join(argv), done.returncode == 0, _kept(output, rel))


def clone_at(repo: Path, commit: str, where: Path) -> Path:
    tree = where / "verl"
    for args in (
        ["clone", "-q", "--shared", "--no-checkout", str(repo), str(tree)],
        ["-C", str(tree), "checkout", "-q", "--detach", commit],
    ):
        done = subprocess.run(["git", *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"git {args[0]}: {done.stderr.strip()}")
    return tree


def check_test(repo: Path, ref: str, commit: str, text: str, dest: str, file_name: str) -> PackageChecks:
    """verl's checks at COMMIT (REF's) on TEXT written as DEST/FILE_NAME."""
    with tempfile.TemporaryDirectory(prefix="harness-verl-checks-") as tmp:
        tree = clone_at(repo, commit, Path(tmp))
        rel = f"{dest}/{file_name}"
        (tree / dest).mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
        subprocess.run(["git", "-C", str(tree), "add", "-N", rel], check=True)
        config = (tree / ".pre-commit-config.yaml").read_text()
        pins, hooks = pinned_versions(config), local_hooks(config)
        checks = []
        ruff_pin, mypy_pin = pins["ruff"], pins["mypy"]
        ruff, why = _tool(RUFF_ENV, "ruff", ruff_pin)
        for name, argv in (
            ("ruff check", ["check", "--output-format", "concise", rel]),
            ("ruff format", ["format", "--check", rel]),
        ):
            shown = f"ruff {ruff_pin} {shlex.join(argv)}"
            checks.append(_run(name, [ruff, *argv], tree, rel, shown=shown) if ruff else Check(name, "", None, why))
        mypy, why = _tool(MYPY_ENV, "mypy", mypy_pin)
        shown = f"mypy {mypy_pin} {rel} (verl's [tool.mypy])"
        checks.append(_run("mypy", [mypy, rel], tree, rel, shown=shown) if mypy else Check("mypy", "", None, why))
        for hook in TEST_HOOKS:
            if hook in hooks:
                entry = hooks[hook]
                shown = entry if len(entry) < 100 else f"the hook's entry ({entry[:60]}...)"
                checks.append(_run(hook, ["sh", "-c", entry], tree, rel, shown=shown))
        if "compileall" in hooks:
            env = {**os.environ, "PYTHONWARNINGS": "error"}
            argv = [sys.executable, "-m", "py_compile", rel]
            checks.append(_run("compileall", argv, tree, rel, env, f"PYTHONWARNINGS=error python -m py_compile {rel}"))
        return PackageChecks(ref, commit, rel, tuple(checks))


def check_package(repo: Path, finding, test_file: Path) -> PackageChecks:
    """The package's test (as written) checked at its target ref (target_ref)."""
    from harness.upstream.prove import NotProvable, ref_commit

    ref = target_ref(finding)
    try:
        commit = ref_commit(repo, ref)  # a pull request's head is fetched from origin where missing, as prove does
    except NotProvable:
        commit = None
    if commit is None:
        return PackageChecks(
            ref,
            "",
            f"{finding.test.dest}/{finding.test.file}",
            (Check("checkout", "", None, f"{repo}: no {ref} there"),),
        )
    return check_test(repo, ref, commit, test_file.read_text(), finding.test.dest, finding.test.file)


def checks_section(result: PackageChecks) -> list[str]:
    """REPORT.md's lines: where the test goes, and each of verl's checks with its output."""
    out = [
        "## verl's own checks on the test",
        "",
        f"The test goes to `{result.path}` in verl's tree (verl's `validate_structure.py`: tests/<a package of "
        "verl/>/...; the CPU lane collects `*_on_cpu.py`). verl's pre-commit checks on it there, at "
        f"`{result.ref}` ({result.commit[:12] or 'not found'}):",
        "",
    ]
    for check in result.checks:
        out.append(f"- {check.line()}" + (f": `{check.command}`" if check.command else ""))
        if check.output and check.passed is not None:
            out += ["", "  ```", *("  " + line for line in check.output.splitlines()), "  ```"]
    return out + [""]
