"""inputs/size_ceilings.py: every size field of a scenario has a ceiling (one table, each with why), above every
scenario of scenarios/; a value above it is one line naming file, field, value and ceiling (exit 2 before any cell);
a seq_len the engine path does not run is refused there (issue 71: a scenario that ran away, a field recorded as
run that never was)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from harness.errors import UsageError
from harness.inputs.scenario import ENGINE_SEQ_LEN_SLACK, Scenario, field_paths, load_each, load_scenario
from harness.inputs.size_ceilings import CEILINGS
from harness.paths import SCENARIOS_DIR

pytestmark = pytest.mark.unit


def _field(path: str):
    model, *parents, name = Scenario, *path.split(".")
    for part in parents:
        model = model.model_fields[part].annotation
        model = next(
            a for a in (model, *getattr(model, "__args__", ())) if isinstance(a, type) and issubclass(a, BaseModel)
        )
    return model.model_fields[name]


def test_each_ceiling_is_a_fields_le_and_every_size_field_has_one():
    """The table is the one source: each entry is the `le` of its field (a tuple's items' for image_grid and
    text_only_micro_batches); every whole-number field of a scenario but the seed has an entry."""
    for path, ceiling in CEILINGS.items():
        assert path in field_paths(Scenario) or path.startswith("head."), path  # head: an optional section
        field = _field(path)
        bounds = [m.le for m in field.metadata if hasattr(m, "le")]
        if path in ("batch.image_grid", "batch.text_only_micro_batches", "model_overrides"):
            continue  # bounded per item (tuple members) or by a validator (a nested mapping's numbers)
        assert bounds == [ceiling.most], path
    whole = [p for p in field_paths(Scenario) if _field(p).annotation in (int, "int", int | None)]
    assert set(whole) - set(CEILINGS) <= {"seed"}, set(whole) - set(CEILINGS)


def test_every_shipped_scenario_is_under_every_ceiling_with_room():
    """No scenario of scenarios/ was changed to fit: each loads, each size below its ceiling (by at least half of
    it: seq_len's 260 of 512 is the closest)."""
    loaded, errors = load_each()
    swept, sweep_errors = load_each(SCENARIOS_DIR / "sweep")
    assert not errors and not sweep_errors and len(loaded) > 60
    for scenario in loaded + swept:
        for path, ceiling in CEILINGS.items():
            value = scenario
            for part in path.split("."):
                value = getattr(value, part, None) if value is not None else None
            values = value if isinstance(value, tuple) else [value]
            for v in (v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)):
                assert v <= 0.51 * ceiling.most, (scenario.name, path, v)


@pytest.mark.parametrize(
    "batch, top, field, got",
    [
        ("  micro_batch_size: 1000000\n", "", "batch.micro_batch_size", "1000000"),
        ("  seq_len: 100000000\n  response_len: 12\n", "", "batch.seq_len", "100000000"),
        ("  seq_len: 500\n  response_len: 600\n", "", "batch.response_len", "600"),
        ("  image_grid: [1, 4, 400]\n", "", "batch.image_grid.2", "400"),
        ("", "grad_accum: 1000000\n", "grad_accum", "1000000"),
        ("", "ranks: 65\n", "ranks", "65"),
        ("", "timeout_s: 1.0e+9\n", "timeout_s", "1000000000.0"),
    ],
)
def test_a_size_above_its_ceiling_is_one_line_naming_file_field_value_and_ceiling(tmp_path, batch, top, field, got):
    path = tmp_path / "big.yaml"
    path.write_text(f"ranks: 2\n{top}batch:\n{batch or '  micro_batch_size: 2'}\n".replace("ranks: 2\nranks", "ranks"))
    with pytest.raises(UsageError) as exc:
        load_scenario(path)
    line = str(exc.value)
    ceiling = CEILINGS[field.rsplit(".", 1)[0] if field[-1].isdigit() else field]
    assert "\n" not in line and line.startswith(f"{path}: field '{field}': ")
    assert f"(got {got})" in line and f"(ceiling {ceiling.most:g}: {ceiling.why})" in line


def test_a_response_len_given_as_a_float_is_refused():
    """`response_len: 1e8` (issue 71) is no whole number: refused before its size is looked at."""
    with pytest.raises(Exception, match="valid integer"):
        Scenario(name="x", ranks=1, batch={"response_len": 1e8})


def test_a_model_override_above_its_ceiling_is_refused(tmp_path):
    path = tmp_path / "wide.yaml"
    path.write_text("ranks: 1\nmodel_overrides:\n  text_config:\n    vocab_size: 100000000\n")
    with pytest.raises(
        UsageError, match=r"field 'model_overrides': .*text_config.vocab_size: 100000000 is above its ceiling 4096"
    ):
        load_scenario(path)


def test_a_seq_len_the_engine_path_does_not_run_is_refused_there(tmp_path):
    """The engine path's samples are response_len and a prompt of a few tokens: a seq_len far above that would be
    recorded as if it ran. The direct path, which pads every sample to seq_len, runs it."""
    path = tmp_path / "long.yaml"
    path.write_text("path: engine\nranks: 2\nbatch:\n  seq_len: 400\n  response_len: 12\n")
    with pytest.raises(UsageError, match=r"batch.seq_len: 400 is not run on the engine path.*set at most 76"):
        load_scenario(path)
    path.write_text(f"path: engine\nranks: 2\nbatch:\n  seq_len: {12 + ENGINE_SEQ_LEN_SLACK}\n  response_len: 12\n")
    assert load_scenario(path).batch.seq_len == 76
    path.write_text("path: engine\nranks: 2\n")  # the default seq_len is not the file's: no refusal
    assert load_scenario(path).batch.seq_len == 32
    path.write_text("ranks: 2\nbatch:\n  seq_len: 400\n  response_len: 12\n")
    assert load_scenario(path).batch.seq_len == 400  # direct


def test_the_ceilings_table_of_the_docs_is_this_one():
    from harness.paths import ROOT

    text = (ROOT / "docs" / "SCENARIOS.md").read_text()
    for path, ceiling in CEILINGS.items():
        assert f"| `{path}` | {ceiling.most:,g} | {ceiling.why} |" in text, path


def test_a_field_the_head_path_never_reads_is_refused_there():
    head = {"hidden": 64, "vocab": 256, "way": "candidate"}
    assert Scenario(name="h", ranks=2, path="head", head=head).batch.seq_len == 32  # defaults: nothing set
    with pytest.raises(Exception, match=r"batch: the head path does not run it"):
        Scenario(name="h", ranks=2, path="head", head=head, batch={"micro_batch_size": 4})
    with pytest.raises(Exception, match=r"grad_accum: the head path does not run it"):
        Scenario(name="h", ranks=2, path="head", head=head, grad_accum=4)
