"""Records: one JSON object per run, appended as a line to a results file that only this invocation writes.

Each invocation gets a new file (results/<utc time>-<command>-<pid>.jsonl), so parallel invocations never
interleave, and every line is written in one write and fsynced as soon as its run ends, so a killed invocation loses
at most the run in flight. A line is whole or absent: where its write fails (a full disk), the file is cut back to
what it held before it and the run stops with one line naming the file (`RecordNotWritten`); a results directory
that cannot be written, or has no room for one record, is that line before any cell runs. Readers skip a last line
cut short by a kill (`make report` names it).

Stamping a record (stamp_record) is here too; reading one file's records back, of any schema, goes through
records/history.py.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform
import shutil
import subprocess
import threading
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from pydantic import ValidationError

from harness import git
from harness.errors import UsageError, first_error_line
from harness.paths import ROOT, results_dir, shown_path
from harness.records.history import ResultsText, history, read_text, split_address
from harness.records.measures import ArmFingerprint
from harness.records.results import SCHEMA_VERSION, Record, VerlTree
from harness.records.reuse_key import Invocation, inputs_sha256, key_for
from harness.records.signing import MAC_FIELD, record_state, signed_record


def package_versions() -> dict:
    versions = {"python": platform.python_version()}
    for name in ("torch", "transformers", "verl"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def harness_commit() -> str | None:
    try:
        out = git.run(ROOT, "rev-parse", "--short=12", "HEAD", timeout=10)
        dirty = git.run(ROOT, "status", "--porcelain", "--untracked-files=no", timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.code != 0:
        return None
    return out.text().strip() + ("-dirty" if dirty.text().strip() else "")


def host_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# The room results/ must have for one more record: a record's line is 25-30 KB for a one-step cell (direct-compile,
# fsdp2-multigpu), more with an update's steps and warnings; a directory with less is full before any cell runs.
RECORD_ROOM = 256 * 1024


class RecordNotWritten(UsageError):
    """A record's line could not be written whole (a full disk): the results file is as it was before that line."""


class ResultsFile:
    def __init__(self, command: str, directory: Path | None = None):
        directory = Path(directory or results_dir())
        try:
            directory.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(directory).free
        except OSError as exc:
            raise UsageError(f"{shown_path(directory)}: results cannot be written there: {_why(exc)}") from None
        if free < RECORD_ROOM:
            raise UsageError(
                f"{shown_path(directory)}: no room for results: {free // 1024} KiB free, a record takes up to "
                f"{RECORD_ROOM // 1024} KiB"
            )
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        # O_EXCL never overwrites; a clash (same command, process and second) takes the next suffix instead.
        for attempt in range(1000):
            suffix = f"-{attempt}" if attempt else ""
            self.path = directory / f"{stamp}-{command}-{os.getpid()}{suffix}.jsonl"
            try:
                self._out = LineOut(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o666))
                break
            except FileExistsError:
                continue
            except OSError as exc:
                raise UsageError(f"{shown_path(self.path)}: results cannot be written there: {_why(exc)}") from None
        else:
            raise UsageError(f"{shown_path(directory)}: no free results file name for {stamp}-{command}")
        self._lock = threading.Lock()  # the runner's threads append as their runs finish
        self._lines = 0
        self._size = 0  # the bytes of the file's complete lines

    def append(self, record: Record) -> int:
        """Write the record as the file's next line, whole or not at all; returns that line's number (from 1), which
        `FILE:N` names. RecordNotWritten where it could not be (the file is left as it was before it)."""
        # Signed with the driver's key (records/signing.py): reuse takes only lines this driver wrote.
        data = (json.dumps(signed_record(record.written()), sort_keys=True, default=str) + "\n").encode("utf-8")
        with self._lock:
            try:
                write_whole(self._out, data, self._size)
            except OSError as exc:
                raise RecordNotWritten(
                    f"{shown_path(self.path)}: record {self._lines + 1} not written ({_why(exc)}); the file keeps "
                    f"its {self._lines} complete record(s) and the run stops"
                ) from None
            self._size += len(data)
            self._lines += 1
            return self._lines

    def close(self):
        self._out.close()


