"""The few fields of a record that the history's fast readers need, typed: plan/estimate.py (each cell's last
duration on this host), plan/reuse.py (whether an earlier record may be stood on), commands/bisect.py (why a cell
could not run). They read hundreds of records per command, so they take these fields alone rather than loading the
whole Record (records/results.py); the JSON is in the nested shape of schema 4 (results.nested_shape), and a field a
record predates is None.

The models: RecordHead, and ScenarioKind (what a cell's duration depends on)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Head(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ScenarioKind(_Head):
    """What a cell's duration depends on (plan/estimate.py kind_seconds), from the scenario as it ran."""

    path: str | None = None
    ranks: int | None = None
    steps: int | None = None
    compile: bool | None = None
    compile_backend: str | None = None
    forward_only: bool | None = None


class StampHead(_Head):
    host: str | None = None
    command: str | None = None
    finished_at: str | None = None
    reused_from: str | None = None
    scenario_spec: dict | None = None


class RootHead(_Head):
    type: str | None = None


class ErrorHead(_Head):
    type: str | None = None
    root_cause: RootHead | None = None


class VerdictHead(_Head):
    error: ErrorHead | None = None
    why: str | None = None


class RecordHead(_Head):
    scenario: str | None = None
    arm: str | None = None
    outcome: str | None = None
    wall_s: float | None = None
    stamp: StampHead = Field(default_factory=StampHead)
    verdict: VerdictHead = Field(default_factory=VerdictHead)


def record_head(data: dict) -> RecordHead | None:
    """The record's head, or None where its JSON does not fit it (a field of another type: not a record to read)."""
    try:
        return RecordHead.model_validate(data)
    except ValidationError:
        return None


def scenario_kind(spec: dict) -> ScenarioKind:
    try:
        return ScenarioKind.model_validate(spec)
    except ValidationError:
        return ScenarioKind()
