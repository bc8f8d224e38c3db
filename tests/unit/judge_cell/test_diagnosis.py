"""Why a run failed, from numbers and error text (judge_cell/diagnosis.py), on hand-built rank results."""

from __future__ import annotations

import json

import pytest

from harness.judge_cell.diagnosis import NO_PATTERN, error_diagnosis, grad_diagnosis, output_diagnosis
from harness.judge_cell.shard_stats import merge_ranks
from harness.judge_cell.verdict import judge
from harness.launch.launch import RawRun
from harness.records.measures import GradDiagnosis
from harness.records.rank_measures import GradShard, OutputComparisons
from harness.records.results import RankError, Record


def _vec(*xs):
    return list(xs)


def _fit(g, alternatives: dict) -> dict:
    """What parity.compare_gradients reports for a shard g (a list) against alternatives (lists)."""
    out = {"gg": sum(x * x for x in g)}
    for name, b in alternatives.items():
        out[name] = {"gb": sum(x * y for x, y in zip(g, b)), "bb": sum(y * y for y in b)}
    return out


# The record error_diagnosis reads the lm_head shape and the world size from.
AT_W2 = Record(scenario="fsdp2-multigpu", arm="upstream", outcome="error", lm_head_shape=[256, 64], world_size=2)


def _ranks(world, arm_of_rank, share_of_rank):
    """Per rank r: the arm's shard and the alternatives' shards, from rank r's share s_r of the reference."""
    total = [sum(v) for v in zip(*[share_of_rank(r) for r in range(world)])]
    out = []
    for r in range(world):
        g = arm_of_rank(r, total)
        out.append(
            {
                "w": {
                    "diff_sq": 1.0,
                    "ref_sq": 1.0,
                    "max_abs": 1.0,
                    "problem": None,
                    "fit": _fit(g, {"reference": total, "unreduced": [world * x for x in share_of_rank(r)]}),
                }
            }
        )
    return out


def _shards(ranks: list[dict]) -> list[dict[str, GradShard]]:
    """Every rank's gradient entries as the driver reads them from rank<R>.json."""
    return [{name: GradShard.model_validate(entry) for name, entry in rank.items()} for rank in ranks]


SHARES = {0: _vec(1.0, 2.0, -1.0, 0.5), 1: _vec(-0.5, 1.0, 3.0, 2.0)}


@pytest.mark.parametrize(
    "arm, pattern, k, words",
    [
        (lambda r, t: [2 * x for x in SHARES[r]], "unreduced", 1.0, "not reduced across ranks"),
        (lambda r, t: list(SHARES[r]), "unreduced", 0.5, "divided by W = 2"),
        (lambda r, t: [2 * x for x in t], "reference", 2.0, "sum over ranks instead of the mean"),
        (lambda r, t: [0.5 * x for x in t], "reference", 0.5, "once too often"),
        (lambda r, t: [1.7 * x for x in t], "reference", 1.7, "constant k = 1.7"),
    ],
)
def test_gradient_alternatives_are_named_with_their_factor(arm, pattern, k, words):
    d = grad_diagnosis(merge_ranks(_shards(_ranks(2, arm, SHARES.get))), "w", 2, "fp32")
    assert d.pattern == pattern and d.k == pytest.approx(k) and d.residual < 1e-12
    assert words in d.text


def test_a_gradient_matching_nothing_says_so_with_the_closest():
    ranks = _ranks(2, lambda r, t: [1.0, -1.0, 1.0, -1.0] if r == 0 else [0.3, 0.0, 0.0, 1.0], SHARES.get)
    d = grad_diagnosis(merge_ranks(_shards(ranks)), "w", 2, "fp32")
    assert d.pattern is None and d.text.startswith(f"{NO_PATTERN} (closest:")


def test_missing_gradient_is_no_gradient_at_all():
    grads = [{"w": {"diff_sq": 1.0, "ref_sq": 1.0, "max_abs": 0.0, "problem": "missing"}}]
    assert grad_diagnosis(merge_ranks(_shards(grads)), "w", 1, "fp32").text.startswith("no gradient at all")


def test_log_probs_match_the_closest_alternative_within_the_bound():
    alternatives = {"the temperature applied twice": 1e-6, "labels shifted": 2.0}
    outputs = [OutputComparisons.model_validate({"log_probs": {"max_abs": 0.3, "alternatives": alternatives}})]
    d = output_diagnosis(outputs, 1e-4)
    assert d.pattern == "the temperature applied twice"
    assert output_diagnosis(outputs, 1e-7).pattern is None


