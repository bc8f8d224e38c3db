"""verify's closing block about the patch (render/verify_closing.py, printed by commands/run.py print_verdict): the
order a reviewer reads, the trainers' difference, the warnings compared with what ran beside it (issue 49)."""

from __future__ import annotations

import pytest
from record_builder import VIEW_WARNING, make_record  # tests/record_builder.py (tests/ is on sys.path: its conftest)

from harness.judge_change.patch_verdict import judge_patch
from harness.render.verify_closing import AboutPatch, ClosingContext, closing_lines, warning_lines

pytestmark = pytest.mark.unit

SUM_WHY = "grad lm_head.weight: the sum over ranks instead of the mean (x W = {})"


def _summed(record, world: int):
    """The record with a one-step diagnosis of lm_head.weight's gradient summed over ranks (k = W), and the cause
    judge sets from it (judge_cell/cell_cause.py one_step_cause)."""
    from harness.judge_cell.cell_cause import one_step_cause

    text = f"the sum over ranks instead of the mean (x W = {world})"
    record.verdict.diagnosis = {
        "grads": {"lm_head.weight": {"pattern": "reference", "k": float(world), "residual": 1e-7, "text": text}}
    }
    record.verdict.cause = one_step_cause(record)
    return record


def _summed_records() -> list:
    first = make_record(
        "fsdp2-multigpu", "mine", "mismatch", why=SUM_WHY.format(2), run_dir="runs/a/x", warnings=[VIEW_WARNING]
    )
    four = make_record("fsdp2-multigpu-4", "mine", "mismatch", why=SUM_WHY.format(4), run_dir="runs/a/y", world_size=4)
    return [
        _summed(first, 2),
        _summed(four, 4),
        make_record("fsdp2-multigpu", "upstream", "mismatch", why="grad lm_head.weight: …"),
        make_record("fsdp2-multigpu-4", "upstream", "pass"),
    ]


def test_the_block_says_what_the_patch_changes_then_failures_by_cause_warnings_the_verdict_and_where():
    """The order a reviewer reads (issue 49): the patch's description and files, its failures grouped by cause,
    the warnings upstream's runs did not raise (hazards named), the verdict line; after it two lines of where."""
    records = _summed_records()
    verdict = judge_patch("mine", records, {})
    description = "Gather the weight with a Partial gradient, summed over ranks."
    about = AboutPatch(("mine.diff",), description, ("verl/models/transformers/qwen3_vl.py",))
    where = {(records[1].run_dir, records[1].stamp.finished_at): 7}
    out = closing_lines(verdict, records, ClosingContext(about=about, results="results/r.jsonl", record_lines=where))
    assert out[:3] == [
        "about mine (mine.diff):",
        "  Gather the weight with a Partial gradient, summed over ranks.",
        "  touches: verl/models/transformers/qwen3_vl.py",
    ]
    assert out[3:5] == [
        "failures of mine, by cause:",
        "  grad lm_head.weight: the sum over ranks instead of the mean (x W): 2 scenarios (fsdp2-multigpu, "
        "fsdp2-multigpu-4)",
    ]
    # the same scenarios against upstream beside it (judge_change/base_change.py): one line, harness pr's count
    assert out[5] == "against upstream run beside it: 2 new (harness pr's verdict counts only the new)"
    assert out[6] == "warnings mine's runs raised that upstream's runs beside it did not:"
    assert out[7].startswith("  1 cell(s): UserWarning: FSDP2-wrapped module (FSDPLinear) returned a view tensor")
    assert out[8].startswith("    HAZARD: FSDP2: an in-place op on a view that a wrapped module returned silently")
    assert out[9].startswith("verdict: mine FAILS in 2 of 2 scenario(s)")
    # the one counted cell found in the results file is named by its line
    assert out[10] == "whole error, traceback, diagnosis: python -m harness report --full results/r.jsonl:7"
    assert out[11] == "rank logs: runs/a/*/torchrun.log (2 failing run(s))" and len(out) == 12


def test_print_verdict_reads_the_patchs_diff_and_prints_the_block(tmp_path, capsys):
    """commands/run.py gathers the data (the diff's description and files) and prints render's lines."""
    from harness.commands.run import print_verdict

    diff = tmp_path / "mine.diff"
    diff.write_text(
        "Gather the weight with a Partial gradient,\nsummed over ranks.\n\n--- a/verl/models/transformers/qwen3_vl.py\n"
        "+++ b/verl/models/transformers/qwen3_vl.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    records = _summed_records()
    verdict = judge_patch("mine", records, {})
    print_verdict(verdict, tmp_path / "none.jsonl", (diff,), records)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("about mine (") and out[0].endswith("mine.diff):")
    assert out[1:3] == [
        "  Gather the weight with a Partial gradient, summed over ranks.",
        "  touches: verl/models/transformers/qwen3_vl.py",
    ]
    from harness.paths import shown_path

    context = ClosingContext(results=shown_path(tmp_path / "none.jsonl"))  # no such file: no line numbers
    assert out[3:] == closing_lines(verdict, records, context)  # the lines render gives, printed


def _on(trainer: str | None, scenario: str, outcome: str, why: str = "", path: str = "engine", steps: int = 0):
    spec = {"name": scenario, "path": path, "ranks": 2, "steps": steps, "description": f"{scenario}'s own words"}
    if trainer:
        spec["trainer"] = trainer
    return make_record(scenario, "mine", outcome, why=why, scenario_spec=spec)


def test_the_verdict_and_closing_block_name_the_trainer_where_an_outcome_differs():
    """One configuration under verl's two trainers (scenarios that differ only in `trainer`), the patch failing
    under one: the closing block says which, a line per configuration, and so does the verdict line."""
    why = "log-probs wrong in samples 1 (8 tokens) of the global batch's 2 (max diff 6.1), right in 0 (11 tokens)"
    records = [
        _on(None, "fsdp2-multigpu", "mismatch", why),  # a record from before the field: ray_trainer's batch
        _on("v1", "engine-v1", "pass"),
        # the same outcome under both: not named; a direct record has no trainer
        _on("ray", "engine-update-adamw", "pass", steps=3),
        _on("v1", "engine-update-v1", "pass", steps=3),
        _on(None, "direct-multigpu", "mismatch", why, path="direct"),
    ]
    verdict = judge_patch("mine", records, {})
    assert [(a.scenario, b.scenario) for a, b in verdict.trainers] == [("fsdp2-multigpu", "engine-v1")]
    out = closing_lines(verdict, records, ClosingContext(results="none.jsonl"))
    at = out.index("mine's outcome differs between verl's trainers (the batch each hands the engine):")
    assert out[at + 1] == "  fsdp2-multigpu (trainer: ray): mismatch; engine-v1 (trainer: v1): pass"
    verdict_line = next(line for line in out if line.startswith("verdict: "))
    assert (
        "; outcome differs between verl's trainers in 1 configuration(s) (fsdp2-multigpu / engine-v1): fails under "
        "ray's batch" in verdict_line
    )
    # Where both trainers' outcomes agree, neither says a word.
    same = judge_patch("mine", [_on("ray", "a", "pass"), _on("v1", "b", "pass")], {})
    assert verdict.trainers and not same.trainers


def test_without_anything_beside_it_the_warnings_say_nothing_was_compared():
    alone = judge_patch("mine", [make_record("fsdp2-multigpu", "mine", "pass", warnings=[VIEW_WARNING])], {})
    assert warning_lines(alone)[0] == "warnings mine's runs raised (nothing ran beside it to compare with):"
