"""The driver never imports verl: installed by cli.main where the command runs on a verl tree (HARNESS_VERL_TREE).

There, `import verl` would find the tree's package, which is a pull request's code: imported in the driver, it would
run with everything the driver holds (the caller's environment, its key, results/, the comment it writes), outside
every sandbox a cell runs in. The driver reads verl only as files (importlib.util.find_spec locates the package
without running it); only a cell's ranks import it. So a finder first on sys.meta_path answers for `verl` and every
`verl.*` with the spec the other finders find (its location intact, for find_spec) and a loader that refuses to run
it, with a line that says why.
"""

from __future__ import annotations

import importlib.abc
import sys

REFUSED = "verl"


class VerlImportRefused(ImportError):
    pass


class _RefusingLoader(importlib.abc.Loader):
    def __init__(self, name: str):
        self.name = name

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise VerlImportRefused(
            f"the harness's driver imported {self.name!r} on a verl tree (HARNESS_VERL_TREE is set): the driver never "
            "runs verl's code, only a cell's ranks do (a defect of the harness: nothing was judged)",
            name=self.name,
        )


class RefuseVerl(importlib.abc.MetaPathFinder):
    """The finder: verl's specs, with the refusing loader."""

    def find_spec(self, name, path=None, target=None):
        if name != REFUSED and not name.startswith(REFUSED + "."):
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, RefuseVerl) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                spec.loader = _RefusingLoader(name)
                return spec
        return None


def refuse_verl() -> RefuseVerl:
    """Install the finder (first on sys.meta_path); returns it, for lift_refusal."""
    finder = RefuseVerl()
    sys.meta_path.insert(0, finder)
    return finder


def lift_refusal(finder: RefuseVerl) -> None:
    """Remove it again (a command run in a test's process leaves the process as it found it)."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)


def verl_imported() -> bool:
    """Whether verl is already in this process (then the finder is too late: cli says so)."""
    return any(name == REFUSED or name.startswith(REFUSED + ".") for name in sys.modules)