@pytest.mark.parametrize(
    "message, tail, cls, obj",
    [
        (
            "aten.mm.default got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor",
            '  File "/x/torch_functional.py", line 42, in _fused_linear_for_ppo_fwd\n'
            "    logits = (hidden_states @ vocab_weights.t()) / temperature\n",
            "dtensor-outside-fsdp-forward",
            "lm_head.weight",
        ),
        (
            "aten.grid_sampler_2d.default got mixed torch.Tensor and DTensor",
            '  File "/x/m.py", line 3, in forward\n    torch.grid_sampler(input, grid)\n',
            "dtensor-outside-fsdp-forward",
            None,
        ),
        (
            "expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != float",
            '  File "/x/torch_functional.py", line 69, in _fused_linear_for_ppo_bwd\n'
            "    logits = (hidden_states @ vocab_weights.t()) / temperature\n",
            "fp32-master-weight-meets-bf16",
            "lm_head.weight",
        ),
        ("'FSDPParam' object has no attribute '_unsharded_param'", "", "no-sync-post-backward-without-forward", None),
        (
            "index 248 is out of bounds for dimension 1 with size 128",
            "",
            "shard-used-as-whole-weight",
            "lm_head.weight",
        ),
        ("The size of tensor a (46) must match the size of tensor b (8)", "", None, None),
        # engine-same-length's error as recorded (verl 0.9.1's packed position ids); size x W = vocab must not make it
        # the shard-as-whole-weight class, which has no masking_utils frame.
        (
            "index 128 is out of bounds for dimension 1 with size 128",
            '  File "/site/transformers/masking_utils.py", line 184, in inner_mask\n'
            "    return packed_sequence_mask[batch_idx, q_idx] == packed_sequence_mask[batch_idx, kv_idx]\n",
            "packed-position-ids-layout",
            "position_ids",
        ),
    ],
)
def test_errors_are_classed_with_the_object_they_concern(message, tail, cls, obj):
    err = {
        "type": "RuntimeError",
        "message": message,
        "root_cause": {"type": "RuntimeError", "message": message},
        "traceback_tail": tail,
    }
    d = error_diagnosis(RankError(**err), AT_W2)
    assert (d.error_class, d.object) == (cls, obj)
    if cls is None:  # never the bare words: the error itself is said (issue 49)
        assert d.text == f"{NO_PATTERN}: RuntimeError: {message}"


def test_where_skips_the_frames_of_the_head_memory_dispatch_mode():
    """Under rank/measures/around_step.py's dispatch mode an op's error is raised through _ops.py: the where still
    names the code under test (as recorded on fsdp2-multigpu x none)."""
    tail = (
        '  File "/arm/verl/utils/experimental/torch_functional.py", line 42, in _fused_linear_for_ppo_fwd\n'
        "    logits = (hidden_states @ vocab_weights.t()) / temperature\n"
        '  File "/venv/torch/_compile.py", line 54, in inner\n    return disable_fn(*args, **kwargs)\n'
        '  File "/venv/torch/_dynamo/eval_frame.py", line 1446, in _fn\n    return fn(*args, **kwargs)\n'
        '  File "/work/harness/rank/measures/around_step.py", line 65, in __torch_dispatch__\n'
        "    out = func(*args, **(kwargs or {}))\n"
        '  File "/venv/torch/_ops.py", line 875, in __call__\n    return self._op(*args, **kwargs)\n'
    )
    message = "aten.mm.default got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor"
    err = {"type": "RuntimeError", "message": message, "traceback_tail": tail}
    text = error_diagnosis(RankError(**err), AT_W2).text
    assert text.endswith("(in _fused_linear_for_ppo_fwd, torch_functional.py:42)"), text


