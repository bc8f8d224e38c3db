"""`python -m harness` as a user runs it: exit codes, one-line errors, and no launch before a usage error.

Every case here fails (or finishes) before harness.launch.launch is reached, so none starts torchrun. A real
interpreter (`harness_cli`) runs list, a report's and a run's usage error, and a verify whose patch does not apply;
the other commands' output and exit codes are read through harness.cli.main in this process (`cli_in_process`).
"""

from __future__ import annotations

import json

import pytest

from harness.errors import UsageError
from harness.paths import PATCHES_DIR

SHIPPED = ["fsdp2-1gpu", "fsdp2-compile", "fsdp2-cpu-offload", "fsdp2-multigpu"]


def test_list_names_scenarios_and_arms(harness_cli):
    done = harness_cli("list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for name in SHIPPED:
        assert any(line.startswith(name + " ") for line in lines), done.stdout
    # An engine scenario names the trainer whose batch its engine gets; a direct one has none.
    shown = {line.split()[0]: line for line in lines if line and not line.startswith(" ")}
    assert " trainer=v1 " in shown["engine-v1"] and " trainer=ray " in shown["fsdp2-multigpu"]
    assert "trainer=" not in shown["direct-multigpu"]
    arms_line = [line for line in lines if line.startswith("arms: ")]
    assert len(arms_line) == 1
    assert {"none", "upstream"} <= {a.strip() for a in arms_line[0].removeprefix("arms: ").split(",")}


def test_list_says_when_a_scenario_has_no_expectations_and_introduces_every_arm(tmp_path, monkeypatch, capsys):
    import argparse

    from harness.commands import inspect
    from harness.inputs.scenario import load_all, load_scenario

    (tmp_path / "brand-new.yaml").write_text("ranks: 2\ndescription: not in expectations.yaml yet\n")
    monkeypatch.setattr(inspect, "load_each", lambda: (load_all() + [load_scenario(tmp_path / "brand-new.yaml")], []))
    assert inspect.cmd_list(argparse.Namespace(names=False)) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("brand-new "))
    assert "no entry in scenarios/expectations.yaml" in lines[at + 1]
    assert sum("no entry in scenarios/expectations.yaml" in line for line in lines) == 1  # shipped ones have one
    glm = next(line for line in lines if line.strip().startswith("glm4v-vision "))
    assert "not the lm_head fix" in glm


def test_report_of_an_empty_file(tmp_path, harness_cli):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    message = harness_cli.usage_error("report", empty)
    assert str(empty) in message and "no records" in message


def test_report_of_a_missing_file(tmp_path, cli_in_process):
    message = cli_in_process.usage_error("report", tmp_path / "absent.jsonl")
    assert "absent.jsonl" in message


def test_report_of_a_corrupt_file(tmp_path, cli_in_process):
    path = tmp_path / "corrupt.jsonl"
    path.write_text('{"scenario": "a"}\nnot json at all\n{"scenario": "b"}\n')
    assert "corrupt.jsonl" in cli_in_process.usage_error("report", path)


def test_report_of_two_records(tmp_path, monkeypatch, cli_in_process, record):
    monkeypatch.setenv("HARNESS_RESULTS_DIR", str(tmp_path / "results"))  # where the pictures go
    error = {
        "type": "RuntimeError",
        "message": "aten.mm.default got mixed torch.Tensor and DTensor",
        "phase": "forward",
    }
    records = [
        record(scenario="fsdp2-1gpu", world_size=1, wall_s=12.3).written(),
        record(arm="none", outcome="error", wall_s=9.0, parity=None, comm=None, error={**error, "rank": 0}).written(),
    ]
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"scenario": "cut sh')  # killed mid-line
    done = cli_in_process("report", path)
    assert done.returncode == 0, done.stderr
    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 3  # header + two records; the truncated last line is not a record
    assert "fsdp2-1gpu" in table[1] and "pass" in table[1] and "upstream" in table[1]
    assert "fsdp2-multigpu" in table[2] and "error" in table[2] and "mixed torch.Tensor" in table[2]
    assert "1 error, 1 pass" in done.stdout
    assert "verl 0.9.1" in done.stdout


def test_run_unknown_scenario_stops_before_any_launch(harness_cli):
    message = harness_cli.usage_error("run", "--scenario", "nope")
    assert "'nope'" in message
    for name in SHIPPED:
        assert name in message


def test_verify_missing_patch_file(cli_in_process):
    message = cli_in_process.usage_error("verify", "--patch", "/nonexistent/x.diff")
    assert "/nonexistent/x.diff" in message and "no such patch file" in message


