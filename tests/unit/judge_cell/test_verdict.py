"""Judging a launch from hand-built rank results: outcome order, parity numbers over ranks, root causes."""

from __future__ import annotations

import json
import math
import typing

import pytest

from harness.inputs.scenario import Scenario
from harness.inputs.tolerances import TOLERANCES, tolerance_for
from harness.judge_cell.verdict import judge
from harness.launch.launch import RawRun
from harness.launch.run_dir import rank_progress
from harness.rank.phases import PHASES as PHASE_ORDER

TOL = tolerance_for("fp32")
PARAMS = ("model.language_model.embed_tokens.weight", "lm_head.weight")


@pytest.fixture(scope="module")
def scenario(scenario):
    """Here `scenario` is the one every test judges: fsdp2-multigpu (from the shared loader, tests/conftest.py)."""
    return scenario("fsdp2-multigpu")


def grad(diff_sq=0.0, ref_sq=1.0, max_abs=0.0, problem=None):
    return {"diff_sq": diff_sq, "ref_sq": ref_sq, "max_abs": max_abs, "problem": problem}


def rank_result(rank, *, lp=0.0, ent=0.0, grads=None, error=None):
    """Shaped like harness/rank/worker.py's rank<R>.json."""
    out = {
        "rank": rank,
        "world_size": 2,
        "device": "cpu",
        "error": error,
        "pid": 1000 + rank,
        "backend": "gloo",
        "phase": "done" if error is None else error["phase"],
        "phase_times_s": {"setup": 0.1, "build": 0.2, "forward": 0.3, "backward": 0.4},
    }
    if error is not None:
        return out
    out.update(
        {
            "step_s": 0.5 + rank,
            "comm": {
                "all_gather": {
                    "count": 3,
                    "bytes": 100,
                    "by_origin": {"fsdp": {"count": 3, "bytes": 100}, "other": {"count": 0, "bytes": 0}},
                }
            },
            "parity": {
                "oracle": {
                    "outputs": {
                        "0": {"log_probs": {"max_abs": lp, "finite": True}, "entropy": {"max_abs": ent, "finite": True}}
                    },
                    "grads": grads if grads is not None else {name: grad() for name in PARAMS},
                }
            },
            "residency": {"unsharded_units": {}, "lm_head_copies": 0, "lm_head_copy_bytes": 0},
            "verl_file": "/site/verl/__init__.py",
        }
    )
    return out


def error(rank, phase, message, type_="RuntimeError"):
    return {
        "type": type_,
        "message": message,
        "phase": phase,
        "rank": rank,
        "root_cause": {"type": type_, "message": message},
    }


def raw_run(scenario, tmp_path, results, **kwargs):
    kwargs = {"returncode": 0, "wall_s": 1.5, **kwargs}
    return RawRun(scenario, "upstream", "cpu", scenario.ranks, tmp_path, rank_results=results, **kwargs)


# ---------------------------------------------------------------------------------------------- pass / mismatch


def test_all_within_tolerance_passes_with_contract_fields(scenario, tmp_path):
    results = {
        r: rank_result(
            r, lp=1e-6 * (r + 1), ent=2e-6, grads={n: grad(diff_sq=1e-14, ref_sq=1.0, max_abs=1e-7) for n in PARAMS}
        )
        for r in range(2)
    }
    record = judge(raw_run(scenario, tmp_path, results))
    assert record.outcome == "pass" and record.verdict.failures == [] and record.verdict.error is None
    written = record.written()
    for key in ("scenario", "arm", "world_size", "device", "backend", "outcome", "wall_s"):
        assert key in written
    assert {"parity", "comm", "step_s", "head_memory"} <= set(written["measures"])
    assert not {"parity", "comm", "step_s", "head_memory"} & set(written)
    assert {"error", "failures", "rank_errors", "why", "diagnosis"} <= set(written["verdict"])
    assert (record.scenario, record.arm, record.world_size, record.device, record.backend) == (
        "fsdp2-multigpu",
        "upstream",
        2,
        "cpu",
        "gloo",
    )
    parity = record.measures.parity
    for key in ("logprob_max_abs", "entropy_max_abs", "grad_worst_rel", "grad_worst_param", "missing_grads"):
        assert key in parity.written()
    assert parity.logprob_max_abs == pytest.approx(2e-6)  # max over ranks
    assert parity.entropy_max_abs == pytest.approx(2e-6)
    assert parity.grad_worst_rel == pytest.approx(math.sqrt(2e-14 / 2.0))
    assert parity.grad_worst_param in PARAMS
    assert parity.missing_grads == [] and parity.grads_over_tolerance == {}
    assert record.measures.comm.all_gather.count == 3
    assert record.measures.step_s == 1.5  # the slowest rank
    assert record.wall_s == 1.5
    assert record.tolerance.grad_rel == TOL.grad_rel


