"""Unified diffs against the installed verl: our own reader and in-memory applier (no `patch` binary), so that
every failure is one line naming the diff, the file and the hunk.

A diff that does not apply as is is merged with the verl it was written against (plan/patch_base.py, plan/merge.py): a
conflict names the hunk and this verl's lines."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harness.errors import UsageError
from harness.paths import shown_path
from harness.plan.merge import Conflict, LineChange, merge
from harness.plan.patch_base import base_of, same_verl

# Files are handled as text so lines can be compared, but surrogateescape makes any bytes round-trip exactly.
ENCODING = ("utf-8", "surrogateescape")
_HUNK_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class DoesNotApply(UsageError):
    """A well-formed diff whose hunk finds no place in this verl: a fact about the verl a command runs on (an arm
    written for another verl), not bad input. The runner makes that arm's cells `skipped` rows naming the hunk;
    everything else still raises it as the one-line usage error it also is."""

    def __init__(self, patch: str, file: str, hunk: str | None, why: str, already_there: bool = False):
        # hunk None: the file itself is missing.
        super().__init__(f"{patch}: {hunk} does not apply to {file}: {why}" if hunk else f"{patch}: {file}: {why}")
        self.patch, self.file, self.hunk, self.why = patch, file, hunk, why
        # Every hunk of the failing file's diff finds its result already in place: this verl has that change.
        self.already_there = already_there


@dataclass
class _Hunk:
    number: int  # 1-based within its file, the way patch(1) counts
    header: str  # "@@ -l,s +l,s @@" without any trailing section text, for messages
    old_start: int
    old: list[str]  # context + removed lines, each with its line ending
    new: list[str]  # context + added lines
    kinds: str = ""  # ' ', '-' or '+' per line of the hunk, in order: which side each line went to


@dataclass
class _FileDiff:
    path: str  # "verl/..."
    create: bool
    delete: bool
    hunks: list[_Hunk]


def read_patch(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{shown_path(path)}: no such patch file") from None
    except OSError as e:
        raise UsageError(f"{shown_path(path)}: cannot read patch file ({e.strerror})") from None


def split_lines(text: str) -> list[str]:
    """The text's lines, each with its newline."""
    # Not str.splitlines: that also splits on \r, \f, \x1c..., which may sit inside a Python source line.
    *lines, tail = text.split("\n")
    return [line + "\n" for line in lines] + ([tail] if tail else [])


def _parse(text: str, label: str) -> list[_FileDiff]:
    lines = split_lines(text)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"  # a diff file missing its final newline; "\ No newline" is how a diff says that
    files: list[_FileDiff] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- "):
            if i + 1 == len(lines) or not lines[i + 1].startswith("+++ "):
                raise UsageError(f"{label}: line {i + 1}: '---' file header is not followed by a '+++' header")
            files.append(_file_header(line, lines[i + 1], label, i + 1))
            i += 2
        elif line.startswith("@@"):
            if not files:
                raise UsageError(f"{label}: line {i + 1}: hunk before any '---' / '+++' file header")
            i = _parse_hunk(lines, i, files[-1], label)
        else:
            i += 1  # description text, `diff --git` / `index` lines and the like
    if not files:
        raise UsageError(f"{label}: contains no changes (no '---' / '+++' file headers)")
    for f in files:
        if not f.hunks:
            raise UsageError(f"{label}: {f.path}: file header without any hunk")
    return files


def _file_header(old_line: str, new_line: str, label: str, lineno: int) -> _FileDiff:
    old = _header_path(old_line, label, lineno)
    new = _header_path(new_line, label, lineno + 1)
    if old is None and new is None:
        raise UsageError(f"{label}: line {lineno}: both file headers are /dev/null")
    if old is not None and new is not None and old != new:
        raise UsageError(f"{label}: line {lineno}: renames are not supported ({old} -> {new})")
    return _FileDiff(path=new or old, create=old is None, delete=new is None, hunks=[])


