"""Where things live (ROOT, scenarios/, results/, .cache/) and `shown_path`, how every message shows a path. No heavy
imports here: the CLI, the arms and the tests import it before torch.

What is here: ROOT and the directories under it (scenarios/, models/, patches/, constraints/), results/ (results_dir,
HARNESS_RESULTS_DIR) and .cache/ (HARNESS_CACHE_DIR), the environment variables that name a verl tree and the installed
verl, and `shown_path`, how every message shows a path."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS_DIR = ROOT / "scenarios"
MODELS_DIR = ROOT / "models"
PATCHES_DIR = ROOT / "patches"
RESULTS_ENV = "HARNESS_RESULTS_DIR"


def results_dir() -> Path:
    """Where records, tables and pictures go: HARNESS_RESULTS_DIR as it is at the call (`harness releases` points
    its per-release runs elsewhere; a test's command, run in the test's process, its tmp dir), else the checkout's
    results/. Read at each call, never bound at import: a module imported before the variable changed (the preloaded
    parent's, a test's) writes where the command was told to."""
    return Path(os.environ.get(RESULTS_ENV) or ROOT / "results")


# Arms' copies, rank logs, compile caches. A Ray node (run/ray_executor.py) is given one outside the unpacked working
# dir Ray runs the task in, so that rank logs outlive the job and arms are built once per node.
CACHE_DIR = Path(os.path.expanduser(os.environ.get("HARNESS_CACHE_DIR") or ROOT / ".cache"))
CONSTRAINTS_DIR = ROOT / "constraints"
# The verl source tree a command runs on (plan/verl_trees.py sets it, as JSON, for the command it runs again in the
# tree's environment; records/results.py VerlTree.of_this_command reads it). Unset: the installed verl.
VERL_TREE_ENV = "HARNESS_VERL_TREE"
# The tree a command is asked to run on where --verl is not given (the Makefile's VERL=PATH[@REF]).
VERL_SPEC_ENV = "HARNESS_VERL"
# The installed verl's package directory, which the project's patches are written against (plan/patch_base.py), for
# a command run again in a verl tree's environment, where `import verl` finds the tree's (plan/verl_trees.py enter).
INSTALLED_VERL_ENV = "HARNESS_INSTALLED_VERL"


def model_config_path(name: str) -> Path:
    return MODELS_DIR / f"{name}.json"


def shown_path(path: str | os.PathLike) -> str:
    """A path as messages and records show it (the one "as shown"): relative to the checkout where it lies inside it
    (a relative path taken from the working directory, as given or with its links resolved: a diff under a linked
    folder of the checkout), else as given."""
    given = Path(path)
    for where in (Path(os.path.abspath(given)), given.resolve()):
        if where.is_relative_to(ROOT):
            return str(where.relative_to(ROOT))
    return str(given)
