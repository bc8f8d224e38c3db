"""verify's verdict from records shaped like the runner's: a known upstream defect is not counted against a patch
that fails exactly as upstream does; a change of it is reported; head memory is compared with upstream's arm."""

from __future__ import annotations

import pytest
from record_builder import make_record  # tests/record_builder.py (tests/ is on sys.path: its conftest)

from harness.inputs.expectations import load_expectations
from harness.judge_change.head_memory import head_memory_flag
from harness.judge_change.patch_verdict import judge_patch
from harness.records.results import Record
from harness.render.tables import logits_cell

pytestmark = pytest.mark.unit

SAME_LENGTH_ERROR = {
    "type": "IndexError",
    "message": "index 16 is out of bounds for dimension 1 with size 16",
    "phase": "forward",
    "rank": 0,
    "root_cause": {"type": "IndexError", "message": "index 16 is out of bounds for dimension 1 with size 16"},
}


def record(scenario, arm, outcome, *, error=None, failing=(), memory=None) -> Record:
    """make_record's bare record, with the gradients over tolerance named in `failing` and the head memory."""
    parity = None if outcome == "error" else {"grads_over_tolerance": dict.fromkeys(failing, 1.0), "missing_grads": []}
    return make_record(scenario, arm, outcome, bare=True, error=error, parity=parity, head_memory=memory)


def memory(rows, vocab=256, itemsize=4):
    return {
        "measured": True,
        "vocab_size": vocab,
        "largest_vocab_tensor_bytes": rows * vocab * itemsize,
        "largest_vocab_tensor_shape": [rows, vocab],
        "largest_vocab_tensor_dtype": "float32",
    }


@pytest.fixture(scope="module")
def expected():
    return load_expectations()


def test_the_known_upstream_defect_is_not_counted_when_the_patch_fails_as_upstream(expected):
    records = [
        record("engine-same-length", "fix", "error", error=SAME_LENGTH_ERROR),
        record("engine-same-length", "upstream", "error", error=SAME_LENGTH_ERROR),
        record("fsdp2-multigpu", "fix", "pass"),
        record("fsdp2-multigpu", "upstream", "mismatch", failing=["lm_head.weight"]),
    ]
    v = judge_patch("fix", records, expected)
    assert v.exit_code == 0 and not v.failing
    [(r, known, against)] = v.as_upstream
    assert r.scenario == "engine-same-length" and "as_nested_tensor" in known and "beside" in against
    # upstream's record reused from an earlier run (plan/reuse.py): the line says so, and from where
    records[1].stamp.reused_from = "results/x-verify-1.jsonl:7"
    [(_, _, against)] = judge_patch("fix", records, expected).as_upstream
    assert against == "upstream's arm, its record reused from results/x-verify-1.jsonl:7 (the same inputs)"


def test_a_patch_that_leaves_upstreams_own_bug_is_still_counted(expected):
    """fsdp2-multigpu's upstream failure is #6659's, not a known other defect: failing as upstream is failing."""
    records = [
        record("fsdp2-multigpu", "fix", "mismatch", failing=["lm_head.weight"]),
        record("fsdp2-multigpu", "upstream", "mismatch", failing=["lm_head.weight"]),
    ]
    v = judge_patch("fix", records, expected)
    assert v.exit_code == 1 and [r.scenario for r, _ in v.failing] == ["fsdp2-multigpu"]


def test_a_different_failure_where_upstream_has_a_known_defect_is_counted_as_a_change_for_the_worse(expected):
    other = {"type": "RuntimeError", "message": "boom", "root_cause": {"type": "RuntimeError", "message": "boom"}}
    records = [
        record("engine-same-length", "fix", "error", error=other),
        record("engine-same-length", "upstream", "error", error=SAME_LENGTH_ERROR),
    ]
    v = judge_patch("fix", records, expected)
    assert v.exit_code == 1 and not v.as_upstream
    assert "change for the worse" in v.failing[0][1]


def test_a_patch_that_fixes_the_known_defect_is_reported_as_a_change(expected):
    records = [
        record("engine-same-length", "fix", "pass"),
        record("engine-same-length", "upstream", "error", error=SAME_LENGTH_ERROR),
    ]
    v = judge_patch("fix", records, expected)
    assert v.exit_code == 0 and len(v.changes) == 1 and "fix: pass" in v.changes[0][1]