def test_judged_record_keeps_run_dir_diagnosis_and_why(tmp_path, scenario):
    grads = _ranks(2, lambda r, t: [2 * x for x in SHARES[r]], SHARES.get)
    results = {}
    for r in range(2):
        g = grads[r]["w"]
        g["diff_sq"], g["ref_sq"] = 0.5, 1.0
        results[r] = {
            "rank": r,
            "world_size": 2,
            "device": "cpu",
            "error": None,
            "phase": "done",
            "backend": "gloo",
            "step_s": 0.1,
            "parity": {
                "oracle": {
                    "outputs": {
                        "0": {
                            "log_probs": {"max_abs": 0.0, "finite": True},
                            "entropy": {"max_abs": 0.0, "finite": True},
                        }
                    },
                    "grads": {"lm_head.weight": g},
                }
            },
            "residency": {"unsharded_units": {}, "lm_head_copies": 0, "lm_head_copy_bytes": 0},
        }
    record = judge(RawRun(scenario("direct-multigpu"), "x", "cpu", 2, tmp_path, rank_results=results, returncode=0))
    assert record.outcome == "mismatch" and record.run_dir == str(tmp_path)
    assert record.verdict.why.startswith("grad lm_head.weight: this rank's gradient only, not reduced across ranks")
    assert record.verdict.diagnosis.grads["lm_head.weight"].pattern == "unreduced"
    json.dumps(record.written())

    from harness.render.tables import COLUMNS, verdict_table

    assert "why" in COLUMNS and "not reduced across ranks" in verdict_table([record])


# The tail of engine-bf16-no-sync x tests/fixtures/alternative_fixes/full-tensor-partial-avg-cast.diff as recorded
# (torch 2.13, CPU): verl's engine runs forward and backward in one call, so the rank said "forward".
POST_BACKWARD_TAIL = (
    '  File "/c/verl/workers/engine/fsdp/transformer_impl.py", line 767, in forward_backward_batch\n'
    "    loss.backward()\n"
    '  File "/v/torch/_tensor.py", line 623, in backward\n    torch.autograd.backward(\n'
    '  File "/v/torch/autograd/__init__.py", line 395, in backward\n    _engine_run_backward(\n'
    '  File "/v/torch/autograd/graph.py", line 979, in _engine_run_backward\n'
    "    return Variable._execution_engine.run_backward(  # Calls into the C++ engine\n"
    '  File "/v/torch/distributed/fsdp/_fully_shard/_fsdp_state.py", line 415, in _root_post_backward_final_callback\n'
    "    fsdp_param_group.post_backward()\n"
    '  File "/v/torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", line 611, in post_backward\n'
    "    fsdp_param.to_accumulated_grad_if_needed()\n"
    '  File "/v/torch/distributed/fsdp/_fully_shard/_fsdp_param.py", line 807, in to_accumulated_grad_if_needed\n'
    "    or self._unsharded_param.grad is None\n"
    "AttributeError: 'FSDPParam' object has no attribute '_unsharded_param'\n"
)


def test_the_phase_comes_from_the_traceback_where_verl_runs_the_step_in_one_call():
    from harness.judge_cell.diagnosis import step_phase

    assert step_phase(RankError(type="E", phase="forward", traceback_tail=POST_BACKWARD_TAIL)) == "backward"
    optimizer = (
        '  File "/c/verl/workers/engine/fsdp/transformer_impl.py", line 806, in optimizer_step\n'
        "    grad_norm = self.module.clip_grad_norm_(self.optimizer_config.clip_grad)\n"
        '  File "/v/torch/nn/utils/clip_grad.py", line 40, in clip_grad_norm_\n    return _no_grad(f)\n'
    )
    assert step_phase(RankError(type="E", phase="forward", traceback_tail=optimizer)) == "optimizer"
    forward = '  File "/c/verl/models/transformers/qwen3_vl.py", line 372, in forward\n    x = y.full_tensor()\n'
    assert step_phase(RankError(type="E", phase="forward", traceback_tail=forward)) == "forward"
    # Outside the step the rank's own phase stands (an import error in a patched file, say).
    assert step_phase(RankError(type="E", phase="patch", traceback_tail=POST_BACKWARD_TAIL)) == "patch"


def test_the_7520_signature_names_the_issue_its_cause_and_what_avoids_it():
    err = {
        "type": "AttributeError",
        "message": "'FSDPParam' object has no attribute '_unsharded_param'",
        "traceback_tail": POST_BACKWARD_TAIL,
    }
    diagnosis = error_diagnosis(RankError(**err), AT_W2)
    assert diagnosis.error_class == "no-sync-post-backward-without-forward"
    assert diagnosis.reference == "verl issue #7520"
    text = diagnosis.text
    assert text.startswith("FSDP's no-sync post-backward on a unit whose forward never ran"), text
    assert "verl issue #7520" in text and "outside lm_head's FSDP forward" in text
    assert "what avoids it: running the head through FSDP's forward" in text