def test_gradient_error_is_summed_over_ranks(scenario, tmp_path):
    # Each rank holds half of lm_head's gradient; neither half alone says the global relative error.
    results = {
        0: rank_result(
            0, grads={"lm_head.weight": grad(diff_sq=0.09, ref_sq=1.0, max_abs=0.3), PARAMS[0]: grad(ref_sq=2.0)}
        ),
        1: rank_result(
            1, grads={"lm_head.weight": grad(diff_sq=0.16, ref_sq=3.0, max_abs=0.4), PARAMS[0]: grad(ref_sq=2.0)}
        ),
    }
    record = judge(raw_run(scenario, tmp_path, results))
    assert record.outcome == "mismatch"
    expected = math.sqrt((0.09 + 0.16) / (1.0 + 3.0))  # 0.25; per rank it would be 0.3 and 0.23
    parity = record.measures.parity
    assert parity.grad_worst_param == "lm_head.weight"
    assert parity.grad_worst_rel == pytest.approx(expected)
    assert parity.grads_over_tolerance == {"lm_head.weight": pytest.approx(expected)}
    assert len(record.verdict.failures) == 1
    failure = record.verdict.failures[0]
    assert "lm_head.weight" in failure.words and "relative error" in failure.words
    assert (failure.kind, failure.gradient_of, failure.subject) == ("gradient", "one step", "lm_head.weight")
    assert failure.value == pytest.approx(expected) and failure.bound == TOL.grad_rel


def test_small_errors_per_rank_that_add_up_past_tolerance(scenario, tmp_path):
    # Two shards each at 0.8x the tolerance stay under it together; a shard whose reference is zero (so its own
    # ratio is undefined) still adds its difference to the global sum, which pushes the parameter over.
    d = (0.8 * TOL.grad_rel) ** 2
    ok = {r: rank_result(r, grads={"lm_head.weight": grad(diff_sq=d, ref_sq=1.0)}) for r in range(2)}
    assert judge(raw_run(scenario, tmp_path, ok)).outcome == "pass"
    bad = {
        0: rank_result(0, grads={"lm_head.weight": grad(diff_sq=d, ref_sq=1.0)}),
        1: rank_result(1, grads={"lm_head.weight": grad(diff_sq=4 * d, ref_sq=0.0)}),
    }
    record = judge(raw_run(scenario, tmp_path, bad))
    assert record.outcome == "mismatch"
    assert record.measures.parity.grad_worst_rel == pytest.approx(math.sqrt(5 * d))


def test_logprob_and_entropy_out_of_tolerance(scenario, tmp_path):
    results = {0: rank_result(0), 1: rank_result(1, lp=10 * TOL.logprob_abs, ent=10 * TOL.entropy_abs)}
    record = judge(raw_run(scenario, tmp_path, results))
    assert record.outcome == "mismatch"
    assert record.measures.parity.logprob_max_abs == pytest.approx(10 * TOL.logprob_abs)
    assert any("log-probs" in w for w in record.verdict.failure_words()) and any(
        "entropy" in w for w in record.verdict.failure_words()
    )
    assert [f.kind for f in record.verdict.failures][:2] == ["log-probs", "entropy"]