def test_an_upstream_run_that_drifted_from_its_expectation_excuses_nothing(expected):
    drifted = dict(SAME_LENGTH_ERROR, message="something else", root_cause={"type": "IndexError", "message": "x"})
    records = [
        record("engine-same-length", "fix", "error", error=drifted),
        record("engine-same-length", "upstream", "error", error=drifted),
    ]
    assert judge_patch("fix", records, expected).exit_code == 1


def test_alone_compares_with_the_expected_upstream_outcome(expected):
    v = judge_patch("fix", [record("engine-same-length", "fix", "error", error=SAME_LENGTH_ERROR)], expected)
    assert v.exit_code == 0 and "expectations.yaml" in v.as_upstream[0][2]


def test_the_head_memory_flag_holds_without_upstream_beside_the_patch(expected):
    """--alone: no upstream record; the fused head's bound (one chunk, read from verl's code) still flags it."""
    v = judge_patch("unfused", [record("engine-long-sequences", "unfused", "pass", memory=memory(792))], expected)
    [(r, text, sizes)] = v.memory
    assert sizes == "792 x 256 > 512 x 256"  # the verdict line's few characters (render/verdict_line.py)
    assert "792 x 256 tokens x vocab" in text and "at most 512 x 256 at once" in text, text
    assert "FusedLinearForPPO's default chunk_size, verl/utils/experimental/torch_functional.py" in text
    assert "512 tokens" in v.memory_basis


def test_upstream_itself_gets_no_exemption(expected):
    records = [record("engine-same-length", "upstream", "error", error=SAME_LENGTH_ERROR)]
    assert judge_patch("upstream", records, expected).exit_code == 1


def test_larger_logits_than_upstream_are_flagged_without_failing_the_patch(expected):
    records = [
        record("engine-long-sequences", "unfused", "pass", memory=memory(792)),
        record("engine-long-sequences", "upstream", "mismatch", failing=["lm_head.weight"], memory=memory(512)),
        record("fsdp2-multigpu", "unfused", "pass", memory=memory(60)),
        record("fsdp2-multigpu", "upstream", "mismatch", failing=["lm_head.weight"], memory=memory(60)),
    ]
    v = judge_patch("unfused", records, expected)
    assert v.exit_code == 0
    [(r, text, _)] = v.memory
    assert r.scenario == "engine-long-sequences"
    assert "792 x 256 tokens x vocab" in text and "811,008 bytes" in text and "512 x 256" in text


def test_no_memory_flag_without_a_figure_a_bound_or_more_than_one_chunk():
    compiled = record("s", "fix", "pass", memory={"measured": False, "why": "not measured under torch.compile"})
    assert head_memory_flag(compiled) is None
    assert head_memory_flag(record("s", "fix", "error")) is None
    assert head_memory_flag(record("s", "fix", "pass", memory=memory(512))) is None  # one chunk: as verl's head
    assert head_memory_flag(record("s", "fix", "pass", memory=memory(900))) is not None
    unfused_config = record("s", "fix", "pass", memory=memory(900))
    unfused_config.stamp.scenario_spec = {"engine": {"use_fused_kernels": False}, "fused_backend": "torch"}
    assert head_memory_flag(unfused_config) is None  # verl's own unfused head builds the whole logits too
    assert logits_cell(record("s", "fix", "pass", memory=memory(792))) == "792x256 792 KiB"
    assert logits_cell(compiled) == "-"


def test_the_verdict_lines_say_same_as_upstream_and_flag_larger_logits(expected, capsys, tmp_path):
    from harness.commands.run import print_verdict

    records = [
        record("engine-same-length", "fix", "error", error=SAME_LENGTH_ERROR),
        record("engine-same-length", "upstream", "error", error=SAME_LENGTH_ERROR),
        record("engine-long-sequences", "fix", "pass", memory=memory(792)),
        record("engine-long-sequences", "upstream", "mismatch", failing=["lm_head.weight"], memory=memory(512)),
    ]
    print_verdict(judge_patch("fix", records, expected), tmp_path / "none.jsonl")
    out = capsys.readouterr().out.splitlines()
    assert any(
        line.startswith("  engine-same-length: error: same as upstream: verl 0.9.1's packed position ids")
        for line in out
    ), out
    assert out[-1].startswith(
        "verdict: fix passes all 1 scenario(s) it is judged on here; 1 more fail(s) exactly "
        "as upstream does (not counted, above); FLAG: larger tokens x vocab logits than "
        "upstream's fused head in 1 scenario(s) (engine-long-sequences: 792 x 256 > 512 x 256)"
    ), out[-1]
