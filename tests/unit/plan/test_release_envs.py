"""seed_bytecode (harness/processes/bytecode.py): a release's environment gets this interpreter's bytecode for the
files the two share, where the release's processes look for it, and a process there takes it as valid; a file of the
release's own gets none and is compiled there as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.processes.bytecode import run_environment, seed_bytecode

pytestmark = pytest.mark.unit

TAG = sys.implementation.cache_tag


def _ours(source: Path) -> Path:
    """This environment's .pyc of one of its files (make venv compiles them all)."""
    return source.parent / "__pycache__" / f"{source.stem}.{TAG}.pyc"


def _theirs(prefix: Path, source: Path) -> Path:
    """Where a process whose PYTHONPYCACHEPREFIX is prefix keeps source's bytecode."""
    return prefix / source.parent.relative_to(source.anchor) / f"{source.stem}.{TAG}.pyc"


def test_a_release_gets_the_bytecode_of_the_files_it_shares_and_compiles_its_own(tmp_path):
    import yaml  # a package of this environment, with its bytecode

    package = Path(yaml.__file__).parent
    env = tmp_path / "env"
    site = env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "yaml").mkdir(parents=True)
    for source in package.glob("*.py"):
        if source.name == "constructor.py":  # the release's own version of this file: another file
            (site / "yaml" / source.name).write_bytes(source.read_bytes())
        else:
            os.link(source, site / "yaml" / source.name)  # what uv does, from its cache, for the same version
    assert _ours(package / "constructor.py").is_file() and _ours(package / "__init__.py").is_file()

    seed_bytecode(env)
    prefix = env / ".pycache"
    shared, own = site / "yaml" / "__init__.py", site / "yaml" / "constructor.py"
    assert os.path.samefile(_theirs(prefix, shared), _ours(package / "__init__.py"))
    assert not _theirs(prefix, own).exists()
    import json.decoder  # the standard library is shared as it is

    assert os.path.samefile(_theirs(prefix, Path(json.decoder.__file__)), _ours(Path(json.decoder.__file__)))

    # A process of the release imports the package: the seeded .pyc is valid (not written again), its own file's
    # bytecode is compiled and written beside it.
    code = f"import sys; sys.path.insert(0, {str(site)!r}); import yaml; assert yaml.__file__.startswith(sys.path[0])"
    subprocess.run([sys.executable, "-c", code], env=run_environment(env / "bin" / "python"), check=True)
    assert os.path.samefile(_theirs(prefix, shared), _ours(package / "__init__.py"))
    assert _theirs(prefix, own).is_file()
    assert not os.path.samefile(_theirs(prefix, own), _ours(package / "constructor.py"))