def test_missing_gradient_is_a_mismatch(scenario, tmp_path):
    results = {
        r: rank_result(r, grads={"lm_head.weight": grad(diff_sq=1.0, ref_sq=1.0, problem="missing"), PARAMS[0]: grad()})
        for r in range(2)
    }
    record = judge(raw_run(scenario, tmp_path, results))
    assert record.outcome == "mismatch"
    assert record.measures.parity.missing_grads == ["lm_head.weight"]
    assert "grad lm_head.weight: missing" in record.verdict.failure_words()


def test_missing_on_one_rank_only_is_still_missing(scenario, tmp_path):
    results = {
        0: rank_result(0, grads={"lm_head.weight": grad(diff_sq=0.5, ref_sq=0.5, problem="missing")}),
        1: rank_result(1, grads={"lm_head.weight": grad(ref_sq=0.5)}),
    }
    record = judge(raw_run(scenario, tmp_path, results))
    assert record.outcome == "mismatch" and record.measures.parity.missing_grads == ["lm_head.weight"]


def test_nonfinite_gradient_is_a_mismatch(scenario, tmp_path):
    results = {
        0: rank_result(0, grads={"lm_head.weight": grad(diff_sq=math.inf, ref_sq=1.0, problem="nonfinite")}),
        1: rank_result(1, grads={"lm_head.weight": grad(ref_sq=1.0)}),
    }
    record = judge(raw_run(scenario, tmp_path, results))
    assert record.outcome == "mismatch"
    assert record.measures.parity.grad_worst_rel == "inf"  # JSON has no infinity
    assert record.measures.parity.grad_worst_param == "lm_head.weight"
    assert record.measures.parity.grad_problems == ["lm_head.weight: nonfinite"]
    assert any("nonfinite" in w for w in record.verdict.failure_words())


def test_nonfinite_output_is_a_mismatch(scenario, tmp_path):
    results = {0: rank_result(0, lp=math.inf), 1: rank_result(1)}
    record = judge(raw_run(scenario, tmp_path, results))
    assert record.outcome == "mismatch" and record.measures.parity.logprob_max_abs == "inf"


# ---------------------------------------------------------------------------------------------- errors


def test_any_rank_error_is_an_error_and_the_root_cause_is_chosen(scenario, tmp_path):
    crash = error(1, "forward", "aten.mm.default got mixed torch.Tensor and DTensor")
    fallout = error(0, "backward", "[gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4321")
    record = judge(
        raw_run(scenario, tmp_path, {0: rank_result(0, error=fallout), 1: rank_result(1, error=crash)}, returncode=1)
    )
    assert record.outcome == "error"
    assert record.verdict.error.rank == 1 and record.verdict.error.phase == "forward"
    assert "mixed torch.Tensor and DTensor" in record.verdict.error.message
    assert [e.rank for e in record.verdict.rank_errors] == [0, 1]
    assert record.measures.parity is None


def test_transport_error_loses_to_a_later_real_error(scenario, tmp_path):
    # The peer's transport failure shows in an earlier phase than the real error; still the real one is chosen.
    fallout = error(0, "wrap", "Connection closed by peer")
    crash = error(1, "forward", "expected m1 and m2 to have the same dtype")
    record = judge(raw_run(scenario, tmp_path, {0: rank_result(0, error=fallout), 1: rank_result(1, error=crash)}))
    assert record.outcome == "error" and record.verdict.error.rank == 1


def test_earliest_phase_then_lowest_rank(scenario, tmp_path):
    late = error(0, "backward", "shape mismatch")
    early = error(1, "forward", "shape mismatch")
    record = judge(raw_run(scenario, tmp_path, {0: rank_result(0, error=late), 1: rank_result(1, error=early)}))
    assert record.verdict.error.rank == 1
    same = {r: rank_result(r, error=error(r, "forward", "shape mismatch")) for r in range(2)}
    assert judge(raw_run(scenario, tmp_path, same)).verdict.error.rank == 0