def _header_path(line: str, label: str, lineno: int) -> str | None:
    raw = header_name(line[4:], f"{label}: line {lineno}")
    if raw == "/dev/null":
        return None
    if raw.startswith(("a/", "b/")):
        raw = raw[2:]
    path = PurePosixPath(raw)
    if path.is_absolute() or path.parts[:1] != ("verl",) or len(path.parts) < 2 or ".." in path.parts:
        raise UsageError(
            f"{label}: line {lineno}: {raw!r} is not a path inside verl/ (accepted: "
            f"'verl/...', 'a/verl/...', 'b/verl/...'{_prefix_hint(raw)})"
        )
    return str(path)


# git's C-style quoting of a name (quote.c quote_c_style): these letters after a backslash, else three octal digits.
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def header_name(field: str, where: str) -> str:
    """The name a '---' / '+++' header gives after its 4 characters ("a/verl/x.py", "/dev/null"), read whole: git's
    quoted form decoded, else up to the tab before a timestamp (git ends a name that has a space with one)."""
    field = field.rstrip("\n")
    if field.startswith('"'):  # git quotes a name with a tab, a quote, a backslash or (core.quotePath) non-ASCII
        return unquoted_name(field, where)
    return field.split("\t", 1)[0].strip()


def unquoted_name(field: str, where: str) -> str:
    """The name a quoted header field (`"a/verl/\\303\\251.py"`, then perhaps a tab and a timestamp) holds, its
    bytes decoded as the diff's text is (utf-8, surrogateescape: any bytes stay themselves)."""
    out, i = bytearray(), 1
    while i < len(field) and field[i] != '"':
        char = field[i]
        if char != "\\":
            out += char.encode(*ENCODING)
            i += 1
            continue
        letter = field[i + 1 : i + 2]
        octal = field[i + 1 : i + 4]
        if letter in _C_ESCAPES:
            out.append(_C_ESCAPES[letter])
            i += 2
        elif len(octal) == 3 and all(c in "01234567" for c in octal) and int(octal, 8) < 256:
            out.append(int(octal, 8))
            i += 4
        else:
            raise UsageError(f"{where}: malformed quoted name {field!r} (a backslash before {letter!r})")
    if i == len(field):
        raise UsageError(f"{where}: quoted name {field!r} has no closing quote")
    return out.decode(*ENCODING)


def _prefix_hint(raw: str) -> str:
    """Where a header names verl's file under another first directory (`verl.orig/...`, `mine/verl/...`), the
    path it would have in an accepted form."""
    parts = PurePosixPath(raw).parts
    if ".." in parts or PurePosixPath(raw).is_absolute() and "verl" not in parts:
        return ""
    if "verl" in parts[1:]:
        return f"; did you mean 'verl/{'/'.join(parts[parts.index('verl', 1) + 1 :])}'?"
    if len(parts) > 1 and parts[0].startswith("verl"):
        return f"; did you mean 'verl/{'/'.join(parts[1:])}'?"
    return ""


