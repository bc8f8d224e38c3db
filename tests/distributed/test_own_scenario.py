"""A user's own scenario, as a user adds and runs one: a YAML file in their checkout's scenarios/, `python -m
harness run`, and the expectations.yaml stub it prints for the cells that have none. The scenario is `ranks: 3`:
the tiny vocabulary (256) does not divide by 3, and FSDP2 shards it unevenly; the verdicts are those at 2 ranks."""

from __future__ import annotations

from user_checkout import copy_checkout, harness_in  # tests/user_checkout.py (tests/ is on sys.path)

from harness.inputs.expectations import load_expectations


def test_an_own_scenario_runs_and_gets_a_paste_ready_expectations_stub(tmp_path):
    checkout = copy_checkout(tmp_path)
    (checkout / "scenarios/mine-three-ranks.yaml").write_text(
        "description: three ranks, vocabulary 256 not divisible by them\npath: engine\nranks: 3\n"
    )
    done = harness_in(
        checkout,
        "run",
        "--scenario",
        "mine-three-ranks",
        "--arm",
        "upstream",
        "--arm",
        "none",
        results=tmp_path / "results",
        timeout=600,
        share_parent=True,  # the subject is the user's scenario file, not the command's process tree
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    head = "no expectation for some cells; observed, for scenarios/expectations.yaml (write each reason):\n"
    assert head in done.stdout, done.stdout
    stub = done.stdout.split(head, 1)[1]
    assert stub.startswith("mine-three-ranks:\n  upstream:\n    outcome: mismatch\n"), stub
    assert "    failing_grads: [lm_head.weight]\n" in stub and "    reason: TODO\n" in stub
    # Pasted as printed, with the reasons written, it is a valid entry of expectations.yaml.
    expectations = checkout / "scenarios/expectations.yaml"
    expectations.write_text(expectations.read_text() + stub.replace("reason: TODO", "reason: seen at three ranks"))
    entries = load_expectations(expectations)["mine-three-ranks"]
    assert entries["upstream"].outcome == "mismatch" and entries["none"].outcome == "error"
    assert "mixed torch.Tensor and DTensor" in entries["none"].error_contains
