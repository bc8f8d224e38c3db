"""Arms: the installed verl package, either as is ("upstream") or with unified diffs applied to a cached copy.

A run of a patched arm puts materialise(arm) first on the workers' import path, so `import verl` finds the
copy; site-packages is never modified. Copies are built once per (verl, diffs), sealed read-only, and reused while
they are as built (plan/tree_seal.py: a copy a cell modified is built again); diffs.py applies them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.paths import CACHE_DIR as _CACHE_ROOT
from harness.paths import INSTALLED_VERL_ENV, PATCHES_DIR, shown_path
from harness.plan import tree_seal
from harness.plan.changed_code import changed_code, write_arc_lines
from harness.plan.diffs import ENCODING, applied, read_patch
from harness.plan.patch_lines import patch_hunks, write_watched
from harness.records.measures import ArmFingerprint, ArmPatch, Written

CACHE_DIR = _CACHE_ROOT / "arms"

UPSTREAM = "upstream"
# Part of the cache key: bump it when a change here would make the same inputs produce a different copy.
# 2: patch_lines.json beside the copy; 3: diffs merged with their base (arm.json says); 4: sealed
# (plan/tree_seal.py), compiled and read-only; 5: patch_arcs.json beside it too
_BUILD_FORMAT = b"arms-5"


@dataclass(frozen=True)
class Arm:
    name: str
    patches: tuple[Path, ...]


def known_arms() -> dict[str, Arm]:
    arms = {UPSTREAM: Arm(UPSTREAM, ())}
    for diff in sorted(PATCHES_DIR.glob("*.diff")):
        if diff.stem == UPSTREAM:
            raise UsageError(f"{shown_path(diff)}: the arm name '{UPSTREAM}' is reserved for the unpatched verl")
        arms[diff.stem] = Arm(diff.stem, (diff,))
    return arms


def resolve_arm(name: str) -> Arm:
    """An arm of patches/ by name, a diff by path, or several joined by '+' (one arm applying each in turn,
    e.g. `glm4v-vision+fsdp2-lmhead-forward-all`)."""
    parts = name.split("+")
    if len(parts) == 1:
        return _resolve_one(name)
    arms = [_resolve_one(p) for p in parts]
    if any(a.name == UPSTREAM for a in arms):
        raise UsageError(f"arm {name!r}: '{UPSTREAM}' is no diff to join with others")
    # Named by the parts' arm names (a diff path contributes its stem): a name is also a cache directory's.
    return Arm("+".join(a.name for a in arms), tuple(p for a in arms for p in a.patches))


def _resolve_one(name_or_path: str) -> Arm:
    arms = known_arms()
    if name_or_path in arms:
        return arms[name_or_path]
    path = Path(name_or_path)
    if not (path.suffix == ".diff" or len(path.parts) > 1 or path.exists()):
        raise UsageError(
            f"unknown arm {name_or_path!r}; known arms: {', '.join(arms)} (or give the path of a .diff file)"
        )
    if not path.exists():
        raise UsageError(f"{name_or_path}: no such patch file")
    if not path.is_file():
        raise UsageError(f"{name_or_path}: not a patch file (not a regular file)")
    path = path.resolve()
    # Results are labelled by arm name, so two different diffs must not share one.
    taken = arms.get(path.stem)
    if taken is not None and taken.patches != (path,):
        where = shown_path(taken.patches[0]) if taken.patches else "the unpatched verl"
        raise UsageError(f"{name_or_path}: arm name {path.stem!r} is already taken by {where}; rename the file")
    return Arm(path.stem, (path,))


def installed_verl_dir() -> Path:
    # find_spec locates the package without running it: importing verl is slow and drags in half its stack.
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(f"verl is not installed as a package for this Python ({sys.executable})")
    found = Path(next(iter(spec.submodule_search_locations))).resolve()
    # A materialised copy on the import path would become the base of every other arm, patching twice.
    if found.is_relative_to(CACHE_DIR.resolve()):
        raise UsageError(f"`import verl` resolves to a materialised arm ({found}); remove it from PYTHONPATH")
    return found


def materialise(arm: Arm) -> Path | None:
    """Directory D whose D/verl is the installed verl with the arm's diffs applied; None means use verl as is."""
    if not arm.patches:
        return None
    verl_dir = installed_verl_dir()
    # Read every diff once: the bytes hashed for the cache key are the very bytes applied.
    diffs = [(path, read_patch(path)) for path in arm.patches]
    target = CACHE_DIR / f"{arm.name}-{_cache_key(verl_dir, diffs)[:12]}"
    if target.is_dir():  # only complete builds, sealed, are ever renamed into place
        why = tree_seal.modified(target, target.name)
        if why is None:
            return target
        tree_seal.say_rebuilt(target, why)  # never used: a cell's code may have written it (plan/tree_seal.py)
        tree_seal.set_aside(target)
    done = applied(verl_dir, diffs)  # every diff must apply (or merge) before anything is written

    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=CACHE_DIR))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would otherwise stick to the cache entry
        # With its bytecode (make venv compiles it): copy2 keeps each source's mtime, which a .pyc is checked
        # against, so an unchanged module loads compiled and a patched one (a new mtime) is compiled afresh.
        shutil.copytree(verl_dir, tmp / "verl", ignore=_bytecode_in_flight)
        tree_seal.make_writable(tmp / "verl")  # a verl tree's environment is sealed read-only, and copytree keeps modes
        for rel, text in done.files.items():
            dest = tmp / rel
            if text is None:
                dest.unlink(missing_ok=True)  # missing if an earlier diff of this arm created it
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(text.encode(*ENCODING))
        _compile_patched(tmp, done.files)
        # The lines of the diffs that can run, for the ranks to watch (rank/measures/line_watch.py).
        hunks = patch_hunks(verl_dir, diffs)
        write_watched(tmp, hunks)
        write_arc_lines(tmp, changed_code(verl_dir, diffs, hunks))  # and the branches of them, for their arcs
        merged = {label: _Merged(against=m.against, files=list(m.files)) for label, m in done.merges.items()}
        fingerprint = arm_fingerprint(arm)
        copy = _ArmCopy(name=fingerprint.name, patches=fingerprint.patches, merged=merged)
        copy.verl_version, copy.verl_dir = _verl_version(), str(verl_dir)
        (tmp / "arm.json").write_text(copy.model_dump_json(indent=2, exclude_unset=True) + "\n")
        tree_seal.seal(tmp, target.name, tmp / "verl")  # compiled, hashed, read-only: checked before each reuse
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
            # Another process finished the same build first; its copy is identical, so keep that one.
            tree_seal.remove(tmp)
    except BaseException:
        tree_seal.remove(tmp)
        raise
    return target


