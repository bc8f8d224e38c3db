"""`harness upstream` checks its own output as a maintainer would use it: the generated regression test, run with
plain pytest inside each arm's materialised verl (nothing of the harness on its path), fails on verl before #6659,
fails on installed verl (#6659) on the gradient and under bf16, passes with the candidate and with an independent
correct fix, and fails with a plausible wrong fix. One pytest run per arm (~35 s of CPU each: the imports once, then
both cases in one 2-process run), so there is nothing to save with -k. On this session's shared 2-core host (load
~18) the six items took 1546 s, 235-395 s a run."""

from __future__ import annotations

import pytest

from harness.paths import ROOT
from harness.records.error_classes import FP32_MASTER_MEETS_BF16, ErrorClass

LOG_PROBS = "test_fp32_log_probs_and_entropy_match_reference"
LM_HEAD = "test_fp32_lm_head_grad_matches_reference"
EVERY_GRAD = "test_fp32_every_grad_matches_reference"
BF16 = "test_bf16_mixed_precision_runs_and_matches_reference"
ALL = (LOG_PROBS, LM_HEAD, EVERY_GRAD, BF16)

# arm -> (tests that must fail, with a fragment of each failure message, or the error class whose signature it shows
# where the words differ by device: CPU's m1 and m2, CUDA's mat1 and mat2), the others must pass.
EXPECTED = {
    "none": dict.fromkeys(ALL, "mixed torch.Tensor and DTensor"),
    "upstream": {
        LM_HEAD: "lm_head.weight: relative gradient error",
        EVERY_GRAD: "lm_head.weight",
        BF16: FP32_MASTER_MEETS_BF16,
    },
    "fsdp2-lmhead-forward": {},
    "tests/fixtures/alternative_fixes/lm-head-in-root-unit.diff": {},
    # It keeps full_tensor(), so it also keeps #6659's fp32 master weight under bf16.
    "tests/fixtures/wrong_patches/full-tensor-div-world.diff": {
        LM_HEAD: "lm_head.weight: relative gradient error",
        EVERY_GRAD: "lm_head.weight",
        BF16: FP32_MASTER_MEETS_BF16,
    },
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    from harness.commands.upstream import write_files

    out = tmp_path_factory.mktemp("upstream")
    written = write_files(out)
    return out, written


def test_fix_diff_is_the_candidate_and_applies(generated):
    from harness.commands.upstream import diff_body

    out, written = generated
    candidate = (ROOT / "patches" / "fsdp2-lmhead-forward.diff").read_text()
    assert (out / "fix.diff").read_text() == diff_body(candidate)
    assert written["fix_check"].startswith("`git apply --check` passes"), written


# make test runs the two arms that show the generated test telling #6659 from the fix (12.8 and 13.2 s of a worker in
# the CI of 00ff8aa); the crash before #6659, the independent fix and the wrong one (12.8, 13.6, 15.7 s there) are
# the nightly's, which runs every arm.
PER_CHANGE = ("upstream", "fsdp2-lmhead-forward")


@pytest.mark.parametrize(
    "arm", [pytest.param(a, marks=[] if a in PER_CHANGE else [pytest.mark.nightly]) for a in EXPECTED]
)
def test_generated_test_under_arm(generated, arm, tmp_path):
    from harness.upstream.regression_test import TEST_FILE_NAME
    from harness.upstream.run_generated import run_generated_test

    out, _ = generated
    run = run_generated_test(out / TEST_FILE_NAME, arm if "/" not in arm else str(ROOT / arm), tmp_path)
    print(f"{arm}: exit {run.returncode} in {run.wall_s:.1f} s")
    assert set(run.outcomes) == set(ALL), run.output_tail
    failing = EXPECTED[arm]
    assert {n for n, o in run.outcomes.items() if o != "passed"} == set(failing), (run.outcomes, run.messages)
    for name, fragment in failing.items():
        shown = (
            fragment.found_in(run.messages[name])
            if isinstance(fragment, ErrorClass)
            else fragment in run.messages[name]
        )
        assert run.outcomes[name] == "failed" and shown, (name, run.messages[name])
    assert (run.returncode == 0) == (not failing)
    assert run.numbers is not None, "the generated test wrote no numbers"
