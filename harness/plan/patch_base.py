"""The verl a diff was written against: what plan/diffs.py merges it with (plan/merge.py) where it does not apply
as is to the verl a command runs on.

By default the installed verl, this project's (patches/ are written against it): in a verl tree's environment,
where `import verl` finds the tree's, plan/verl_trees.py's enter names the installed one in INSTALLED_VERL_ENV. A
diff may name another on a line of its description (above its first `---`):

    Written against: /src/verl@1dda039b9        (a checkout and a commit, branch or tag in it, as --verl takes)
    Written against: /src/verl                  (that checkout's files as they are on disk)

`harness patch diff` writes that line for a copy `patch start --verl PATH@REF` made. A relative PATH is read from
the diff's own directory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from harness import git
from harness.errors import UsageError
from harness.paths import INSTALLED_VERL_ENV

DECLARED = re.compile(r"^written against:[ \t]*(\S.*?)[ \t]*$", re.IGNORECASE | re.MULTILINE)
_FIRST_HEADER = re.compile(r"^(?:--- |diff --git )", re.MULTILINE)


@dataclass(frozen=True)
class PatchBase:
    """A verl whose files a merge reads: a package directory on disk, or a commit of a checkout."""

    words: str  # as a record and a line name it: "verl 0.9.1, the installed verl", "verl 0.10.0.dev0 at PATH@c0ffee"
    package: Path | None = None  # its verl/ directory on disk
    repo: Path | None = None  # or a git checkout's root and a commit there
    commit: str | None = None

    def read(self, rel: str) -> bytes | None:
        """The bytes of "verl/..." in this verl, None where it has no such file."""
        if self.commit is not None:
            return git.file_at(self.repo, self.commit, rel)
        path = self.package.parent / rel
        return path.read_bytes() if path.is_file() else None


def declared(text: str) -> str | None:
    """The `Written against:` of a diff's description, None where it names none."""
    head = _FIRST_HEADER.split(text, maxsplit=1)[0]
    found = DECLARED.search(head)
    return found[1] if found else None


def base_of(patch_label: str, patch: Path, text: str, verl_dir: Path) -> PatchBase:
    """The verl the diff was written against, to merge with where it does not apply to verl_dir as is."""
    spec = declared(text)
    if spec is None:
        installed = Path(os.environ.get(INSTALLED_VERL_ENV) or verl_dir)
        return PatchBase(f"verl {_version(installed)}, the installed verl", package=installed)
    where = f"{patch_label}: 'Written against: {spec}'"
    path, ref = spec, None
    if "@" in spec and not _resolved(patch, spec).is_dir():
        path, _, ref = spec.rpartition("@")
    root = _resolved(patch, path)
    if not root.is_dir():
        raise UsageError(f"{where}: no such directory {root}")
    if ref is None:
        if not (root / "verl" / "__init__.py").is_file():
            raise UsageError(f"{where}: {root} is not a verl checkout's root (no verl/__init__.py there)")
        return PatchBase(f"verl {_version(root / 'verl')} at {root}", package=root / "verl")
    commit = git.commit_of(root, ref)
    if commit is None:
        raise UsageError(f"{where}: {ref}: no such commit, branch or tag in {root}")
    version = (git.file_at(root, commit, "verl/version/version") or b"unknown").decode(errors="replace").strip()
    return PatchBase(f"verl {version} at {root}@{commit[:12]}", repo=root, commit=commit)


def same_verl(base: PatchBase, verl_dir: Path) -> bool:
    """Whether the base is the very verl the diff is applied to (nothing to merge with then)."""
    return base.package is not None and base.package.resolve() == verl_dir.resolve()


def _resolved(patch: Path, path: str) -> Path:
    return Path(path).expanduser() if Path(path).expanduser().is_absolute() else patch.parent / path


def _version(package: Path) -> str:
    try:
        return (package / "version" / "version").read_text().strip() or "unknown"
    except OSError:
        return "unknown"
