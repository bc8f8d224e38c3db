"""Rows by what verl's trainer does with them (rank/measures/rows.py): the rows a head skipped, named with their
count, where they sit and whether the loss's rows are among them (judge_cell/diagnosis.py); and the rows judged where
a path compares rows the trainer never reads (judge_cell/verdict.py read_rows_judged): only those it reads, the others
remarked on, never with a loosened bound."""

from __future__ import annotations

import torch

from harness.inputs.tolerances import tolerance_for
from harness.judge_cell.diagnosis import skipped_rows_diagnosis
from harness.judge_cell.verdict import read_rows, unread_rows_remark
from harness.rank.measures.rows import (
    BEFORE_RESPONSE,
    LAST,
    PROMPT,
    RESPONSE,
    RESPONSE_PADDING,
    SHARD_END,
    read_rows_comparison,
    response_roles,
    sequence_roles,
    skipped_rows,
)
from harness.records.rank_measures import OutputComparisons

FP32 = tolerance_for("fp32")


def test_each_row_of_a_sequence_has_its_role_and_the_trainer_reads_the_responses_slice():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    roles, read = sequence_roles(7, mask)
    assert roles[0] == [PROMPT, PROMPT, PROMPT, BEFORE_RESPONSE, RESPONSE, RESPONSE, LAST]
    assert roles[1] == [PROMPT, PROMPT, PROMPT, BEFORE_RESPONSE, RESPONSE, RESPONSE_PADDING, LAST]
    # verl keeps [:, -response_length - 1 : -1]: rows 3, 4 and 5 of 7 for a 3-token response
    assert read[0].tolist() == [False, False, False, True, True, True, False]


def _reference():
    return -torch.arange(1.0, 15.0).reshape(2, 7), torch.full((2, 7), 2.0)


def test_rows_written_as_zero_are_counted_by_role_and_the_loss_rows_among_them():
    ref_lp, ref_ent = _reference()
    lp, ent = ref_lp.clone(), ref_ent.clone()
    for b, t in ((0, 0), (0, 4), (1, 5), (1, 6)):
        lp[b, t], ent[b, t] = 0.0, 0.0
    lp[1, 1] = 0.0  # a zero log-prob with an entropy: no skipped row
    roles, read = sequence_roles(7, torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]))
    got = skipped_rows(lp, ent, ref_lp, ref_ent, roles, read)
    assert got == {
        "count": 4,
        "of": 14,
        "by_role": {PROMPT: 1, RESPONSE: 1, RESPONSE_PADDING: 1, LAST: 1},
        "read": 2,
        "in_loss": 1,
    }


def _outputs(skipped: dict | None, lp=1.0, lp_read=None, ent=0.0, ent_read=None) -> OutputComparisons:
    data = {"log_probs": {"max_abs": lp}, "entropy": {"max_abs": ent}, "skipped_rows": skipped}
    if lp_read is not None:
        data |= {"log_probs_read": {"max_abs": lp_read}, "entropy_read": {"max_abs": ent_read or 0.0}}
    return OutputComparisons.model_validate(data)


def test_the_diagnosis_names_skipped_rows_with_their_count_where_they_sit_and_the_loss_rows_among_them():
    a = {"count": 3, "of": 20, "by_role": {RESPONSE: 2, PROMPT: 1}, "read": 2, "in_loss": 2}
    b = {"count": 1, "of": 20, "by_role": {RESPONSE: 1}, "read": 1, "in_loss": 1}
    text = skipped_rows_diagnosis([_outputs(a), _outputs(b)])
    assert text == (
        "rows the head skipped (log-prob and entropy exactly zero where the oracle's are not), the loss's rows "
        "among them: 4 of 40 rows; where: 3 response rows, 1 prompt rows; 3 of them the loss's rows"
    )
    only_prompt = {"count": 2, "of": 20, "by_role": {PROMPT: 2}, "read": 0, "in_loss": 0}
    assert "none of them a row of the loss: 2 of 20 rows" in skipped_rows_diagnosis([_outputs(only_prompt)])
    assert skipped_rows_diagnosis([_outputs(None), _outputs({"count": 0, "of": 20})]) is None


