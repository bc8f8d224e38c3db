"""The results history: the results files of a directory (results/ unless told), newest first, and each line of one
as a record's JSON, addressed `FILE:N` (its line, from 1). The one reader of it: plan/reuse.py (an earlier record
with the same inputs), plan/estimate.py (each cell's last duration on this host), records/store.py (one file's
records, one record by its address: rerun, report).

Files are named after the UTC time they were opened (records/store.py ResultsFile), so their names sort oldest
first. A line cut short by a kill (the last of a file whose command was killed mid-write) is no record and is
skipped; in the history every unreadable line is (a reader of the history must not stop on one), while a file
named on its own (`records`, strict) says which line of it is not a record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.paths import results_dir, shown_path
from harness.records.signing import MAC_FIELD


def results_files(directory: Path | None = None) -> list[Path]:
    """The directory's results files, newest first (none: an empty list, for a directory not made yet too)."""
    return sorted(Path(directory or results_dir()).glob("*.jsonl"), reverse=True)


def newest_results_file(directory: Path | None = None) -> Path:
    files = results_files(directory)
    if not files:
        raise UsageError("results/: no results file yet (run `make repro` first)")
    return files[0]


@dataclass
class ResultsText:
    """One results file's text, read once: its lines and its records' JSON, each with its line number."""

    path: Path
    text: str

    def where(self, number: int) -> str:
        """The address of line `number`: FILE:N, the file as messages show it."""
        return f"{shown_path(self.path)}:{number}"

    def lines(self, newest_first: bool = False) -> list[tuple[int, str]]:
        numbered = [(n, line) for n, line in enumerate(self.text.splitlines(), start=1) if line.strip()]
        return numbered[::-1] if newest_first else numbered

    def records(self, newest_first: bool = False, strict: bool = False) -> Iterator[tuple[int, dict]]:
        """(line number, the record's JSON in the nested shape of schema 4) per line. A line that is no JSON object
        is skipped; strict: only where it is the last line (cut short by a kill), elsewhere a UsageError naming it."""
        from harness.records.results import nested_shape

        numbered = self.lines()
        last = numbered[-1][0] if numbered else 0
        for number, line in numbered[::-1] if newest_first else numbered:
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                if strict and number != last:
                    raise UsageError(f"{self.path}:{number}: not a record (JSON lines): {exc}") from None
                continue
            if not isinstance(data, dict):
                if strict:
                    raise UsageError(
                        f"{self.path}:{number}: not a results file (JSON lines): a JSON {type(data).__name__}, not a "
                        "record"
                    )
                continue
            # The line's MAC (records/signing.py) is no field of the record: reuse checks it on the line itself.
            data.pop(MAC_FIELD, None)
            yield number, nested_shape(data)

    def unread(self) -> list[str]:
        """'FILE:N: not a record (why), left out' for each line that reads as no record (the last one cut short by a
        kill): what a reader that passes over such lines says of them."""
        out = []
        for number, line in self.lines():
            try:
                data = json.loads(line)
                why = "" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
            except json.JSONDecodeError as exc:
                why = f"{exc}; the line's {len(line)} characters: cut short"
            if why:
                out.append(f"{self.where(number)}: not a record ({why}), left out")
        return out


def read_text(path: Path) -> ResultsText:
    return ResultsText(Path(path), Path(path).read_text(encoding="utf-8"))


def history(directory: Path | None = None) -> Iterator[ResultsText]:
    """Every results file of the directory, newest first, read as it is reached (a reader that has found what it
    looks for stops reading older files); a file that cannot be read is passed over."""
    for path in results_files(directory):
        try:
            yield ResultsText(path, path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue


def split_address(ref: str) -> tuple[Path, int | None]:
    """'FILE:N' -> (FILE, N); 'FILE' -> (FILE, None)."""
    path_text, _, line = ref.rpartition(":")
    return (Path(path_text), int(line)) if line.isdigit() and path_text else (Path(ref), None)
