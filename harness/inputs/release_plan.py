"""scenarios/releases.yaml: the verl releases `make releases` checks, the scenarios it runs on each, the candidate
patch, and the pins every release's environment shares. Validated like a scenario: a problem is one line naming the
file and the field."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from harness.errors import UsageError, first_error_line
from harness.inputs.scenario import read_mapping
from harness.paths import SCENARIOS_DIR

RELEASES_FILE = SCENARIOS_DIR / "releases.yaml"
_VERSION = re.compile(r"\d+\.\d+\.\d+(\.post\d+)?")
_PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==\S+")


class ReleasePlan(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    releases: tuple[str, ...]
    scenarios: tuple[str, ...]
    candidate: str
    pins: tuple[str, ...] = ()
    # release -> pins that replace the shared pin of the same package for that release alone (and add any other).
    release_pins: dict[str, tuple[str, ...]] = {}

    @field_validator("releases")
    @classmethod
    def _versions(cls, value):
        bad = [v for v in value if not _VERSION.fullmatch(v)]
        if bad or not value:
            raise ValueError(f"each release must be a version like 0.8.0, got {bad or 'none'}")
        return value

    @field_validator("pins")
    @classmethod
    def _pins(cls, value):
        return _check_pins(value)

    @field_validator("release_pins")
    @classmethod
    def _release_pins(cls, value, info):
        unknown = [v for v in value if v not in info.data.get("releases", ())]
        if unknown:
            raise ValueError(f"not among the releases: {unknown}")
        for pins in value.values():
            _check_pins(pins)
        return value

    def pins_for(self, version: str) -> tuple[str, ...]:
        """The shared pins with this release's own in place of those of the same package, in the shared order."""
        own = {_package(p): p for p in self.release_pins.get(version, ())}
        shared = tuple(own.pop(_package(p), p) for p in self.pins)
        return shared + tuple(own.values())


def _package(pin: str) -> str:
    return pin.split("==")[0].lower().replace("_", "-")


def _check_pins(value):
    bad = [p for p in value if not _PIN.fullmatch(p)]
    if bad:
        raise ValueError(f"each pin must read name==version, got {bad}")
    if any(_package(p) == "verl" for p in value):
        raise ValueError("verl is pinned per release, not here")
    return value


def load_release_plan(path: Path = RELEASES_FILE) -> ReleasePlan:
    path = Path(path)
    raw = {k: tuple(v) if isinstance(v, list) else v for k, v in read_mapping(path, "release plan").items()}
    if isinstance(raw.get("release_pins"), dict):
        raw["release_pins"] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw["release_pins"].items()}
    try:
        return ReleasePlan(**raw)
    except ValidationError as exc:
        raise UsageError(first_error_line(str(path), exc)) from None