def _parse_hunk(lines: list[str], i: int, file: _FileDiff, label: str) -> int:
    match = _HUNK_HEADER.match(lines[i])
    if not match:
        raise UsageError(f"{label}: line {i + 1}: malformed hunk header {lines[i].strip()!r}")
    old_count = 1 if match[2] is None else int(match[2])
    new_count = 1 if match[4] is None else int(match[4])
    hunk = _Hunk(len(file.hunks) + 1, match[0], int(match[1]), [], [])
    where = f"hunk #{hunk.number} ({hunk.header}) for {file.path}"
    header_line = i + 1
    last: list[list[str]] = []  # the sides the previous line went to, for a following "\ No newline"
    i += 1
    # The header's counts, not the look of the lines, say where a hunk ends: a removed "-- x" reads "--- x".
    while len(hunk.old) < old_count or len(hunk.new) < new_count or (i < len(lines) and lines[i][:1] == "\\"):
        if i == len(lines):
            raise UsageError(f"{label}: line {header_line}: {where} is cut short by the end of the diff")
        line = lines[i]
        kind, body = line[:1], line[1:]
        if line == "\n":  # an empty context line whose leading space an editor trimmed
            kind, body = " ", line
        if kind == "\\":
            if not last:
                raise UsageError(f"{label}: line {i + 1}: '\\' line with no diff line before it in {where}")
            for side in last:
                side[-1] = side[-1].removesuffix("\n")
        elif kind in (" ", "-", "+"):
            to_old, to_new = kind != "+", kind != "-"
            if (to_old and len(hunk.old) == old_count) or (to_new and len(hunk.new) == new_count):
                raise UsageError(f"{label}: line {i + 1}: {where} has more lines than its header counts")
            last = [side for side, used in ((hunk.old, to_old), (hunk.new, to_new)) if used]
            hunk.kinds += kind
            for side in last:
                side.append(body)
        else:
            raise UsageError(
                f"{label}: line {i + 1}: {where} is cut short (expected a ' ', '-', '+' or '\\' line, "
                f"got {line.rstrip()[:40]!r})"
            )
        i += 1
    file.hunks.append(hunk)
    return i


def patched_files(verl_dir: Path, diffs: list[tuple[Path, bytes]]) -> dict[str, str | None]:
    """Apply the diffs in order, in memory: {"verl/...": new text, or None where a diff deletes the file}."""
    return applied(verl_dir, diffs).files


@dataclass(frozen=True)
class Merge:
    """A diff carried onto this verl by a three-way merge (plan/merge.py) with the verl it was written against:
    the files so merged (the others applied as they are)."""

    against: str  # the base's words (plan/patch_base.py PatchBase.words)
    files: tuple[str, ...]


@dataclass
class Applied:
    files: dict  # {"verl/...": new text, or None where deleted}
    merges: dict  # {the diff as shown: Merge}, only for diffs a file of which was merged


def applied(verl_dir: Path, diffs: list[tuple[Path, bytes]]) -> Applied:
    """The diffs applied in order, and which of them were merged rather than applied as they are."""
    changed, merges = _applied(verl_dir, diffs)
    return Applied({path: text for path, (text, _) in changed.items()}, merges)


@dataclass(frozen=True)
class HunkOrigin:
    """A hunk of an arm's diffs, as the lines it leaves in the patched file name it."""

    diff: str  # the diff file as shown
    file: str  # "verl/..."
    number: int  # 1-based within its file in that diff
    header: str  # "@@ -l,s +l,s @@"


def changed_lines(verl_dir: Path, diffs: list[tuple[Path, bytes]]) -> dict[str, tuple[str, dict]]:
    """Per patched file ("verl/..."; a deleted one is left out): (its new text, {HunkOrigin: the 1-based line
    numbers of the patched file that hunk wrote}). The lines a hunk adds, or, for a hunk that only removes, the
    line that now stands where the removed ones were; a later diff of the arm moves or removes them."""
    out = {}
    for path, (text, origins) in _applied(verl_dir, diffs)[0].items():
        if text is None:
            continue
        by_hunk: dict[HunkOrigin, list[int]] = {}
        for number, origin in enumerate(origins, start=1):
            if origin is not None:
                by_hunk.setdefault(origin, []).append(number)
        out[path] = (text, by_hunk)
    return out


