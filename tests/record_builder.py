"""The one record builder of the tests (the `record` fixture of tests/conftest.py is this function). Imported as
`record_builder`: pytest puts tests/ on sys.path for its conftest.py (a package named `tests` is installed in the venv,
so `tests.record_builder` would not resolve)."""

from __future__ import annotations

from harness.records.results import SCHEMA_VERSION, Failure, FailureKind, GradientOf, Measures, Record


def make_record(
    scenario: str = "fsdp2-multigpu", arm: str = "upstream", outcome: str = "pass", *, bare: bool = False, **fields
) -> Record:
    """A record as the runner writes it (judge_cell/verdict.py's judge, stamped by records/store.py): a passing
    fsdp2-multigpu x upstream run on CPU, without the bulky fields (scenario_spec, diagnosis); fields replaced, a
    measure's in the record's measures (parity=... replaces record.measures.parity).
    bare: only what every judged record has (no error, no failures, no parity), for a test about a few fields."""
    measures = {name: fields.pop(name) for name in list(fields) if name in Measures.model_fields}
    if bare:
        return Record.model_validate(
            {
                "scenario": scenario,
                "arm": arm,
                "outcome": outcome,
                "error": None,
                "failures": [],
                "measures": {"parity": None, **measures},
                **fields,
            }
        )
    record = {
        "schema_version": SCHEMA_VERSION,
        "scenario": scenario,
        "arm": arm,
        "outcome": outcome,
        "world_size": 2,
        "device": "cpu",
        "backend": "gloo",
        "command": "matrix",
        "error": None,
        "failures": [],
        "rank_errors": [],
        "wall_s": 14.851,
        "rank_start": "fork",
        "run_dir": None,
        "arm_patches": [],
        "harness_commit": "3607cb4c6a45",
        "host": "Intel(R) Xeon(R) Processor, 2 cores",
        "finished_at": "2026-11-29T19:48:10+00:00",
        "scenario_file": f"scenarios/{scenario}.yaml",
        "settings": {
            "compile": False,
            "cpu_offload": False,
            "forward_only": False,
            "grad_accum": 1,
            "model": "tiny-qwen3-vl",
            "precision": "fp32",
            "seed": 1234,
            "temperature": 0.7,
        },
        "measures": {
            "parity": {
                "logprob_max_abs": 0.0,
                "entropy_max_abs": 1.43e-06,
                "grad_worst_rel": 5.4e-07,
                "grad_worst_param": "model.visual.merger.norm.weight",
                "grads_over_tolerance": {},
                "missing_grads": [],
                "grad_problems": [],
            },
            "comm": {
                "all_gather": {
                    "count": 16,
                    "bytes": 0,
                    "by_origin": {"fsdp": {"count": 16, "bytes": 0}, "other": {"count": 0, "bytes": 0}},
                }
            },
        },
        "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.10.4", "verl": "0.9.1"},
    }
    record.update(fields)
    record["measures"].update(measures)
    return Record.model_validate(record)


# The warning FSDP2 raises where a wrapped module returns a view (a known hazard: records/known_failures.py
# KNOWN_WARNINGS), as a rank's record keeps it: the closing block's warning tests raise it in the patch's cells.
VIEW_WARNING = {
    "category": "UserWarning",
    "message": "FSDP2-wrapped module (FSDPLinear) returned a view tensor. An in-place op on this view will silently "
    "drop the pre-backward hook",
    "where": "/site/torch/distributed/fsdp/_fully_shard/_fsdp_state.py:123",
    "count": 2,
}

# A patch's and its base's records for the differential verdict's tests (judge_change/base_change.py,
# render/comment_body.py): #6659's unreduced lm_head, the same gradient summed (another cause), an error with its root,
# flash-attn missing.
UNREDUCED = Failure(
    kind=FailureKind.GRADIENT,
    gradient_of=GradientOf.STEP,
    subject="unreduced",
    parameters=["lm_head.weight"],
    words="grad lm_head.weight: …",
)
SUMMED = Failure(
    kind=FailureKind.GRADIENT,
    gradient_of=GradientOf.STEP,
    subject="reference x W",
    parameters=["lm_head.weight"],
    words="grad lm_head.weight: …",
)


def error(kind: str, message: str, where: str = "/site-packages/verl/utils/attention_utils.py:30") -> dict:
    return {
        "type": kind,
        "message": message,
        "phase": "forward",
        "rank": 0,
        "root_cause": {"type": kind, "message": message},
        "location": where,
    }


FLASH_ATTN = error("ModuleNotFoundError", "No module named 'flash_attn'")


def cell(arm: str, outcome: str, scenario: str = "fsdp2-multigpu", *, cause=None, failing=(), err=None):
    """A judged record: a mismatch's failing gradients and cause, an error's root."""
    parity = None if outcome == "error" else {"grads_over_tolerance": dict.fromkeys(failing, 1.0), "missing_grads": []}
    record = make_record(scenario, arm, outcome, bare=True, error=err, parity=parity)
    record.verdict.cause = cause
    return record


def unreduced(arm: str, scenario: str = "fsdp2-multigpu"):
    return cell(arm, "mismatch", scenario, cause=UNREDUCED, failing=["lm_head.weight"])
