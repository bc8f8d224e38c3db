"""patch start DIR / patch diff DIR: a patch from an edited copy of the installed verl, in place of a shell recipe.

`start` copies the installed verl (its sources, no bytecode) to DIR/verl and marks DIR as such a copy; the user
edits files under DIR/verl; `diff` prints the unified diff of DIR/verl against the installed verl, paths
a/verl/... and b/verl/..., which is what `verify --patch` reads (plan/diffs.py). The installed verl is never
modified (arms are built from copies: plan/arms.py), so it is the clean original to compare with.

`patch start --verl PATH@REF DIR` copies that tree's verl instead (the command runs in the tree's environment,
plan/verl_trees.py, where it is the verl installed); `diff` then compares with it and writes above the diff the
line `Written against: PATH@COMMIT`, so that on another verl the patch is merged with that tree's files
(plan/patch_base.py).
"""

from __future__ import annotations

import difflib
import shutil
import sys
from pathlib import Path

from harness.errors import EXIT_OK, UsageError
from harness.plan.arms import installed_verl_dir
from harness.plan.diffs import ENCODING, split_lines
from harness.records.measures import Written
from harness.records.results import VerlTree

MARKER = ".harness-patch.json"  # in DIR: what it is a copy of
_SKIP = ("__pycache__", "*.pyc")


class _Copy(Written):
    """DIR/MARKER: the verl package DIR/verl is a copy of, and the tree it is of (None: the installed verl)."""

    copy_of: str
    verl_tree: VerlTree | None = None


def cmd_patch(args) -> int:
    return {"start": _start, "diff": _diff}[args.action](Path(args.dir))


def _start(where: Path) -> int:
    if where.exists():
        raise UsageError(f"{where}: exists; `patch start` makes a new copy (pick a new directory)")
    verl, tree = installed_verl_dir(), VerlTree.of_this_command()
    shutil.copytree(verl, where / "verl", ignore=shutil.ignore_patterns(*_SKIP))
    (where / MARKER).write_text(_Copy(copy_of=str(verl), verl_tree=tree).model_dump_json(indent=1) + "\n")
    on = f" --verl {tree.spec}" if tree else ""
    print(f"{where / 'verl'}: a copy of {_words(tree)} ({verl}); edit it, then:")
    print(f"  python -m harness patch diff {where} > fix.diff && python -m harness verify{on} --patch fix.diff")
    return EXIT_OK


def _words(tree: VerlTree | None) -> str:
    return f"verl {tree.version} from {tree.spec}" if tree else "the installed verl"


def _diff(where: Path) -> int:
    marker = where / MARKER
    if not marker.is_file() or not (where / "verl").is_dir():
        raise UsageError(f"{where}: not a copy made by `python -m harness patch start {where}`")
    try:
        made = _Copy.model_validate_json(marker.read_text())
    except ValueError:  # pydantic's ValidationError is one
        raise UsageError(f"{marker}: not the marker `python -m harness patch start` writes") from None
    original, tree = Path(made.copy_of), made.verl_tree
    if tree is None and original != installed_verl_dir():
        raise UsageError(f"{where}: a copy of {original}, not of the installed verl ({installed_verl_dir()})")
    if tree is not None and not original.is_dir():
        raise UsageError(
            f"{where}: a copy of {_words(tree)}, whose files ({original}) are gone: "
            f"python -m harness patch diff --verl {tree.spec} {where}"
        )
    text = verl_diff(original, where / "verl")
    if not text:
        raise UsageError(f"{where / 'verl'}: no file differs from {_words(tree)}")
    if tree is not None:  # what a merge onto another verl reads (plan/patch_base.py)
        text = f"A patch of {_words(tree)}.\nWritten against: {tree.spec}\n\n{text}"
    # The diff's bytes as they are (a file's \r, \f or a byte that is not UTF-8 included), past the terminal's
    # escaping (render/untrusted.py TerminalStream): it is redirected into a file to be applied.
    sys.stdout.flush()
    sys.stdout.buffer.write(text.encode(*ENCODING))
    sys.stdout.buffer.flush()
    return EXIT_OK


def _sources(root: Path) -> dict[str, Path]:
    """Every file under root by its path relative to root's parent ("verl/..."), bytecode left out."""
    return {
        f"verl/{p.relative_to(root).as_posix()}": p
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def _lines(path: Path | None) -> list[str]:
    """The file's lines, each with its newline, split as plan/diffs.py splits the files it patches."""
    return [] if path is None else split_lines(path.read_bytes().decode(*ENCODING))


def verl_diff(original: Path, edited: Path) -> str:
    """The unified diff that turns `original` (a verl package directory) into `edited`, file by file."""
    old, new = _sources(original), _sources(edited)
    out = []
    for rel in sorted(set(old) | set(new)):
        a, b = _lines(old.get(rel)), _lines(new.get(rel))
        if a == b:
            continue
        lines = difflib.unified_diff(
            a, b, f"a/{rel}" if rel in old else "/dev/null", f"b/{rel}" if rel in new else "/dev/null", n=3
        )
        for line in lines:
            # A last line without a newline is marked the way diff(1) marks it.
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)
