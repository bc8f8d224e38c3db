"""Plausible-but-wrong fixes must each get the verdict that exposes them (real torchrun runs, one each)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.inputs.expectations import Expectation, drift
from harness.inputs.scenario import load_all
from harness.records.results import Failure, FailureKind, GradientOf, Record

FIXTURES = Path(__file__).parent.parent / "fixtures" / "wrong_patches"
TABLE = yaml.safe_load((FIXTURES / "expectations.yaml").read_text())


def test_every_fixture_has_an_expectation():
    assert sorted(p.stem for p in FIXTURES.glob("*.diff")) == sorted(TABLE)
    # Each is caught by its diagnosis (a failing verdict) or, for a numerically right fix, by what it costs.
    assert all(entry.get("diagnosis_contains") or entry.get("head_memory_flag_contains") for entry in TABLE.values())
    assert len(TABLE) >= 5
    # Slips in verl's engine and loss code, outside verl/models/, in at least two different files.
    outside = {
        line.split()[1]
        for p in FIXTURES.glob("*.diff")
        for line in p.read_text().splitlines()
        if line.startswith("+++ ") and "/models/" not in line
    }
    assert len(outside) >= 2, outside


def over_bound(failure: Failure) -> bool:
    """Whether a failure's measured value exceeds the bound (its tolerance) it was judged against: the fact a test
    checks of a number, never its digits."""
    return failure.value == "inf" or (
        isinstance(failure.value, int | float) and failure.bound is not None and failure.value > failure.bound
    )


def fields_drift(what: str, found, expected: dict) -> list[str]:
    """Each field an entry names against the found object's: one line per field that differs."""
    return [
        f"{what} {name}: expected {value!r}, got {getattr(found, name)!r}"
        for name, value in expected.items()
        if getattr(found, name) != value
    ]


def cause_drift(cause: Failure | None, expected: dict) -> list[str]:
    """The record's cause (records/results.py Failure) against an entry's `cause`: each field named equal (kind,
    subject, gradient_of, step and mini_batch, 0-based), and its value over its bound."""
    if cause is None:
        return [f"cause: expected {expected}, got none"]
    problems = fields_drift("cause", cause, expected)
    if cause.value is not None and not over_bound(cause):
        problems.append(f"cause: value {cause.value!r} within its bound {cause.bound!r}")
    return problems


def rows_drift(record: Record, expected: dict) -> list[str]:
    """The record's samples diagnosis (records/measures.py RowsDiagnosis) against an entry's `diagnosis_rows`: the
    same wrong samples, batch, lengths and claim, the wrong samples' largest difference over the log-prob tolerance
    and the right ones' within it."""
    rows = record.verdict.diagnosis.rows if record.verdict.diagnosis else None
    if rows is None:
        return [f"diagnosis rows: expected {expected}, got none"]
    problems = fields_drift("diagnosis rows", rows, expected)
    bound = record.tolerance.logprob_abs
    if not (rows.wrong_max_abs is not None and rows.wrong_max_abs > bound):
        problems.append(f"the wrong samples' max diff {rows.wrong_max_abs!r} is not over the tolerance {bound}")
    if not (rows.right_max_abs is not None and rows.right_max_abs <= bound):
        problems.append(f"the right samples' max diff {rows.right_max_abs!r} is over the tolerance {bound}")
    return problems


# The scenarios tagged nightly, read once (every parametrization below asks).
NIGHTLY = {s.name for s in load_all() if "nightly" in s.tags}


def _nightly(scenario_name: str) -> bool:
    return scenario_name in NIGHTLY


def _fixture_is_nightly(patch: str) -> bool:
    """A fixture whose scenario is the nightly's is too (make test-nightly), and one whose entry says why it is."""
    return _nightly(TABLE[patch]["scenario"]) or bool(TABLE[patch].get("nightly"))


# Fixtures whose cells a test of verify's output runs by `verify --alone` of the same arm and scenarios (its scenario,
# then its passes_in): both tests read that one run (verified_once), in one process (the xdist group). Those tests:
# test_trainer_batches.py (response-mask-as-nested), test_verify_rerun_report.py (unfused-lm-head).
VERIFIED = {"response-mask-as-nested", "unfused-lm-head"}


def _marks(patch: str) -> list:
    return [
        *([pytest.mark.nightly] if _fixture_is_nightly(patch) else []),
        *([pytest.mark.xdist_group(f"verify-{patch}")] if patch in VERIFIED else []),
    ]


def _cells(patch: str, arm: str, run_cell, verified_once):
    """cell(scenario name) -> the record of the fixture's arm there: run_cell's launch, or for a fixture of VERIFIED
    the shared verify run's record."""
    if patch not in VERIFIED:
        return lambda name: run_cell(name, arm)
    done, records = verified_once(arm, TABLE[patch]["scenario"], *TABLE[patch].get("passes_in", []))

    def verified(name: str):
        assert name in records, done.stdout[-3000:] + done.stderr[-3000:]
        return records[name]

    return verified


