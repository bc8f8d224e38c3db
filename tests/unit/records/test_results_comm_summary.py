"""The typed collectives' summary (records/results.py CommSummary): records of every schema load into it and write
back what they held, and the figures every table shows come from its one function each."""

from __future__ import annotations

import json

import pytest

from harness.paths import ROOT
from harness.records.results import CommSummary, Record, other_all_gather_bytes

pytestmark = pytest.mark.unit

SCHEMA_1 = ROOT / "tests/fixtures/records/schema-1.jsonl"


def _kind(fsdp: tuple[int, int], other: tuple[int, int], **extra) -> dict:
    by_origin = {"fsdp": {"count": fsdp[0], "bytes": fsdp[1]}, "other": {"count": other[0], "bytes": other[1]}}
    return {"count": fsdp[0] + other[0], "bytes": fsdp[1] + other[1], "by_origin": by_origin, **extra}


def test_an_old_record_loads_and_writes_back_the_same_comm():
    data = json.loads(SCHEMA_1.read_text().splitlines()[0])
    record = Record.model_validate(data)
    assert isinstance(record.measures.comm, CommSummary)
    assert (
        record.written()["measures"]["comm"] == data["comm"]
    )  # nothing added, dropped or retyped (time_ms 0.0 stays 0.0)
    assert other_all_gather_bytes(record) == 32768  # upstream's full_tensor() at W=2 on the tiny model


def test_the_headline_figure_and_its_absences(record):
    with_gather = record(comm={"all_gather": _kind((3, 100), (1, 12345))})
    assert other_all_gather_bytes(with_gather) == with_gather.measures.comm.other_bytes() == 12345
    assert with_gather.measures.comm.count_by_origin() == (3, 1)
    # FSDP's collectives only: 0 bytes outside its hooks, a figure; no origin split or no comm: no figure.
    assert other_all_gather_bytes(record(comm={"all_gather": _kind((3, 100), (0, 0))})) == 0
    assert other_all_gather_bytes(record(comm={"all_gather": {"count": 0, "bytes": 0}})) is None
    assert other_all_gather_bytes(record(comm=None)) is None
    assert other_all_gather_bytes(None) is None


def test_lm_head_share_is_its_fsdp_unit_plus_everything_outside_fsdp():
    from harness.commands.bench import measured_lm_head_bytes

    comm = CommSummary.model_validate(
        {
            "all_gather": _kind((2, 300), (1, 64), by_module={"lm_head": {"count": 1, "bytes": 200}}),
            "reduce_scatter": _kind((2, 50), (0, 0)),
            "ops": [
                {"kind": "all_gather", "origin": "other", "module": None, "dtype": "float"},
                {"kind": "all_gather", "origin": "fsdp", "module": "lm_head", "dtype": "c10::BFloat16"},
                {"kind": "all_gather", "origin": "fsdp", "module": "model.visual", "dtype": "double"},
            ],
        }
    )
    assert measured_lm_head_bytes(comm) == {"all_gather": 264, "reduce_scatter": 0, "total": 264}
    assert comm.lm_head_dtypes() == ["c10::BFloat16", "float"]


def test_the_tables_show_the_same_figure_and_gradient_cell(record):
    from harness.commands.sweep import table_row
    from harness.render.tables import COLUMNS, row
    from harness.upstream.report import _cell_row

    parity = {"grad_worst_rel": 0.5, "grad_worst_param": "model.language_model.lm_head.weight", "missing_grads": ["a"]}
    r = record(arm="upstream", outcome="mismatch", parity=parity, comm={"all_gather": _kind((14, 9), (1, 32768))})
    verdict = dict(zip(COLUMNS, row(r)))
    assert verdict["other AG bytes"] == "32768" and verdict["all-gathers fsdp+other"] == "14+1"
    assert verdict["worst grad rel err (param)"] == "0.5 (lm_head.weight), 1 missing"
    assert table_row(r, "qwen3-vl", False, [])[8:10] == ["0.5 (lm_head.weight), 1 missing", "32768"]
    assert _cell_row(r)[7:9] == ["0.5 (lm_head.weight), 1 missing", "32768"]


def test_bench_measured_table_reads_the_typed_summary(record):
    from harness.commands.bench import measured_table

    lm_head_unit = {"by_module": {"lm_head": {"count": 1, "bytes": 10}}}
    base = {"comm": {"all_gather": _kind((1, 10), (0, 0), **lm_head_unit)}}  # FSDP's own path: its lm_head unit
    r = record(arm="upstream", comm={"all_gather": _kind((1, 10), (1, 64))}, baseline=base, lm_head_shape=[64, 32])
    table = measured_table([r])
    assert "| 64 " in table and "6.40x" in table  # upstream's gather against the baseline's unit
