"""Every GitHub workflow of the project (.github/workflows/) and those it proposes for verl (docs/workflows/), linted by
actionlint and audited by zizmor (offline), and held to GitHub's hardening for untrusted code (docs/SECURITY.md):
actions pinned by full commit SHA, checkouts that keep no credentials, nothing of an event pasted into a script, and
no second package index picked from by best match outside the one job that still needs it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.paths import ROOT

pytestmark = pytest.mark.unit

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml")) + sorted((ROOT / "docs" / "workflows").glob("*.yml"))
ALLOWED = ROOT / "tests" / "unit" / "workflow_findings.yaml"
# A step's `uses:` of another repository's action: owner/name[/path]@ref, with the tag in a comment after it.
PINNED = re.compile(r"^\s*(?:-\s+)?uses:\s+[\w.-]+/[\w./-]+@[0-9a-f]{40}\s+#\s+v\d+(\.\d+)*\s*$")


def tool(name: str) -> str:
    """The venv's own binary (make venv installs both: requirements-test.txt), else one on PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"no {name} binary: `make venv` installs it (requirements-test.txt, pinned in constraints.txt)")
    return found


def test_the_workflows_are_the_ones_checked():
    names = {p.relative_to(ROOT).as_posix() for p in WORKFLOWS}
    assert {
        ".github/workflows/ci.yml",
        ".github/workflows/nightly.yml",
        "docs/workflows/pr-verdict.yml",
        "docs/workflows/pr-verdict-comment.yml",
    } <= names


def test_actionlint_finds_nothing(tmp_path):
    # The self-hosted GPU runner's custom label must be declared, or actionlint rejects it as unknown. shellcheck and
    # pyflakes run only where installed, and their findings change with their versions: off, so the verdict is the
    # same on every machine.
    config = tmp_path / "actionlint.yaml"
    config.write_text("self-hosted-runner:\n  labels: [gpu]\n")
    argv = [tool("actionlint"), "-config-file", str(config), "-shellcheck=", "-pyflakes=", *map(str, WORKFLOWS)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def zizmor_findings() -> set[tuple[str, str]]:
    """(audit id, workflow file) of every finding zizmor reports offline, at its regular persona, with no config
    file of its own (what is accepted is ALLOWED's, with its reason)."""
    argv = [tool("zizmor"), "--offline", "--no-config", "--no-progress", "--format", "json", *map(str, WORKFLOWS)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().startswith("["), done.stderr[-3000:]  # it ran; its exit code counts findings
    found = set()
    for finding in json.loads(done.stdout):
        for location in finding["locations"]:
            if location["symbolic"]["kind"] == "Primary":
                path = Path(location["symbolic"]["key"]["Local"]["verbatim_path"])
                path = path if path.is_absolute() else ROOT / path
                found.add((finding["ident"], path.relative_to(ROOT).as_posix()))
    return found


def test_zizmor_finds_only_what_is_allowed_each_with_its_reason():
    allowed = yaml.safe_load(ALLOWED.read_text())
    assert all(set(entry) == {"rule", "file", "why"} and len(entry["why"].split()) >= 10 for entry in allowed)
    listed = {(entry["rule"], entry["file"]) for entry in allowed}
    found = zizmor_findings()
    assert found - listed == set(), f"new findings (fix them, or list them with a reason in {ALLOWED.name})"
    assert listed - found == set(), f"entries of {ALLOWED.name} that no finding matches any more: remove them"


def steps(path: Path) -> list[dict]:
    data = yaml.safe_load(path.read_text())
    return [step for job in data["jobs"].values() for step in job.get("steps", [])]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_action_is_pinned_by_commit_and_every_checkout_keeps_no_credentials(path):
    for line in path.read_text().splitlines():
        if re.match(r"^\s*(-\s+)?uses:\s", line) and "uses: ./" not in line:
            assert PINNED.match(line), f"{path.name}: {line.strip()} (a full commit SHA, its tag in a comment)"
    for step in steps(path):
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False, (path.name, step)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_event_nor_input_is_pasted_into_a_script(path):
    """What an event or a caller gives reaches a script as an environment variable, never as text of the script."""
    for step in steps(path):
        pasted = re.findall(r"\$\{\{[^}]*\b(github\.event|inputs|needs|steps)\.[^}]*\}\}", step.get("run", ""))
        assert not pasted, (path.name, step.get("name"), pasted)


def test_a_second_index_picked_by_best_match_only_where_no_lock_covers_the_set():
    """requirements-ci.lock (make lock) is the default set with every file's hash, from PyPI alone; only the
    per-release environments (nightly's releases job) and the nightly's CPU scenario cells of the torch 2.11
    set (scenario-cell.yml) take no lock."""
    for path in WORKFLOWS:
        text = path.read_text()
        if path.name not in ("nightly.yml", "scenario-cell.yml"):
            assert "unsafe-best-match" not in text and "EXTRA_INDEX_URL" not in text, path.name
    nightly = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text())
    for name, job in nightly["jobs"].items():
        if "unsafe-best-match" in json.dumps(job):
            assert name == "releases", name


def test_the_lock_pins_exactly_constraints_txt_each_file_by_its_hash():
    """requirements-ci.lock is constraints.txt's set (make lock regenerates it): the same names at the same
    versions, every one with a sha256, torch's CPU build a file of download.pytorch.org."""
    lock = (ROOT / "requirements-ci.lock").read_text()
    entries = re.findall(
        r"^([A-Za-z0-9][\w.-]*)(?:==(\S+)| @ (\S+)) \\\n((?:\s+--hash=sha256:[0-9a-f]{64}.*\n?)+)", lock, re.M
    )
    locked = {}
    for name, version, url, _hashes in entries:
        if url:
            assert url.startswith("https://download.pytorch.org/whl/cpu/"), url
            version = re.search(rf"/{name}-([^-]+)-", url).group(1).replace("%2B", "+")
        locked[re.sub(r"[-_.]+", "-", name).lower()] = version
    pinned = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line:
            name, version = line.split("#")[0].strip().split("==")
            pinned[re.sub(r"[-_.]+", "-", name).lower()] = version
    assert locked == pinned
    requirement_lines = [line for line in lock.splitlines() if line and not line[0].isspace() and line[0] != "#"]
    assert len(requirement_lines) == len(entries)  # every requirement has its hashes