class LineOut:
    """The results file's descriptor, as write_whole uses it (a test hands write_whole one that fails)."""

    def __init__(self, fd: int):
        self.fd = fd

    def write(self, data: bytes) -> int:
        return os.write(self.fd, data)

    def sync(self) -> None:
        os.fsync(self.fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def write_whole(out, data: bytes, size: int) -> None:
    """data appended to a file of `size` bytes in one write and synced; a short write or any error (ENOSPC, EDQUOT,
    EIO) cuts the file back to `size`, as it was, and raises OSError. Where the cut fails too, the error says so (a
    reader then names the partial line)."""
    try:
        written = out.write(data)
        if written != len(data):
            raise OSError(errno.ENOSPC, f"{written} of the line's {len(data)} bytes written: no room for the rest")
        out.sync()
    except OSError as exc:
        try:
            out.truncate(size)
        except OSError as cut:
            raise OSError(exc.errno, f"{_why(exc)}; and the partial line could not be cut off: {_why(cut)}") from None
        raise


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def read_records(path: Path) -> list[Record]:
    """All complete records of a results file; a trailing line cut short by a kill is skipped (records/history.py)."""
    return [record for _, record in numbered_records(read_text(path))]


def numbered_records(text: ResultsText) -> list[tuple[int, Record]]:
    """(line, record) of a results file's text, strictly: a line that is not a record, but the last, names itself."""
    return [(n, parse_record(data, f"{text.path}:{n}")) for n, data in text.records(strict=True)]


def parse_record(data, where: str) -> Record:
    """One record from its JSON data; a record that does not fit the model is one line naming where and the field."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: not a results file (JSON lines): a JSON {type(data).__name__}, not a record")
    try:
        return Record.model_validate(data)
    except ValidationError as exc:
        raise UsageError(first_error_line(where, exc, top="record")) from None


def stamp_record(
    record: Record,
    *,
    scenario,
    scenario_file: Path | None,
    arm_fingerprint: ArmFingerprint,
    invocation: Invocation,
    device: str | None = None,
) -> Record:
    """Add what is needed to trust and rerun the record: the scenario as it ran (seed included, so `harness
    rerun` needs nothing but the record), versions, hashes, commit, time; and the schema it is written in. With
    the invocation's inputs digest and the device the cell was planned on, its reuse_key (records/reuse_key.py)."""
    spec = json.loads(scenario.model_dump_json())
    record.schema_version = SCHEMA_VERSION
    stamped = {
        "scenario_spec": spec,
        "versions": invocation.versions,
        "harness_commit": invocation.harness_commit,
        "host": invocation.host,
        "command": invocation.command,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "scenario_file": str(scenario_file.relative_to(ROOT))
        if scenario_file and scenario_file.is_relative_to(ROOT)
        else (str(scenario_file) if scenario_file else None),
        "scenario_sha256": sha256_file(scenario_file) if scenario_file and scenario_file.is_file() else None,
        "arm_patches": arm_fingerprint.patches,
    }
    if invocation.verl_tree:  # a verl source tree (VERL=PATH[@REF]) rather than the installed verl
        stamped["verl_tree"] = invocation.verl_tree
    key = key_for(spec, device, record.arm, stamped["arm_patches"], invocation)
    if key is not None:
        stamped["reuse_key"] = key
    for name, value in stamped.items():
        setattr(record.stamp, name, value)
    return record


def invocation_info(command: str) -> Invocation:
    return Invocation(
        inputs_sha256=inputs_sha256(),
        versions=package_versions(),
        harness_commit=harness_commit(),
        host=host_description(),
        command=command,
        started=time.time(),
        verl_tree=VerlTree.of_this_command(),
    )


def load_records(path: Path) -> list[Record]:
    """Records of one results file: JSON lines (results/*.jsonl) or the JSON list that `--json OUT` writes."""
    return [record for _, record in _numbered_file(Path(path))]


def _numbered_file(path: Path) -> list[tuple[int, Record]]:
    """(N, record) of a results file, N as `FILE:N` names it: the line of a JSON-lines file, the place in a list."""
    if not path.is_file():
        raise UsageError(f"{path}: no such results file")
    try:
        text = read_text(path)
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a results file (JSON lines): {exc}") from None
    if text.text.lstrip().startswith("["):
        try:
            listed = json.loads(text.text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not a results file (JSON lines): {exc}") from None
        numbered = [(i + 1, parse_record(data, f"{path}:{i + 1}")) for i, data in enumerate(listed)]
    else:
        numbered = numbered_records(text)
    if not numbered:
        raise UsageError(f"{path}: holds no records")
    return numbered


def unread_lines(paths: list[Path]) -> list[str]:
    """Each line of these results files (JSON lines) that is no record, named (history.py ResultsText.unread)."""
    out = []
    for path in paths:
        text = read_text(path)
        if not text.text.lstrip().startswith("["):
            out.extend(text.unread())
    return out


def load_record(ref: str) -> Record:
    """FILE (its last record) or FILE:N (the record on line N, from 1) of a results file."""
    path, line = split_address(ref)
    numbered = _numbered_file(path)
    if line is None:
        return numbered[-1][1]
    found = [record for n, record in numbered if n == line]
    if not found:
        raise UsageError(f"{ref}: record {line} does not exist ({len(numbered)} in the file)")
    return found[0]


def mac_state(ref: str) -> str:
    """records/signing.py's record_state of the record FILE[:N] names, read from its line as written: 'signed',
    'unsigned' (a `--json OUT` list is never signed) or 'forged'. Call after load_record has found it."""
    path, line = split_address(ref)
    text = read_text(path)
    if text.text.lstrip().startswith("["):
        return "unsigned"
    numbered = dict(text.lines())
    try:
        data = json.loads(numbered[line] if line is not None else text.lines()[-1][1])
    except (KeyError, IndexError, json.JSONDecodeError):
        return "unsigned"
    return record_state(data) if isinstance(data, dict) else "unsigned"


def records_mentioning(text: str, exclude: Path | None = None) -> list[Record]:
    """The records of the results history (records/history.py) whose line holds text (a diff's sha256), in other
    files than exclude; a line that does not read as a record is passed over (this is a look back, not a check), and
    so is one this driver did not write (its MAC does not verify, records/signing.py): what earlier cells ran is
    taken only from the harness's own records."""
    found = []
    for results in history():
        if exclude is not None and results.path.resolve() == Path(exclude).resolve():
            continue
        for number, line in results.lines():
            if text not in line:
                continue
            try:
                data = json.loads(line)
                if isinstance(data, dict) and record_state(data) == "signed":
                    data.pop(MAC_FIELD)
                    found.append(parse_record(data, results.where(number)))
            except (json.JSONDecodeError, UsageError):
                continue
    return found
