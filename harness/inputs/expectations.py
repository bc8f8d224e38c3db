"""Expected outcomes per scenario x arm (scenarios/expectations.yaml) and the check of a record against them.

An expectation names the outcome, and may pin where it shows: the error's class (records/error_classes.py, the
same on every device), a substring of the error (type, message or root cause) in words every device says alike,
or the parameters whose gradients must be the ones out of tolerance. Every entry carries its reason.
Drift either way, an unexpected error or an unexpected pass, is reported the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.errors import UsageError
from harness.inputs.scenario import closest, parse_yaml, validation_message
from harness.paths import SCENARIOS_DIR
from harness.records.error_classes import ERROR_CLASSES, class_named, device_worded_class
from harness.records.failure_signature import failing_parameters
from harness.records.results import Record

EXPECTATIONS_FILE = SCENARIOS_DIR / "expectations.yaml"


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    outcome: Literal["pass", "error", "mismatch", "hang", "skipped"]
    reason: str = Field(min_length=1)
    # The error's class (records/error_classes.py ErrorClass.name), as judge_cell/diagnosis.py classes the record's
    # error: what pins an error whose words differ by device.
    error_class: str | None = None
    error_contains: str | None = None  # words every device says alike (one device's wording of a class: refused)
    failing_grads: tuple[str, ...] | None = None  # exactly these parameters out of tolerance
    failure_contains: str | None = None  # a substring of one of the record's failures
    # A verl defect outside what the patches under test change, in a few words. On an upstream entry it lets
    # `verify` report a patch that fails exactly as upstream does here as "same as upstream: <known_defect>",
    # not against the patch (judge_change/patch_verdict.py).
    known_defect: str | None = None

    @field_validator("error_class")
    @classmethod
    def _a_known_class(cls, name: str | None) -> str | None:
        if name is not None and class_named(name) is None:
            raise ValueError(f"no error class {name!r} (known: {', '.join(c.name for c in ERROR_CLASSES)})")
        return name

    @field_validator("error_contains")
    @classmethod
    def _words_of_every_device(cls, words: str | None) -> str | None:
        found = device_worded_class(words) if words else None
        if found is not None:
            raise ValueError(
                f"one device's wording of the error class {found.name}: name the class (error_class: {found.name})"
            )
        return words


def load_expectations(path: Path = EXPECTATIONS_FILE) -> dict[str, dict[str, Expectation]]:
    try:
        raw = parse_yaml(Path(path).read_text()) or {}
    except FileNotFoundError:
        raise UsageError(f"{path}: no expectations file") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: malformed YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: expected a mapping of scenario -> arm -> expectation, got {type(raw).__name__}")
    table = {}
    for scenario, arms in raw.items():
        if not isinstance(arms, dict):
            raise UsageError(f"{path}: field '{scenario}': expected a mapping of arm -> expectation")
        table[scenario] = {}
        for arm, entry in arms.items():
            if entry is not None and not isinstance(entry, dict):
                raise UsageError(
                    f"{path}: field '{scenario}.{arm}': expected a mapping of outcome, reason, ... (got {entry!r})"
                )
            try:
                table[scenario][arm] = Expectation(**(entry or {}))
            except ValidationError as exc:
                # The same line as a scenario's (inputs/scenario.py): the value got, the closest field for a typo.
                raise UsageError(validation_message(path, Expectation, exc, entry or {}, (scenario, arm))) from None
    return table


def check_scenario_names(expected: dict, known, path: Path = EXPECTATIONS_FILE) -> None:
    """An entry whose scenario name is no scenario's (a typo) is a usage error, with the closest name: otherwise
    its cells would show as "no expectation" after every cell had run."""
    for name in expected:
        if name not in known:
            near = closest(str(name), known)
            hint = f" (did you mean '{near}'?)" if near else ""
            raise UsageError(f"{path}: field '{name}': no scenario of that name{hint}")


def _error_text(record: Record) -> str:
    err = record.verdict.error
    if err is None:
        return ""
    root = err.root_cause
    root_type, root_message = (root.type, root.message) if root else (None, None)
    return " ".join(str(x) for x in (err.type, err.message, err.full_message, root_type, root_message) if x)


def error_class_of(record: Record) -> str | None:
    """The class of the record's error: the one its diagnosis names (judge_cell/diagnosis.py), else, for a record
    without one, the first class of the table whose signature the error's messages show; None for no error or no
    class."""
    found = record.verdict.diagnosis.error if record.verdict.diagnosis else None
    if found is not None:
        return found.error_class
    text = _error_text(record)
    if not text:
        return None
    return next((c.name for c in ERROR_CLASSES if c.searched in ("message", "text") and c.found_in(text)), None)


def drift(record: Record, expected: Expectation) -> list[str]:
    """What differs between a record and its expectation; empty when the record is as expected."""
    problems = []
    outcome = record.outcome
    if outcome != expected.outcome:
        detail = (
            _error_text(record)
            or "; ".join(record.verdict.failure_words()[:3])
            or (record.verdict.skipped_reason or "")
        )
        problems.append(
            f"outcome {outcome} (expected {expected.outcome}: {expected.reason})"
            + (f": {detail[:300]}" if detail else "")
        )
        return problems
    if expected.error_class and expected.error_class != error_class_of(record):
        problems.append(
            f"error of class {error_class_of(record)}, expected {expected.error_class}: {_error_text(record)[:300]}"
        )
    if expected.error_contains and expected.error_contains not in _error_text(record):
        problems.append(f"error does not mention {expected.error_contains!r}: {_error_text(record)[:300]}")
    words = record.verdict.failure_words()
    if expected.failure_contains and not any(expected.failure_contains in w for w in words):
        problems.append(f"no failure mentions {expected.failure_contains!r}: {words[:5]}")
    if expected.failing_grads is not None:
        actual = list(failing_parameters(record))  # the failure signature's (records/failure_signature.py)
        if actual != sorted(expected.failing_grads):
            problems.append(f"failing gradients {actual}, expected {sorted(expected.failing_grads)}")
    return problems


def drift_lines(records: list[Record], expected: dict) -> list[str]:
    """One line per problem of every record against its scenario x arm entry of `expected`. A cell whose arm does
    not apply to the verl it ran on is no drift: not_applied_lines names it."""
    return [
        f"  {r.scenario} x {r.arm}: {problem}"
        for r in records
        if r.verdict.not_applied is None
        for problem in drift(r, expected[r.scenario][r.arm])
    ]


def not_applied_lines(records: list[Record]) -> list[str]:
    """A line per arm whose diff does not apply to the verl the command ran on: its cells are skipped rows, neither
    as expected nor drift; the hunk and file named, and how many cells."""
    arms: dict[str, list[Record]] = {}
    for r in records:
        if r.verdict.not_applied is not None:
            arms.setdefault(r.arm, []).append(r)
    lines = []
    for arm, cells in arms.items():
        na = cells[0].verdict.not_applied
        there = "; its change is already in this verl" if na.already_there else ""
        what = f"{na.patch} does not apply to this verl: {na.where}{there}"
        lines.append(f"  not run: {arm} ({len(cells)} cell(s)): {what}")
        if na.port:
            lines.append(f"    a patch for this verl: {na.port}")
    return lines


def stub_yaml(records: list[Record], expected: dict) -> str:
    """expectations.yaml entries for the records' cells that have none: the observed outcome (and, for a mismatch,
    the failing gradients; for an error, the start of its root cause's message), `reason: TODO` for the user. A
    scenario that has entries for other arms is marked: its arms go under the existing key. "" when none lack one."""
    missing: dict[str, dict] = {}
    for r in records:
        if r.outcome == "skipped" or (expected.get(r.scenario) or {}).get(r.arm) is not None:
            continue
        entry = {"outcome": r.outcome}
        if r.outcome == "mismatch":
            over = r.measures.parity.failing_params() if r.measures.parity else []
            if over:
                entry["failing_grads"] = over
        found = class_named(error_class_of(r)) if r.outcome == "error" else None
        if found is not None and found.worded_by_device:
            entry["error_class"] = found.name  # its words differ by device: the class pins it on every one
        elif r.outcome == "error" and r.verdict.error:
            # The start of the root cause's message: a substring the next run's error text must contain.
            message = r.verdict.error.root_message() or r.verdict.error.type
            entry["error_contains"] = message[:60].strip()
        entry["reason"] = "TODO"
        missing.setdefault(r.scenario, {})[r.arm] = entry
    lines = []
    for scenario, arms in missing.items():
        lines.append(f"{scenario}:" + ("  # add under the existing entry" if scenario in expected else ""))
        for arm, entry in arms.items():
            lines.append(f"  {arm}:")
            lines += [f"    {key}: {_flow(value)}" for key, value in entry.items()]
    return "".join(line + "\n" for line in lines)


def _flow(value) -> str:
    """One YAML value on one line (a list in brackets, a string quoted where YAML needs it)."""
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip().removesuffix("\n...")
