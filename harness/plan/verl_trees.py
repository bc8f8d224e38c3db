"""A verl source tree as the verl a command runs on: `VERL=PATH` (a verl checkout's root, as it is on disk) or
`VERL=PATH@REF` (a commit, branch or tag inside that checkout's git repository), on every command.

The tree gets an environment of its own under .cache/verl-trees/<key>/, built once, sealed read-only and reused while
it is as built (plan/tree_seal.py: one a cell's code modified is built again, never used): a venv whose own
site-packages holds the tree's `verl` package (with a dist-info of the tree's version, so records and reuse keys
name it) and reaches every other package through this project's venv (a .pth calling site.addsitedir). So it has
the same pins as `make venv` (constraints.txt) and verl from the tree, as `make releases` has verl from a release;
a tree that needs other versions of torch or transformers than constraints.txt pins is not what this judges. The
key is the commit (PATH@REF) or a digest of the tree's verl/ files (PATH as it is on disk, edits included).

A tree whose verl/ is byte for byte the installed verl needs no environment: the command runs here, as it would
without VERL (a pull request whose base is the installed release, say). One that is byte for byte a release whose
environment `make releases` built runs in that environment (with that release's pins).

The command then runs again, unchanged, with that environment's python (enter), the tree named in
HARNESS_VERL_TREE for the records' stamp (records/store.py).
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from harness import git
from harness.errors import UsageError
from harness.paths import CACHE_DIR, INSTALLED_VERL_ENV
from harness.paths import VERL_SPEC_ENV as SPEC_ENV
from harness.paths import VERL_TREE_ENV as TREE_ENV
from harness.plan import tree_seal
from harness.records.results import VerlTree

TREES_DIR = CACHE_DIR / "verl-trees"
# Part of the key: bump it when a change here would build a different environment from the same tree.
_BUILD_FORMAT = "verl-tree-1"  # the seal (plan/tree_seal.py) keeps the key: an older tree is resealed by a rebuild


def parse_spec(spec: str) -> tuple[Path, str | None]:
    """PATH or PATH@REF; '@' belongs to PATH where the whole spec is an existing directory."""
    where = f"VERL={spec}"
    path, ref = Path(spec), None
    if not path.is_dir() and "@" in spec:
        head, _, ref = spec.rpartition("@")
        path = Path(head)
        if not ref:
            raise UsageError(f"{where}: nothing after '@' (PATH@REF names a commit, branch or tag of PATH)")
    if not path.is_dir():
        raise UsageError(f"{where}: no such directory {path}")
    if not (path / "verl" / "__init__.py").is_file() and ref is None:
        raise UsageError(f"{where}: {path} is not a verl checkout's root (no verl/__init__.py there)")
    return path.resolve(), ref


def source_files(path: Path, ref: str | None) -> dict[str, bytes]:
    """{"verl/...": bytes} of the tree's verl package: at REF (git archive), or on disk (no bytecode)."""
    if ref is None:
        files = {}
        for f in sorted((path / "verl").rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                files[f.relative_to(path).as_posix()] = f.read_bytes()
        return files
    done = git.run(path, "archive", "--format=tar", _commit(path, ref), "verl")
    if done.code != 0:
        raise UsageError(f"VERL={path}@{ref}: no verl/ directory at {ref}: {done.err.strip()}")
    files = {}
    with tarfile.open(fileobj=io.BytesIO(done.out)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                files[member.name] = tar.extractfile(member).read()
    if "verl/__init__.py" not in files:
        raise UsageError(f"VERL={path}@{ref}: no verl/__init__.py at {ref}: not a verl tree there")
    return files


def _commit(path: Path, ref: str) -> str:
    commit = git.commit_of(path, ref)
    if commit is None:
        why = "no such commit, branch or tag there" if git.is_repository(path) else "not a git repository"
        raise UsageError(f"VERL={path}@{ref}: {ref}: {why}")
    return commit


def resolve(spec: str) -> tuple[VerlTree, dict[str, bytes]]:
    """The tree a spec names, and its verl package's files."""
    path, ref = parse_spec(spec)
    files = source_files(path, ref)
    commit, dirty = None, False
    if ref is not None:
        commit = _commit(path, ref)
    else:
        commit = git.commit_of(path, "HEAD")
        if commit is not None:
            dirty = bool(git.run(path, "status", "--porcelain", "--", "verl").out.strip())
    version = files.get("verl/version/version", b"unknown").decode(errors="replace").strip() or "unknown"
    key = f"{version}-{commit[:12]}" if ref is not None else f"{version}-tree-{files_digest(files)[:12]}"
    return VerlTree(path=str(path), ref=ref, commit=commit, dirty=dirty, version=version, key=key), files


def files_digest(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256(_BUILD_FORMAT.encode())
    for name in sorted(files):
        for part in (name.encode(), files[name]):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return digest.hexdigest()


def same_as_installed(files: dict[str, bytes], verl_dir: Path) -> bool:
    """Whether the tree's verl package is the installed one, file for file (bytecode aside)."""
    installed = {}
    for f in verl_dir.rglob("*"):
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
            installed[(Path("verl") / f.relative_to(verl_dir)).as_posix()] = f
    if installed.keys() != files.keys():
        return False
    return all(installed[name].read_bytes() == blob for name, blob in files.items())


def ensure_env(tree: VerlTree, files: dict[str, bytes]) -> Path:
    """The python of the tree's environment, built once (a complete build, sealed, is renamed into place) and
    reused while it is as it was built (plan/tree_seal.py); one modified since is set aside and built again."""
    env = TREES_DIR / tree.key
    python = env / "bin" / "python"
    if (env / ".complete").is_file():
        why = tree_seal.modified(env, env.name)
        if why is None:
            # One built before environments were made readable to others kept mkdtemp's 0700 (its files are as
            # sealed: only its mode is set here), which a sandboxed cell running as nobody could not enter.
            if env.stat().st_mode & 0o005 != 0o005:
                os.chmod(env, 0o755)
            return python
        tree_seal.say_rebuilt(env, why)  # never used: a cell's code may have written it
        tree_seal.set_aside(env)
    TREES_DIR.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{tree.key}.", dir=TREES_DIR))
    try:
        # mkdtemp's 0700 would stick to the environment, which a sandboxed cell (nobody, under a root driver:
        # docs/SANDBOX.md) must read.
        os.chmod(tmp, 0o755)
        base = getattr(sys, "_base_executable", sys.executable)
        done = subprocess.run(
            [base, "-m", "venv", "--without-pip", str(tmp)], capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            raise UsageError(f"VERL={tree.path}: creating its environment failed: {done.stderr.strip()[-300:]}")
        _fill_site(_site_packages(tmp), tree, files)
        (tmp / ".complete").write_text(tree.model_dump_json(indent=1) + "\n")
        tree_seal.seal(tmp, tree.key, _site_packages(tmp))  # compiled, hashed, read-only: checked before each reuse
        try:
            os.rename(tmp, env)
        except OSError:
            if not (env / ".complete").is_file():
                raise
            tree_seal.remove(tmp)  # another command built the same tree first
    except BaseException:
        tree_seal.remove(tmp)
        raise
    return python


def _site_packages(env: Path) -> Path:
    return env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _fill_site(site: Path, tree: VerlTree, files: dict[str, bytes]):
    """The tree's verl package, its dist-info (name, version, RECORD: what importlib.metadata and the reuse key
    read) and the .pth that reaches this project's venv, after the tree's own site-packages on sys.path."""
    import sysconfig

    for name, blob in files.items():
        dest = site / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(blob)
    info = site / f"verl-{tree.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: verl\nVersion: {tree.version}\n")
    (info / "INSTALLER").write_text("fsdp2-harness verl tree\n")
    record = [f"{name},," for name in sorted(files)] + [f"{info.name}/{n},," for n in ("METADATA", "INSTALLER")]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    # addsitedir, not a plain path line: the venv's own .pth files (bytecode writing) must run there too.
    purelib = sysconfig.get_paths()["purelib"]
    (site / "fsdp2_harness_venv.pth").write_text(f"import site; site.addsitedir({purelib!r})\n")


def release_env(tree: VerlTree, files: dict[str, bytes]) -> Path | None:
    """The python of `make releases`' environment of the tree's version (plan/release_envs.py), where one is built
    and its installed verl is the tree's, file for file: a release's own pins (numpy<2 for 0.8.0, transformers 4 for
    0.7.x) rather than this project's. None otherwise (none is built here: that takes the registry and minutes)."""
    from harness.plan.release_envs import ENVS_DIR, installed_verl

    env = ENVS_DIR / f"verl-{tree.version}"
    python = env / "bin" / "python"
    if not (python.exists() and any(env.glob(".installed-*"))):
        return None
    return python if same_as_installed(files, installed_verl(python)) else None


def port_words(tree: VerlTree | None) -> str:
    """How to make a patch for this verl (for one that does not apply to it): `harness patch` on it."""
    on = f" --verl {tree.spec}" if tree else ""
    return f"python -m harness patch start{on} DIR, edit DIR/verl, python -m harness patch diff DIR > fix.diff"


def enter(spec: str, argv: list[str]) -> int | None:
    """Run this command again on the tree's verl: in the tree's environment (built if need be), or here where the
    tree is the installed verl (None: go on in this process). Never returns otherwise (exec)."""
    from harness.plan.arms import installed_verl_dir

    tree, files = resolve(spec)
    info = tree.model_dump_json()
    if same_as_installed(files, installed_verl_dir()):
        os.environ[TREE_ENV] = info
        os.environ.pop(SPEC_ENV, None)
        return None
    python = release_env(tree, files) or ensure_env(tree, files)
    print(f"verl: {tree.version} from {tree.path}{'@' + tree.ref if tree.ref else ''} ({python.parent.parent})")
    env = {k: v for k, v in os.environ.items() if k != SPEC_ENV}
    env[TREE_ENV] = info
    # What the project's patches are written against, which `import verl` no longer finds there (plan/patch_base.py).
    env.setdefault(INSTALLED_VERL_ENV, str(installed_verl_dir()))
    sys.stdout.flush()
    os.execve(str(python), [str(python), "-m", "harness", *argv], env)
    return None  # not reached