def _applied(verl_dir: Path, diffs: list[tuple[Path, bytes]]) -> tuple[dict[str, tuple[str | None, list]], dict]:
    """({"verl/...": (new text or None where deleted, per line of it the HunkOrigin that wrote it or None)},
    {the diff as shown: Merge} for the diffs carried onto this verl by a three-way merge)."""
    changed: dict[str, tuple[str | None, list]] = {}
    merges: dict[str, Merge] = {}
    for patch, blob in diffs:
        label = shown_path(patch)
        text_of_diff = blob.decode(*ENCODING)
        for file in _parse(text_of_diff, label):
            on_disk = verl_dir.parent / file.path
            if file.path in changed:  # an earlier diff of this arm already changed it
                text, origins = changed[file.path]
            else:
                text = on_disk.read_bytes().decode(*ENCODING) if on_disk.is_file() else None
                origins = None
            if file.create:
                if text is not None:
                    raise UsageError(f"{label}: {file.path}: cannot create it, it already exists ({on_disk})")
                text = ""
            elif text is None:
                raise DoesNotApply(label, file.path, None, f"no such file in this verl ({on_disk})")
            lines = split_lines(text)
            origins = list(origins) if origins is not None else [None] * len(lines)
            try:
                lines = _apply_hunks(lines, file, label, origins, HunkOrigin)
            except DoesNotApply as refused:
                base = base_of(label, patch, text_of_diff, verl_dir)
                if refused.already_there or file.create or same_verl(base, verl_dir):
                    raise  # nothing to merge with: the change is here already, or this verl is its own base
                lines, origins = _merged(file, label, base, lines, origins, refused)
                done = merges.get(label)
                merges[label] = Merge(base.words, (*(done.files if done else ()), file.path))
            if file.delete and lines:
                raise UsageError(f"{label}: {file.path}: the deletion does not cover the whole file")
            changed[file.path] = (None, []) if file.delete else ("".join(lines), origins)
    return changed, merges


def _merged(file: _FileDiff, label: str, base, ours: list[str], origins: list, refused: DoesNotApply):
    """(lines, origins) of this verl's file with the diff's changes to its base carried onto it (plan/merge.py);
    DoesNotApply naming the hunk and this verl's lines where they conflict."""
    blob = base.read(file.path)
    if blob is None:
        why = f"{refused.why}; and {base.words} has no such file to merge with"
        raise DoesNotApply(label, file.path, refused.hunk, why)
    base_lines = split_lines(blob.decode(*ENCODING))
    try:
        changes = _changes(base_lines, file, label)
    except DoesNotApply as exc:
        why = f"{refused.why}; nor does {exc.hunk} apply to {base.words}, which it is written against"
        raise DoesNotApply(label, file.path, refused.hunk, why) from None
    result = merge(base_lines, ours, origins, changes)
    if result.conflicts:
        raise DoesNotApply(label, file.path, *_conflict_words(result.conflicts, file, ours, base))
    return result.lines, result.tags


def _changes(base: list[str], file: _FileDiff, label: str) -> list[LineChange]:
    """The diff's changes to its own base, each a run of removed and added lines between context lines, placed
    where its hunk finds its lines in base (as _apply_hunks finds them, in base's own numbering)."""
    changes, shift, floor = [], 0, 0
    for hunk in file.hunks:
        stated = hunk.old_start - 1 if hunk.old else hunk.old_start
        at = _find(base, hunk.old, stated + shift, floor)
        if at is None:
            raise DoesNotApply(label, file.path, f"hunk #{hunk.number} ({hunk.header})", "its context was not found")
        shift, floor = at - stated, at + len(hunk.old)
        origin = HunkOrigin(label, file.path, hunk.number, hunk.header)
        mark = origin if "+" not in hunk.kinds else None  # a hunk that only removes marks where it removed
        old_at, new_at, run = at, 0, None
        for kind in hunk.kinds:
            if kind == " ":
                run = None
                old_at, new_at = old_at + 1, new_at + 1
                continue
            if run is None:
                run, mark = LineChange(old_at, old_at, [], [], hunk.number, mark), None
                changes.append(run)
            if kind == "-":
                old_at += 1
                run.end = old_at
            else:
                run.lines.append(hunk.new[new_at])
                run.tags.append(origin)
                new_at += 1
    return changes