def test_verify_of_nightly_scenarios_only_says_to_add_nightly():
    # Default verify runs what make test runs: a scenario tagged nightly only with --nightly (or named).
    from harness.commands.run import verify_scenarios
    from harness.inputs.scenario import load_chosen

    with pytest.raises(UsageError) as caught:
        verify_scenarios(load_chosen(["fsdp2-compile-inductor"]), nightly=False)
    message = str(caught.value)
    assert "fsdp2-compile-inductor" in message and "tagged nightly" in message and "--nightly" in message


def test_verify_runs_the_nightly_scenarios_only_with_nightly():
    from harness.commands.run import verify_scenarios
    from harness.inputs.scenario import load_all

    scenarios = load_all()
    nightly = [s.name for s in scenarios if "nightly" in s.tags]
    assert "fsdp2-compile-inductor" in nightly
    kept, left_out = verify_scenarios(scenarios, nightly=False)
    assert [s.name for s in left_out] == nightly
    assert [s.name for s in kept] == [s.name for s in scenarios if s.name not in nightly]
    assert verify_scenarios(scenarios, nightly=True) == (scenarios, [])


def test_verify_patch_that_does_not_apply_is_a_skipped_row_and_not_judged(tmp_path, harness_cli):
    """A patch written for another verl: its cells are skipped rows naming the diff, hunk and file, and the verdict
    says it was not judged (exit 2). --alone: nothing else is planned, so nothing launches."""
    text = (PATCHES_DIR / "none.diff").read_text()
    stale = text.replace(" import torch\n", " import torch as th\n")
    assert stale != text
    diff = tmp_path / "stale-fix.diff"
    diff.write_text(stale)
    # Guard: should the diff ever apply, the command below would launch runs; fail here instead.
    from harness.errors import UsageError
    from harness.plan import arms

    with pytest.raises(UsageError):
        arms.materialise(arms.resolve_arm(str(diff)))
    done = harness_cli("verify", "--patch", diff, "--scenario", "fsdp2-1gpu", "--alone", timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "| fsdp2-1gpu | 1 | stale-fix | skipped |" in done.stdout
    verdict = next(line for line in done.stdout.splitlines() if line.startswith("verdict: "))
    assert "stale-fix NOT JUDGED: it does not apply to this verl" in verdict
    assert "hunk #1 (@@ -19,7 +19,6 @@) of verl/models/transformers/qwen3_vl.py" in verdict
    from harness.records.store import load_records

    [record] = load_records(harness_cli.results_files("verify")[-1])
    assert record.outcome == "skipped" and record.run_dir is None  # recorded, never launched
    assert record.verdict.not_applied.file == "verl/models/transformers/qwen3_vl.py"
    assert record.verdict.not_applied.hunk == "hunk #1 (@@ -19,7 +19,6 @@)"


def test_unknown_arm_for_run(cli_in_process):
    message = cli_in_process.usage_error("run", "--arm", "no-such-arm", "--scenario", "fsdp2-1gpu")
    assert "no-such-arm" in message and "upstream" in message


def test_report_full_prints_error_traceback_diagnosis_and_log_path(tmp_path, cli_in_process, record):
    failed = record(
        arm="none",
        outcome="error",
        parity=None,
        run_dir=".cache/runs/ab12cd34/fsdp2-multigpu__none",
        why="sharded lm_head.weight read outside its FSDP unit's forward by aten.mm",
        diagnosis={"error": {"class": "dtensor-outside-fsdp-forward", "object": "lm_head.weight"}},
        error={
            "type": "RuntimeError",
            "message": "aten.mm.default got mixed torch.Tensor and DTensor",
            "full_message": "aten.mm.default got mixed torch.Tensor and DTensor, need to convert all",
            "phase": "forward",
            "rank": 0,
            "traceback_tail": "Traceback (most recent call last):\n"
            '  File "t.py", line 42, in _fused_linear_for_ppo_fwd\nRuntimeError: boom',
        },
        rank_errors=[{"rank": 1, "phase": "forward", "type": "RuntimeError", "message": "same on 1"}],
    ).written()
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"scenario": "x", "arm": "y", "outcome": "pass"}) + "\n" + json.dumps(failed) + "\n")
    done = cli_in_process("report", "--full", f"{path}:2")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "need to convert all" in out and "in _fused_linear_for_ppo_fwd" in out and "RuntimeError: boom" in out
    assert "why: sharded lm_head.weight read outside its FSDP unit's forward" in out
    assert "dtensor-outside-fsdp-forward" in out and "rank 1 (phase forward)" in out
    assert ".cache/runs/ab12cd34/fsdp2-multigpu__none/torchrun.log" in out