def _compile_patched(copy: Path, files: dict):
    """Bytecode for each Python file the diffs wrote, beside it (compiling runs none of its code): a sandboxed rank
    cannot write it into the copy (read-only there), and no rank does where PYTHONDONTWRITEBYTECODE is set, so
    each cell compiled the patched modules again. One that does not compile is left to the rank, which reports it
    as the cell's error."""
    import py_compile

    for rel, text in files.items():
        if text is not None and rel.endswith(".py"):
            try:
                py_compile.compile(str(copy / rel), doraise=True)
            except py_compile.PyCompileError:
                pass


def _bytecode_in_flight(directory: str, names: list[str]) -> list[str]:
    """copytree's ignore: the files of a __pycache__ that are not (yet) a .pyc. The venv's processes write their
    bytecode (make venv's .pth), each as <name>.pyc.<number> renamed into place, so such a file may be gone by the
    time the copy reaches it."""
    if os.path.basename(directory) != "__pycache__":
        return []
    return [name for name in names if not name.endswith(".pyc")]


def arm_fingerprint(arm: Arm) -> ArmFingerprint:
    """The arm's name and each diff it applies: its path, its sha256 and its whole text, so that a record
    stands on its own (`harness rerun` materialises the arm from the text when the file is gone)."""
    patches = []
    for p in arm.patches:
        blob = read_patch(p)
        patches.append(
            ArmPatch(file=shown_path(p), sha256=hashlib.sha256(blob).hexdigest(), text=blob.decode(*ENCODING))
        )
    return ArmFingerprint(name=arm.name, patches=patches)


class _Merged(Written):
    """A diff of the copy carried by a three-way merge: the verl it merged against, the files merged."""

    against: str
    files: list[str]


class _ArmCopy(ArmFingerprint):
    """A copy's arm.json: its fingerprint, the verl it was made from, and each diff merged rather than applied."""

    verl_version: str | None = None
    verl_dir: str | None = None
    merged: dict[str, _Merged] = {}


def merged_into(fingerprint: ArmFingerprint, arm_dir: Path | None) -> ArmFingerprint:
    """The fingerprint with, on each diff that its copy (arm_dir) carries by a three-way merge rather than as it
    is, what it merged against and which files: the record says "merged" (records/measures.py ArmPatch)."""
    merged = _ArmCopy.model_validate_json((arm_dir / "arm.json").read_text()).merged if arm_dir else {}
    for patch in fingerprint.patches:
        if patch.file in merged:
            patch.merged_against = merged[patch.file].against
            patch.merged_files = merged[patch.file].files
    return fingerprint


def merge_lines(fingerprint: ArmFingerprint) -> list[str]:
    """A line per diff of the arm carried onto this verl by a merge: which files, against which verl."""
    return [
        f"{fingerprint.name}: {p.file} merged onto this verl ({', '.join(p.merged_files)}), three-way "
        f"against {p.merged_against}"
        for p in fingerprint.patches
        if p.merged_against
    ]


def patch_from_text(text: str, sha256: str, name: str, where: str) -> Path:
    """A record's stored diff written back to a file (under the cache, named as it was, so the arm keeps its
    name), after checking that the text is what was hashed. where: the record, for the one-line error."""
    blob = text.encode(*ENCODING)
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise UsageError(f"{where}: field 'stamp.arm_patches': the stored text of {name} does not match its sha256")
    directory = _CACHE_ROOT / "record-patches" / sha256[:16]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / Path(name).name
    if not path.is_file() or path.read_bytes() != blob:
        tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    return path


def _verl_version() -> str:
    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _cache_key(verl_dir: Path, diffs: list[tuple[Path, bytes]]) -> str:
    digest = hashlib.sha256()
    # The verl a diff without a `Written against:` line merges with (plan/patch_base.py): the installed one.
    installed = os.environ.get(INSTALLED_VERL_ENV, "").encode()
    parts = (_BUILD_FORMAT, _verl_version().encode(), str(verl_dir).encode(), installed, *(blob for _, blob in diffs))
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))  # length prefixes keep the concatenation unambiguous
        digest.update(part)
    return digest.hexdigest()