@pytest.mark.parametrize("patch", [pytest.param(p, marks=_marks(p)) for p in sorted(TABLE)])
def test_wrong_patch_is_caught(patch, run_cell, verified_once):
    from harness.render.tables import verdict_table

    entry = dict(TABLE[patch])
    scenario_name = entry.pop("scenario")
    entry.pop("nightly", None)
    base = entry.pop("on_top_of", None)
    why = entry.pop("diagnosis_contains", "")
    flag = entry.pop("head_memory_flag_contains", None)
    passes_in = entry.pop("passes_in", [])
    rows = entry.pop("diagnosis_rows", None)
    cause = entry.pop("cause", None)
    failure = entry.pop("failure", None)
    arm = (f"{base}+" if base else "") + str(FIXTURES / f"{patch}.diff")
    cell = _cells(patch, arm, run_cell, verified_once)
    record = cell(scenario_name)
    problems = drift(record, Expectation(**entry))
    if rows is not None:
        problems += rows_drift(record, rows)
    if cause is not None:
        problems += cause_drift(record.verdict.cause, cause)
    if failure is not None:
        problems += failure_drift(record, failure)
    shown = [record]
    # A fix wrong only in some worlds (uneven shards) must be right in the others: the failure is the world's.
    for other in passes_in:
        passed = cell(other)
        shown.append(passed)
        if passed.outcome != "pass":
            problems.append(f"{other}: expected pass, got {passed.outcome} ({passed.verdict.why})")
    if why not in (record.verdict.why or ""):
        problems.append(f"why: expected to contain {why!r}, got {record.verdict.why!r}")
    if flag:
        # verify's verdict line flags a fix whose largest logits tensor has more rows than verl's fused head's
        # chunk: known without running upstream (judge_change/head_memory.py).
        from harness.judge_change.head_memory import head_memory_flag

        text = head_memory_flag(record) or ""
        if flag not in text:
            problems.append(f"head memory flag: expected to contain {flag!r}, got {text!r}")
    assert not problems, "\n".join(problems) + "\n" + verdict_table(shown)


# lm_head's gradient before the clip at the first optimizer step (0-based), over its tolerance: the update's cause.
LM_HEAD_GRADIENT_FIRST = {
    "cause": {
        "kind": FailureKind.GRADIENT,
        "gradient_of": GradientOf.UPDATE,
        "subject": "lm_head.weight",
        "step": 0,
        "mini_batch": 0,
    }
}

# The arms of the headline: what each must be diagnosed with (the candidate: nothing to diagnose), in words without a
# measured number's digits, and the typed facts behind them: the record's cause, or a failure it must hold (each
# field equal, its value over its bound).
ARMS = [
    ("fsdp2-multigpu", "upstream", "grad lm_head.weight: this rank's gradient only, not reduced across ranks", {}),
    ("fsdp2-bf16", "upstream", "a gathered fp32 master weight (lm_head.weight) meeting bf16 activations", {}),
    ("fsdp2-multigpu", "none", "sharded lm_head.weight read outside its FSDP unit's forward", {}),
    ("fsdp2-multigpu", "fsdp2-lmhead-forward", "", {}),
    # Over the training update: lm_head's gradient named wrong before the clip at the first optimizer step, then verl's
    # grad_norm, then lm_head's own update.
    (
        "engine-update-adamw",
        "upstream",
        "lm_head.weight's gradient wrong before the clip (rel. ",
        LM_HEAD_GRADIENT_FIRST,
    ),
    (
        "engine-update-adamw",
        "upstream",
        "; grad_norm: verl ",
        {"failure": {"kind": FailureKind.METRIC, "subject": "grad_norm", "step": 0, "mini_batch": 0}},
    ),
    (
        "engine-update-adamw",
        "upstream",
        "1 update(s) of those parameter(s) off (worst lm_head.weight ",
        {"failure": {"kind": FailureKind.UPDATE, "subject": "lm_head.weight", "step": 0, "mini_batch": 0}},
    ),
    ("engine-update-sgd", "upstream", "lm_head.weight's gradient wrong before the clip (rel. ", LM_HEAD_GRADIENT_FIRST),
    ("engine-update-adamw", "fsdp2-lmhead-forward", "", {}),
]


def failure_drift(record: Record, expected: dict) -> list[str]:
    """A failure of the record with each field of `expected` equal and its value over its bound; else what is
    missing, with the failures of that kind and subject."""
    if any(all(getattr(f, k) == v for k, v in expected.items()) and over_bound(f) for f in record.verdict.failures):
        return []
    alike = [f.words for f in record.verdict.failures if (f.kind, f.subject) == (expected["kind"], expected["subject"])]
    return [f"no failure {expected} over its bound; of that kind and subject: {alike}"]


# Each is a shipped cell: the record is its scenario item's (shared_cell), in the item's process.
@pytest.mark.parametrize(
    "scenario_name, arm, why, facts",
    [
        pytest.param(
            s,
            a,
            w,
            f,
            id=f"{s}-{a}-{i}",
            marks=[pytest.mark.xdist_group(s), *([pytest.mark.nightly] if _nightly(s) else [])],
        )
        for i, (s, a, w, f) in enumerate(ARMS)
    ],
)
def test_arm_is_diagnosed(scenario_name, arm, why, facts, shared_cell):
    from harness.render.tables import verdict_table

    record = shared_cell(scenario_name, arm)
    got = record.verdict.why or ""
    problems = [] if ((why in got) if why else (record.outcome == "pass" and got == "")) else [f"why: expected {why!r}"]
    if "cause" in facts:
        problems += cause_drift(record.verdict.cause, facts["cause"])
    if "failure" in facts:
        problems += failure_drift(record, facts["failure"])
    assert not problems, "\n".join(problems) + f"\ngot {got!r}\n" + verdict_table([record])