def _conflict_words(conflicts: list[Conflict], file: _FileDiff, ours: list[str], base) -> tuple[str, str]:
    """(the hunk, why) of the first conflict: the hunk and this verl's lines it meets."""
    first = conflicts[0]
    hunk = file.hunks[first.hunk - 1]
    if first.ours_end > first.ours_start:
        span = first.ours_end - first.ours_start
        lines = f"line {first.ours_start + 1}" if span == 1 else f"lines {first.ours_start + 1}-{first.ours_end}"
        there = f"this verl's {lines} (`{ours[first.ours_start].strip()[:60]}`)"
    else:
        there = f"this verl's removal of lines {first.base_start + 1}-{first.base_end} of {base.words}"
    more = f" (and {len(conflicts) - 1} more conflict(s))" if len(conflicts) > 1 else ""
    why = f"it conflicts with {there} in a three-way merge against {base.words}{more}"
    return f"hunk #{hunk.number} ({hunk.header})", why


def _apply_hunks(lines: list[str], file: _FileDiff, label: str, origins: list, origin_of) -> list[str]:
    """The hunks applied to lines; origins (one per line, changed in step) gets origin_of(diff, file, number,
    header) on the lines each hunk writes, and keeps the earlier origin of its context lines."""
    out = list(lines)
    shift = 0  # how far the diff's line numbers are off by now: earlier hunks' growth plus the offset they needed
    floor = 0  # hunks apply in order, so a hunk may not match inside (or before) what an earlier one wrote
    for hunk in file.hunks:
        # With no old lines, the start number is the line to insert after, i.e. the 0-based insertion index.
        stated = hunk.old_start - 1 if hunk.old else hunk.old_start
        at = _find(out, hunk.old, stated + shift, floor)
        if at is None:
            why = "its context was not found"
            there = bool(hunk.new) and _find(out, hunk.new, stated + shift, floor) is not None
            if there:
                why += " (its result is already there: was the change applied already?)"
            # The change as a whole is there where every hunk's result is (its file's): not just this hunk's lines.
            whole = there and all(_find(out, h.new, 0, 0) is not None for h in file.hunks if h.new)
            raise DoesNotApply(label, file.path, f"hunk #{hunk.number} ({hunk.header})", why, whole)
        out[at : at + len(hunk.old)] = hunk.new
        origins[at : at + len(hunk.old)] = _new_origins(hunk, origins[at : at + len(hunk.old)], label, file, origin_of)
        shift = at - stated + len(hunk.new) - len(hunk.old)
        floor = at + len(hunk.new)
    return out


def _new_origins(hunk: _Hunk, old_origins: list, label: str, file: _FileDiff, origin_of) -> list:
    """The origins of a hunk's new side: its context lines keep theirs, its added lines are its own; a hunk that
    only removes marks the line that stands where the removed ones were (the last line, removed at the end)."""
    mine = origin_of(label, file.path, hunk.number, hunk.header)
    new, old_at, removed_at = [], 0, None
    for kind in hunk.kinds:
        if kind == " ":
            new.append(old_origins[old_at])
        elif kind == "+":
            new.append(mine)
        elif removed_at is None:
            removed_at = len(new)
        old_at += kind != "+"
    if mine not in new and removed_at is not None and new:
        new[min(removed_at, len(new) - 1)] = mine
    return new


def _find(lines: list[str], block: list[str], guess: int, floor: int) -> int | None:
    """Index of an exact match of block nearest to guess (like patch's offset search, without fuzz)."""
    last = len(lines) - len(block)
    if not block:  # nothing to match: a pure insertion goes where it says
        return guess if floor <= guess <= last else None
    for distance in range(max(guess - floor, last - guess) + 1):
        for at in (guess + distance, guess - distance):
            if floor <= at <= last and lines[at : at + len(block)] == block:
                return at
    return None
