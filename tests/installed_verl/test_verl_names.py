"""harness/inputs/verl_names.json is what the installed verl's trainer config accepts: regenerated from verl's own
dataclasses and trainer YAML (harness/rank/verl_side/config_names.py), it must be the committed file. It imports verl
(in a process of its own: tests/own_process.py), so it is no `unit` test (tests/unit/): make test runs it, make unit
does not."""

from __future__ import annotations

from own_process import run_code  # tests/own_process.py (tests/ is on sys.path: its conftest)

from harness.rank.verl_side.config_names import NAMES_FILE

REGENERATE = (
    "import sys\nfrom harness.rank.verl_side.config_names import config_names, render\n"
    "sys.stdout.write(render(config_names()))\n"
)


def test_the_committed_names_are_the_installed_verls(tmp_path):
    done = run_code(REGENERATE, folder=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == NAMES_FILE.read_text(), (
        "harness/inputs/verl_names.json differs from the installed verl's config names: "
        "run `.venv/bin/python -m harness.rank.verl_side.config_names` and commit the file"
    )