def test_rows_the_trainer_never_reads_are_remarked_on_and_the_read_ones_judged_at_the_same_bound():
    assert read_rows([_outputs(None, lp=5.7, lp_read=0.0, ent=5.5, ent_read=1e-6)]) == (0.0, 1e-6)
    remark = unread_rows_remark(5.7, 5.5, 0.0, 1e-6, FP32)
    assert remark.startswith("log-probs differ by 5.7 > 0.0001 and entropy differs by 5.5 > 0.0001 only at rows")
    # a read row over the bound is judged as it is: no remark, the failure stands
    assert read_rows([_outputs(None, lp=5.7, lp_read=2e-4)])[0] == 2e-4 > FP32.logprob_abs
    assert unread_rows_remark(5.7, 0.0, 2e-4, 0.0, FP32) is None
    # a path that compares the read rows only (the engine path) is judged on what it compared
    assert read_rows([_outputs(None, lp=3.0)]) is None


def test_the_read_rows_comparison_looks_at_those_rows_only():
    ref_lp, _ = _reference()
    lp = ref_lp.clone()
    lp[:, 0] = 0.0  # prompt rows
    _, read = sequence_roles(7, torch.ones(2, 3))
    assert read_rows_comparison(lp, ref_lp, read)["max_abs"] == 0.0


def test_a_pass_with_unread_rows_that_differ_passes_with_a_remark(record, capsys):
    from pathlib import Path

    from harness.commands.run import print_verdict
    from harness.inputs.expectations import load_expectations
    from harness.judge_change.patch_verdict import judge_patch

    remark = "log-probs differ by 5.68 > 0.0001 only at rows verl's trainer never reads"
    mine = record("direct-1gpu", "mine", parity={"logprob_max_abs": 5.68, "unread_rows_remark": remark})
    verdict = judge_patch("mine", [mine], load_expectations())
    assert verdict.remarks == [(mine, remark)] and verdict.exit_code == 0
    print_verdict(verdict, Path("results/x.jsonl"))
    out = capsys.readouterr().out
    assert f"  direct-1gpu: {remark}\n" in out
    assert "verdict: mine passes all 1 scenario(s) it is judged on here; 1 with a remark (above)" in out


def test_an_updates_log_prob_failure_names_the_rows_the_head_skipped():
    from types import SimpleNamespace

    from harness.judge_cell.update_verdict import skipped_note
    from harness.records.rank_measures import StepLogProbs

    def rank(skipped):
        entry = StepLogProbs.model_validate({"step": 0, "log_probs": {"max_abs": 5.9}, "skipped_rows": skipped})
        return SimpleNamespace(update=SimpleNamespace(log_probs=[entry]))

    a = {"count": 5, "of": 20, "by_role": {RESPONSE: 5}, "read": 5, "in_loss": 5}
    b = {"count": 4, "of": 17, "by_role": {RESPONSE: 4}, "read": 4, "in_loss": 4}
    assert skipped_note([rank(a), rank(b)], 0) == " (rows the head skipped: 9 of 37, 9 of them the loss's)"
    assert skipped_note([rank(None)], 0) == ""


def test_under_sp_a_shards_last_row_is_named_as_the_row_before_a_boundary_and_counts_for_the_loss():
    roles, read = response_roles(torch.ones(1, 4), {(0, 1)})
    assert roles == [[RESPONSE, SHARD_END, RESPONSE, RESPONSE]] and read.all()
    lp, ref = torch.tensor([[-1.0, 0.0, -1.0, -1.0]]), torch.full((1, 4), -2.0)
    got = skipped_rows(lp, None, ref, None, roles, read)
    assert got["by_role"] == {SHARD_END: 1} and got["in_loss"] == 1