def test_one_rank_errors_the_other_finishes(scenario, tmp_path):
    results = {0: rank_result(0), 1: rank_result(1, error=error(1, "compare", "boom"))}
    record = judge(raw_run(scenario, tmp_path, results, returncode=1))
    assert record.outcome == "error" and record.verdict.error.message == "boom"


def test_lost_rank_without_errors_is_rank_lost(scenario, tmp_path):
    (tmp_path / "progress_rank1").write_text("4242 backward")
    raw = raw_run(scenario, tmp_path, {0: rank_result(0)}, log_tail="...\nSignal 9 (SIGKILL) received by PID 4242\n")
    raw.returncode = 1
    record = judge(raw)
    assert record.outcome == "error"
    assert record.verdict.error.type == "RankLost"
    assert record.verdict.error.rank == 1 and record.verdict.error.phase == "backward"
    assert "[1]" in record.verdict.error.message and "exit 1" in record.verdict.error.message
    assert "SIGKILL" in record.verdict.error.message


def test_nonzero_exit_with_every_result_is_still_an_error(scenario, tmp_path):
    raw = raw_run(scenario, tmp_path, {r: rank_result(r) for r in range(2)})
    raw.returncode = 1
    record = judge(raw)
    assert record.outcome == "error" and record.verdict.error.type == "RankLost"


# ---------------------------------------------------------------------------------------------- hang / skipped


def test_timeout_is_a_hang_naming_stuck_ranks_and_their_phase(scenario, tmp_path):
    (tmp_path / "progress_rank0").write_text("1000 done")
    (tmp_path / "progress_rank1").write_text("1001 backward")
    assert rank_progress(tmp_path) == {0: "done", 1: "backward"}
    raw = raw_run(scenario, tmp_path, {0: rank_result(0)}, timed_out=True)
    raw.returncode = None
    record = judge(raw)
    assert record.outcome == "hang"
    assert record.verdict.error.type == "Timeout"
    assert record.verdict.error.rank == [1]
    assert "1: backward" in record.verdict.error.message and f"{scenario.timeout_s:g}s" in record.verdict.error.message
    assert "0: done" not in record.verdict.error.message


def test_hang_with_no_progress_says_not_started_and_keeps_an_error_candidate(scenario, tmp_path):
    crash = error(0, "oracle", "boom")
    raw = raw_run(scenario, tmp_path, {0: rank_result(0, error=crash)}, timed_out=True)
    record = judge(raw)
    assert record.outcome == "hang"  # a timeout outranks the error
    assert "1: not started" in record.verdict.error.message
    assert record.verdict.error.root_cause_candidate.message == "boom"


def test_skipped(scenario, tmp_path):
    record = judge(raw_run(scenario, tmp_path, {}, skipped_reason="needs 2 CUDA device(s), 0 visible"))
    assert record.outcome == "skipped"
    assert record.verdict.skipped_reason == "needs 2 CUDA device(s), 0 visible"
    assert record.measures.parity is None and record.verdict.error is None
    # Nothing measured: the measures group holds only the two names every record has, as None.
    assert record.written()["measures"] == {"parity": None, "comm": None}


def test_skipped_outranks_everything(scenario, tmp_path):
    raw = raw_run(
        scenario,
        tmp_path,
        {0: rank_result(0, error=error(0, "setup", "x"))},
        timed_out=True,
        skipped_reason="the triton fused backend needs CUDA",
    )
    assert judge(raw).outcome == "skipped"


# ---------------------------------------------------------------------------------------------- tolerances


def test_every_precision_has_positive_bounds_above_its_noise_floor():
    precisions = set(typing.get_args(Scenario.model_fields["precision"].annotation))
    assert precisions <= {p for p, _ in TOLERANCES}  # every precision a scenario may name can be judged
    for name, tol in TOLERANCES.items():
        for field in ("logprob_abs", "entropy_abs", "grad_rel"):
            bound = getattr(tol, field)
            assert math.isfinite(bound) and bound > 0, (name, field)
            if field in tol.noise_floor:
                assert bound > tol.noise_floor[field], (name, field)
        assert tolerance_for(*name) is tol
        assert set(tol.as_dict()) == {"logprob_abs", "entropy_abs", "grad_rel", "noise_floor"}


