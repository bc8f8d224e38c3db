"""Findings are data: each defect the harness found in verl's code, kept in findings/findings.yaml and validated
here. A finding names the verl refs where it shows and where it does not, the test that tells them apart (a
template under harness/upstream/), the fix where the defect is on a branch verl ships, its cause in one sentence,
and the harness's scenarios and recorded numbers behind it. `harness upstream` writes and proves one package per
finding (commands/upstream.py, docs/UPSTREAM.md).

A ref is one of:
  release        the installed verl (the release this project pins: constraints.txt)
  release+fix    the installed verl with the finding's fix applied (an arm of plan/arms.py made from fix)
  arm:NAME       an arm of patches/ (arm:none is verl before #6659)
  git:REF        a commit, branch or tag of verl's repository (--verl-repo): git:main, git:refs/pr/7370
  pr-base:REF    the merge base of REF with main: a pull request's base
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.errors import UsageError, first_error_line
from harness.paths import ROOT

FINDINGS_FILE = ROOT / "findings" / "findings.yaml"
TEMPLATES_DIR = ROOT / "harness" / "upstream"
NUMBERS_ENV = "VERL_FINDING_TEST_RESULTS"

_REF = re.compile(r"^(release|release\+fix|arm:[\w.+-]+|git:[\w./^~-]+|pr-base:[\w./^~-]+)$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PackageTest(_Strict):
    """The package's pytest file: a template under harness/upstream/, the file name it is written as (verl's CPU
    lane collects *_on_cpu.py), and the values of its placeholders that are data rather than computed."""

    template: str
    file: str
    # The folder of verl's tests/ it belongs in: tests/<a package of verl/>/... (verl's validate_structure.py)
    dest: str
    numbers_env: str = NUMBERS_ENV  # where the test writes what it measured (the report reads it)
    fill: dict[str, str] = Field(default_factory=dict)

    @field_validator("template")
    @classmethod
    def _template_exists(cls, value: str) -> str:
        if not (TEMPLATES_DIR / value).is_file():
            raise ValueError(f"no template {value} under harness/upstream/")
        return value

    @field_validator("dest")
    @classmethod
    def _under_tests(cls, value: str) -> str:
        if not re.fullmatch(r"tests(/[a-z_][a-z0-9_]*)+", value) or value.split("/")[1].startswith("special_"):
            raise ValueError("a folder tests/<verl package>/..., as verl's validate_structure.py wants (no trailing /)")
        return value

    @field_validator("file")
    @classmethod
    def _cpu_test_name(cls, value: str) -> str:
        if not re.fullmatch(r"test_\w+_on_cpu\.py", value):
            raise ValueError("a verl CPU test file is named test_*_on_cpu.py")
        return value


class Finding(_Strict):
    name: str
    title: str
    kind: Literal["branch", "pr"]  # a defect on a branch verl ships (release, main) or in an open pull request
    pr: int | None = None  # the pull request, for kind pr
    cause: str  # one sentence
    # The commit that brought the defect, and how that was found (bisect, or git's history read by hand); and who
    # is hit (releases, stacks, recipes: docs/RELEASES.md's facts). REPORT.md says both; "" where not known.
    brought_by: str = ""
    hits: str = ""
    shows_on: tuple[str, ...]  # refs where the test must fail
    absent_on: tuple[str, ...]  # refs where it must pass
    fails_with: tuple[str, ...]  # a failing test's message must hold one of these (a failure for another reason
    # - an import error, say - shows nothing)
    fix: str | None = None  # a diff against the installed verl, from the project's root
    test: PackageTest
    scenarios: tuple[str, ...] = ()  # the harness's scenarios that show it
    recorded: tuple[str, ...] = ()  # what the harness measured there, each with where it is kept

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError("a name is lower-case words joined by '-' (it names the package's directory)")
        return value

    @field_validator("shows_on", "absent_on")
    @classmethod
    def _refs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [r for r in value if not _REF.fullmatch(r)]
        if bad:
            raise ValueError(f"unknown ref {bad[0]!r} (release, release+fix, arm:NAME, git:REF or pr-base:REF)")
        return value

    @field_validator("fix")
    @classmethod
    def _fix_exists(cls, value: str | None) -> str | None:
        if value is not None and not (ROOT / value).is_file():
            raise ValueError(f"no such diff {value}")
        return value

    @model_validator(mode="after")
    def _consistent(self):
        if not self.shows_on or not self.absent_on:
            raise ValueError("a finding needs a ref where it shows and one where it does not")
        if set(self.shows_on) & set(self.absent_on):
            raise ValueError("a ref cannot be both in shows_on and absent_on")
        if self.kind == "pr":
            if self.pr is None:
                raise ValueError("a pull request's finding names its pr")
            if self.fix is not None:
                raise ValueError("no fix for an open pull request: there the evidence is the failing test")
        elif self.fix is None:
            raise ValueError("a defect on a branch verl ships comes with its fix")
        uses_fix = any(r == "release+fix" for r in (*self.shows_on, *self.absent_on))
        if uses_fix and self.fix is None:
            raise ValueError("ref release+fix needs a fix")
        return self

    @property
    def report_name(self) -> str:
        """REPORT.md for a branch (an issue), REVIEW.md for a pull request (a review comment's body)."""
        return "REVIEW.md" if self.kind == "pr" else "REPORT.md"

    def expected(self) -> dict[str, bool]:
        """ref -> whether the test must pass there."""
        return {**dict.fromkeys(self.shows_on, False), **dict.fromkeys(self.absent_on, True)}


def load_findings(path: Path = FINDINGS_FILE) -> list[Finding]:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: cannot read the findings: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("findings"), list):
        raise UsageError(f"{path}: field 'findings': a list of findings is required")
    out = []
    for i, item in enumerate(raw["findings"]):
        if not isinstance(item, dict):
            raise UsageError(f"{path}: field 'findings.{i}': a mapping is required")
        try:
            out.append(Finding(**item))
        except ValidationError as exc:
            name = item.get("name", i)
            raise UsageError(first_error_line(str(path), exc, within=("findings", name))) from None
    names = [f.name for f in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"{path}: field 'findings': name {twice[0]!r} given twice")
    return out


def select_findings(findings: list[Finding], names: list[str] | None) -> list[Finding]:
    """The findings named (all when none is), in the file's order; an unknown name is a usage error."""
    if not names:
        return findings
    known = {f.name: f for f in findings}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"no finding {unknown[0]!r}; known: {', '.join(known)}")
    return [f for f in findings if f.name in names]