def test_the_residual_in_a_why_line_says_what_it_is():
    from harness.judge_cell.diagnosis import _grads_why

    by_param = {"lm_head.weight": GradDiagnosis(pattern="unreduced", k=1.0, residual=3e-7, text="not reduced")}
    assert _grads_why(by_param) == (
        "grad lm_head.weight: not reduced (residual 3e-07: the part of the gradient's norm this leaves unexplained)"
    )


def _rows(*rows) -> OutputComparisons:
    return OutputComparisons.model_validate({"log_probs": {"max_abs": max(r[2] for r in rows), "rows": list(rows)}})


def test_rows_name_the_samples_wrong_and_whether_they_are_the_shorter_responses():
    from harness.judge_cell.diagnosis import row_diagnosis

    layout = {"trainer": "ray", "response_mask": "dense 4x11", "response_lengths": [11, 8, 8, 10]}
    # Two ranks' samples (places 0-1 and 2-3): the three shorter than the longest response wrong, the longest right.
    found = row_diagnosis([_rows([0, 11, 0.0], [1, 8, 6.1]), _rows([2, 8, 2.0], [3, 10, 1.5])], 1e-4, layout)
    assert found.wrong == [1, 2, 3] and found.of == 4 and found.shorter_than_longest
    # The typed facts a test of a real run checks against the tolerance (tests/distributed/test_wrong_patches.py).
    assert (found.wrong_max_abs, found.right_max_abs, found.lengths) == (6.1, 0.0, [11, 8, 8, 10])
    assert found.text == (
        "log-probs wrong in samples 1 (8 tokens), 2 (8 tokens), 3 (10 tokens) of the global batch's 4 (max diff 6.1), "
        "right in 0 (11 tokens) (max diff 0): exactly the responses shorter than the batch's longest (11 tokens), "
        "under the ray trainer's batch (response_mask dense 4x11)"
    )
    # Wrong samples that are not the shorter ones: named, without the claim.
    other = row_diagnosis([_rows([0, 11, 3.0], [1, 8, 0.0])], 1e-4, None)
    assert other.wrong == [0] and not other.shorter_than_longest and "shorter" not in other.text
    # Every sample wrong, or none, or no rows measured: nothing to say about rows.
    assert row_diagnosis([_rows([0, 11, 3.0], [1, 8, 2.0])], 1e-4, layout) is None
    assert row_diagnosis([_rows([0, 11, 0.0], [1, 8, 0.0])], 1e-4, layout) is None
    assert row_diagnosis([OutputComparisons.model_validate({"log_probs": {"max_abs": 1.0}})], 1e-4, layout) is None


def test_the_micro_batch_width_alternative_is_named_for_what_verl_does():
    from harness.judge_cell.diagnosis import _describe

    text = _describe("agg:seq-mean-token-sum-norm/micro-batch width", 1.0, 2)
    assert text.startswith("seq-mean-token-sum-norm divided by each micro-batch's own longest response")
    assert "the v1 trainer's batch" in text and "times k" not in text


def test_a_known_failures_class_and_its_words_are_the_tables_own(monkeypatch):
    """records/error_classes.py is the one table: a known failure planted there is classed, said and referenced by
    error_diagnosis with no line of judge_cell/diagnosis.py naming its signature."""
    from harness.records import error_classes

    planted = error_classes.ErrorClass(
        name="planted-class",
        signature=("a planted signature",),
        reference="planted issue #1",
        words="the planted class in words",
        why="planted issue #1: why it fails",
    )
    monkeypatch.setattr(error_classes, "ERROR_CLASSES", (*error_classes.ERROR_CLASSES, planted))
    tail = '  File "/c/torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", line 9, in post_backward\n    x\n'
    err = {"type": "RuntimeError", "message": "boom: a planted signature", "traceback_tail": tail}
    diagnosis = error_diagnosis(RankError(**err), AT_W2)
    assert (diagnosis.error_class, diagnosis.reference) == ("planted-class", "planted issue #1")
    assert diagnosis.text.startswith("the planted class in words (in ") and diagnosis.text.endswith(
        "; planted issue #1: why it fails"
    )