def test_phase_order_matches_the_worker():
    from harness.rank import worker

    for phase in ("setup", "build", "oracle", "patch", "wrap", "compile", "forward", "backward", "compare"):
        assert phase in PHASE_ORDER
        assert phase in worker.__doc__
    assert PHASE_ORDER.index("forward") < PHASE_ORDER.index("backward") < PHASE_ORDER.index("compare")


# ---------------------------------------------------------------------------------------------- killed ranks


def test_torchrun_inside_the_wrapper_tails_every_line_and_skips_only_the_rendezvous_jitter(monkeypatch, tmp_path):
    """Inside the wrapper, torchrun's tee tailers (torch's TailLog, as its PContext runs them) copy every line of a
    rank's log with its prefix, those written while it runs and those left when it is stopped, through
    tail_until_finished; the rendezvous' random first-round delay (a range) is skipped and a fixed delay still
    waits; torch's own are back after."""
    import io

    from torch.distributed.elastic.multiprocessing import tail_log
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous, utils

    from harness.rank import torchrun

    torchs = tail_log.tail_logfile, dynamic_rendezvous._delay, dynamic_rendezvous.get_method_name
    log = tmp_path / "stdout.log"
    log.write_text("first\n")
    copied = io.StringIO()
    slept = []
    with torchrun.quicker_torchrun():
        assert tail_log.tail_logfile is torchrun.tail_until_finished
        tailer = tail_log.TailLog("trainer", {0: str(log)}, copied, {0: "[default0]:"}).start()
        with log.open("a") as more:  # the rank writes on while it runs, and ends
            more.write("second\n")
        tailer.stop()
        # The tailer's thread has ended: from here only _delay sleeps (through its module's time).
        monkeypatch.setattr(utils.time, "sleep", slept.append)
        dynamic_rendezvous._delay(seconds=(0, 0.3))
        dynamic_rendezvous._delay(seconds=1)
    assert copied.getvalue() == "[default0]:first\n[default0]:second\n"
    assert slept == [1]
    assert (tail_log.tail_logfile, dynamic_rendezvous._delay, dynamic_rendezvous.get_method_name) == torchs


def test_a_line_written_just_before_the_stop_is_copied(tmp_path):
    """The rank writes its last line and torchrun stops the tailer between the tailer's empty read and its look at
    the stop: that line is still copied."""
    import io

    from harness.rank.torchrun import tail_until_finished

    log = tmp_path / "stdout.log"
    log.write_text("first\n")
    copied = io.StringIO()

    class StoppedOnceFirstIsCopied:
        stopped = False

        def is_set(self):
            if not self.stopped and copied.getvalue():
                with log.open("a") as more:  # the last line, then the stop
                    more.write("second\n")
                self.stopped = True
            return self.stopped

        def wait(self, timeout):
            return self.is_set()

    tail_until_finished("[default0]:", str(log), copied, StoppedOnceFirstIsCopied(), 0.1, lambda _: True)
    assert copied.getvalue() == "[default0]:first\n[default0]:second\n"


def test_a_tailer_stopped_before_its_file_exists_ends_and_copies_nothing(tmp_path):
    import io
    import threading

    from harness.rank.torchrun import tail_until_finished

    finished, copied = threading.Event(), io.StringIO()
    finished.set()
    tail_until_finished("[default0]:", str(tmp_path / "never.log"), copied, finished, 0.1, lambda _: True)
    assert copied.getvalue() == ""


def test_the_rendezvous_method_names_are_those_torch_finds():
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    from harness.rank import torchrun

    def recorded(find):  # as DynamicRendezvousHandler._record calls it, from the method it names
        return find()

    def next_rendezvous(find):
        return recorded(find)

    for depth in (1, 2, 3, 50):
        torchs = next_rendezvous(lambda d=depth: dynamic_rendezvous.get_method_name(d))
        assert next_rendezvous(lambda d=depth: torchrun.method_name(d)) == torchs
    # Called straight from _record, the name two frames up is the method that recorded.
    assert next_rendezvous(torchrun.method_name) == "next_rendezvous"