def test_report_full_starts_a_cut_traceback_at_a_line_and_skips_an_empty_error_class(tmp_path, cli_in_process):
    """The rank keeps a traceback's last 3000 characters: shown from the first whole line. An error of no known
    class gets no 'error class -, concerning -' line (the why line says 'no known pattern')."""
    frame = '  File "/site/transformers/masking_utils.py", line 184, in inner_mask\n    return mask[b, q]\n'
    tail = ("x" * 20 + frame * 40)[-3000:]
    assert not tail.startswith("  File")  # cut mid-line, as a rank cuts it
    record = {
        "scenario": "s",
        "arm": "a",
        "outcome": "error",
        "why": "no known pattern",
        "diagnosis": {"error": {"class": None, "object": None, "text": "no known pattern"}},
        "error": {
            "type": "IndexError",
            "message": "index 16 is out of bounds",
            "rank": 0,
            "phase": "forward",
            "traceback_tail": tail,
        },
    }
    path = tmp_path / "cut.jsonl"
    path.write_text(json.dumps(record) + "\n")
    done = cli_in_process("report", "--full", path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = lines.index("traceback tail (rank 0):")
    assert lines[start + 1] == "  ..." and lines[start + 2].startswith(('  File "', "    return"))
    assert "error class" not in done.stdout and "concerning -" not in done.stdout


def test_report_without_a_file_says_which_file_it_printed(tmp_path, cli_in_process):
    older, newer = tmp_path / "20260101T000000Z-run-1.jsonl", tmp_path / "20260102T000000Z-run-2.jsonl"
    for path, arm in ((older, "old"), (newer, "new")):
        path.write_text(json.dumps({"scenario": "s", "arm": arm, "outcome": "pass"}) + "\n")
    done = cli_in_process("report", timeout=60, env={"HARNESS_RESULTS_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("the newest results file: ") and str(newer) in first and "1 record" in first
    assert "| new " in done.stdout and "| old " not in done.stdout


def test_report_fits_the_terminals_120_columns_with_a_long_tree_path(tmp_path, cli_in_process):
    # A maintainer's checkout under a deep path: the versions line is then longer than a terminal's width.
    tree = {"path": "/home/maintainer/src/" + "verl-checkout-for-review/" * 2, "ref": "main", "commit": "1dda039b9c63"}
    stamp = {"host": "AMD EPYC, 2 cores", "harness_commit": "0" * 12, "verl_tree": tree}
    stamp["versions"] = {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.10.4", "verl": "0.10.0.dev"}
    record = {"scenario": "fsdp2-multigpu", "arm": "upstream", "outcome": "pass", "stamp": stamp}
    path = tmp_path / "20260101T000000Z-run-1.jsonl"
    path.write_text(json.dumps(record) + "\n")
    done = cli_in_process("report", timeout=60, env={"HARNESS_RESULTS_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "verl-checkout-for-review" in done.stdout
    # The first line names the results file by its path (here pytest's own deep tmp_path), kept whole.
    assert max(len(line) for line in done.stdout.splitlines()[1:]) <= 120, done.stdout


def test_rerun_refuses_a_stored_diff_whose_text_does_not_match_its_hash(tmp_path, cli_in_process, scenario):
    spec = json.loads(scenario("direct-1gpu").model_dump_json())
    text = (PATCHES_DIR / "none.diff").read_text()
    record = {
        "scenario": "direct-1gpu",
        "arm": "gone",
        "outcome": "error",
        "scenario_spec": spec,
        "arm_patches": [{"file": str(tmp_path / "gone.diff"), "sha256": "0" * 64, "text": text}],
    }
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record) + "\n")
    message = cli_in_process.usage_error("rerun", f"{path}:1")
    assert "field 'stamp.arm_patches'" in message and "does not match its sha256" in message


def test_a_stored_diff_is_written_back_as_it_was(tmp_path):
    import hashlib

    from harness.plan.arms import patch_from_text

    text = (PATCHES_DIR / "none.diff").read_text()
    path = patch_from_text(text, hashlib.sha256(text.encode()).hexdigest(), "tmp/gone/mine.diff", "r.jsonl:1")
    assert path.name == "mine.diff" and path.read_text() == text
