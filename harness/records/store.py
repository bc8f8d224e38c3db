"""Records: one JSON object per run, appended as a line to a results file that only this invocation writes.

Each invocation gets a new file (results/<utc time>-<command>-<pid>.jsonl), so parallel invocations never
interleave, and every line is flushed and fsynced as soon as its run ends, so a killed invocation loses at most
the run in flight. Readers skip a last line cut short by a kill.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import threading
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from pydantic import ValidationError

from harness.errors import UsageError, first_error_line
from harness.paths import RESULTS_DIR, ROOT, verl_tree
from harness.records.history import ResultsText, history, read_text, split_address
from harness.records.results import SCHEMA_VERSION, Record
from harness.records.reuse_key import inputs_sha256, key_for


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
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


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


class ResultsFile:
    def __init__(self, command: str, directory: Path = RESULTS_DIR):
        directory.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        # "x" never overwrites; a clash (same command, process and second) takes the next suffix instead.
        for attempt in range(1000):
            suffix = f"-{attempt}" if attempt else ""
            self.path = directory / f"{stamp}-{command}-{os.getpid()}{suffix}.jsonl"
            try:
                self._fh = open(self.path, "x", encoding="utf-8")
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"{directory}: no free results file name for {stamp}-{command}")
        self._lock = threading.Lock()  # the runner's threads append as their runs finish
        self._lines = 0

    def append(self, record: Record) -> int:
        """Write the record as the file's next line; returns that line's number (from 1), which `FILE:N` names."""
        line = json.dumps(record.written(), sort_keys=True, default=str) + "\n"
        with self._lock:
            self._fh.write(line)
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._lines += 1
            return self._lines

    def close(self):
        self._fh.close()


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
    arm_fingerprint: dict,
    invocation: dict,
    device: str | None = None,
) -> Record:
    """Add what is needed to trust and rerun the record: the scenario as it ran (seed included, so `harness
    rerun` needs nothing but the record), versions, hashes, commit, time; and the schema it is written in. With
    the invocation's inputs digest and the device the cell was planned on, its reuse_key (records/reuse_key.py)."""
    spec = json.loads(scenario.model_dump_json())
    record.schema_version = SCHEMA_VERSION
    stamped = {
        "scenario_spec": spec,
        "versions": invocation["versions"],
        "harness_commit": invocation["harness_commit"],
        "host": invocation["host"],
        "command": invocation["command"],
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "scenario_file": str(scenario_file.relative_to(ROOT))
        if scenario_file and scenario_file.is_relative_to(ROOT)
        else (str(scenario_file) if scenario_file else None),
        "scenario_sha256": sha256_file(scenario_file) if scenario_file and scenario_file.is_file() else None,
        "arm_patches": arm_fingerprint.get("patches", []),
    }
    if invocation.get("verl_tree"):  # a verl source tree (VERL=PATH[@REF]) rather than the installed verl
        stamped["verl_tree"] = invocation["verl_tree"]
    key = key_for(spec, device, record.arm, stamped["arm_patches"], invocation)
    if key is not None:
        stamped["reuse_key"] = key
    for name, value in stamped.items():
        setattr(record.stamp, name, value)
    return record


def invocation_info(command: str) -> dict:
    return {
        "inputs_sha256": inputs_sha256(),
        "versions": package_versions(),
        "harness_commit": harness_commit(),
        "host": host_description(),
        "command": command,
        "started": time.time(),
        "verl_tree": verl_tree(),
    }


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


def records_mentioning(text: str, exclude: Path | None = None) -> list[Record]:
    """The records of the results history (records/history.py) whose line holds text (a diff's sha256), in other
    files than exclude; a line that does not read as a record is passed over (this is a look back, not a check)."""
    found = []
    for results in history():
        if exclude is not None and results.path.resolve() == Path(exclude).resolve():
            continue
        for number, line in results.lines():
            if text not in line:
                continue
            try:
                found.append(parse_record(json.loads(line), results.where(number)))
            except (json.JSONDecodeError, UsageError):
                continue
    return found