def test_rank_signals_are_read_from_the_failures_torchruns_wrapper_wrote(monkeypatch, tmp_path):
    """torchrun raises ChildFailedError naming each failed rank's exit code; the wrapper writes them to the run dir
    and lets the error go on as torchrun's own; the driver reads which rank a signal ended from that file."""
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from harness.launch.run_dir import rank_signals
    from harness.rank import torchrun

    failures = {
        0: ProcessFailure(local_rank=0, pid=6054, exitcode=-15, error_file="<N/A>"),
        1: ProcessFailure(local_rank=1, pid=6055, exitcode=-9, error_file="<N/A>"),
        2: ProcessFailure(local_rank=2, pid=6056, exitcode=1, error_file="<N/A>"),
    }

    def failing_torchrun(args):
        assert args == ["--standalone", "script.py"]
        raise ChildFailedError("harness.rank.worker", failures)

    monkeypatch.setattr(run, "main", failing_torchrun)
    path = tmp_path / "torchrun-failures.json"
    with pytest.raises(ChildFailedError):
        torchrun.main([str(path), "--standalone", "script.py"])
    assert rank_signals(path) == {0: "SIGTERM", 1: "SIGKILL"}
    assert json.loads(path.read_text())["2"] == {"exitcode": 1, "signal": None}
    assert rank_signals(tmp_path / "absent.json") == {}  # no rank failed, or torchrun itself was killed
    assert torchrun.signal_name(-200) == "signal 200"


def test_a_rank_killed_by_a_signal_is_the_root_cause_over_its_peers_transport_error(scenario, tmp_path):
    transport = error(0, "forward", "Connection closed by peer [127.0.0.1]:1234")
    raw = raw_run(scenario, tmp_path, {0: rank_result(0, error=transport)}, returncode=1, rank_signals={1: "SIGKILL"})
    (tmp_path / "progress_rank1").write_text("999 forward")
    record = judge(raw)
    assert record.outcome == "error"
    err = record.verdict.error
    assert (err.type, err.rank, err.signal, err.phase) == ("RankKilled", 1, "SIGKILL", "forward")
    assert [e.written() for e in record.verdict.rank_errors] == [transport]


# ---------------------------------------------------------------------------------------------- gradient scale


def _named_grads(entries):
    return {
        name: {"diff_sq": d, "ref_sq": r, "max_abs": 0.0, "problem": None, "numel": n}
        for name, (d, r, n) in entries.items()
    }


def test_tiny_gradient_is_judged_against_its_share_of_the_models_gradient_not_its_own_norm(scenario, tmp_path):
    # 1000 elements in all; the big parameter carries the gradient. The tiny one (4 elements, norm 1e-4 of an
    # even share) is off by 1e-3 of its own norm: rounding next to the model's gradient, not a defect.
    grads = _named_grads({"model.big.weight": (0.0, 1.0, 996), "model.tiny.dt_bias": ((1e-3 * 1e-6) ** 2, 1e-12, 4)})
    raw = raw_run(scenario, tmp_path, {0: rank_result(0, grads=grads), 1: rank_result(1, grads=grads)})
    record = judge(raw)
    assert record.outcome == "pass", record.verdict.failures
    assert record.measures.parity.grad_worst_rel < 1e-6


def test_a_defect_of_ordinary_gradient_size_is_still_judged_by_its_own_norm(scenario, tmp_path):
    # lm_head's gradient is above its even share (as on every model measured): its own norm is the scale.
    grads = _named_grads({"lm_head.weight": (0.75, 0.75, 500), "model.other.weight": (0.0, 0.25, 500)})
    raw = raw_run(scenario, tmp_path, {0: rank_result(0, grads=grads), 1: rank_result(1, grads=grads)})
    record = judge(raw)
    assert record.outcome == "mismatch"
    assert record.measures.parity.grads_over_tolerance == {"lm_head.weight": 1.0}
