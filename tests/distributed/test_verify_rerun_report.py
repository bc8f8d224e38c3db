"""verify -> rerun -> report as a user runs them (`python -m harness ...`, fresh interpreters, real torchrun runs;
upstream's verify in this process).

The flow runs once per pytest process (a session fixture) and each test checks one thing of it:

- verify of a candidate diff passes, and writes records carrying what a rerun needs (the diff's own text); where
  it fails as upstream is expected to (a known verl defect), that is not counted against it; its closing block names
  the family files the candidate (a Qwen3-VL-only fix) leaves with #6659's defect;
- the diff file is then deleted, and `rerun` of the record still runs the same arm from the stored text;
- verify of upstream fails, naming the failing cell and its parameter, and the `report --full` line it prints works;
- a record that a pytest scenario item wrote (conftest.py) reruns as well (in this process: the rerun as a user runs
  it is the flow's).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.paths import PATCHES_DIR
from harness.records.store import load_records

CANDIDATE = PATCHES_DIR / "fsdp2-lmhead-forward.diff"
KNOWN_DEFECT = "engine-same-length"  # errors in every arm with verl 0.9.1's packed position-id defect


# Its tests share one group: a session fixture runs once per pytest process that asks for it, and spread over
# `make test`'s two processes the flow ran twice.
@pytest.fixture(scope="session")
def flow(session_cli, tmp_path_factory):
    work = tmp_path_factory.mktemp("flow")
    # The candidate under a name of the user's own: its file is deleted before the rerun.
    mine = work / "mine-fix.diff"
    mine.write_text(CANDIDATE.read_text())
    out = work / "candidate.json"
    # Beside fsdp2-multigpu, engine-same-length (nightly: named, it runs), where the candidate fails as upstream is
    # expected to: one verify of the two, not a command each.
    scenarios = ["--scenario", "fsdp2-multigpu", "--scenario", KNOWN_DEFECT, "--nightly"]
    candidate = session_cli("verify", "--patch", mine, *scenarios, "--alone", "--json", out)
    mine_text = mine.read_text()
    mine.unlink()
    # The --json list's entry of fsdp2-multigpu (FILE:N counts from 1), the one that passes, is rerun.
    line = None
    if candidate.returncode == 0:
        line = 1 + [r["scenario"] for r in json.loads(out.read_text())].index("fsdp2-multigpu")
    rerun = session_cli("rerun", f"{out}:{line}") if line else None
    return SimpleNamespace(candidate=candidate, out=out, line=line, mine_text=mine_text, rerun=rerun)


def _shown(done: subprocess.CompletedProcess) -> str:
    return done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.xdist_group("verify-flow")
def test_verify_of_a_candidate_passes_and_its_record_says_what_ran(flow):
    assert flow.candidate.returncode == 0, _shown(flow.candidate)
    written = json.loads(flow.out.read_text())  # the --json list, as a script reads it
    records = load_records(flow.out)
    assert sorted((r.scenario, r.arm, r.outcome) for r in records) == [
        (KNOWN_DEFECT, "mine-fix", "error"),
        ("fsdp2-multigpu", "mine-fix", "pass"),
    ]
    index = flow.line - 1  # fsdp2-multigpu's
    for key in (
        "scenario",
        "arm",
        "world_size",
        "device",
        "backend",
        "outcome",
        "wall_s",
    ):
        assert key in written[index]
    assert "error" in written[index]["verdict"] and "versions" in written[index]["stamp"]
    assert {"parity", "comm"} <= set(written[index]["measures"])
    # A record keeps the text of every diff its arm applied: rerun materialises the arm from it.
    assert all(r.stamp.arm_patches[0].text == flow.mine_text for r in records)


@pytest.mark.xdist_group("verify-flow")
def test_verify_of_a_qwen3_vl_only_fix_is_told_that_qwen3_5_py_still_gathers_lm_head_by_hand(flow):
    """The candidate (patches/fsdp2-lmhead-forward.diff, under the user's name) fixes qwen3_vl.py only: verify's
    closing block, before its verdict line, names the family files it leaves with #6659's defect, unrun (issue 57;
    its Qwen3.5-only counterpart: tests/distributed/test_verify_families.py)."""
    assert flow.candidate.returncode == 0, _shown(flow.candidate)
    lines = flow.candidate.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("families: "))
    verdict = next(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    assert at < verdict, lines[at:]
    families = " ".join(line.strip() for line in lines[at:verdict])
    assert "qwen3_5.py still gathers lm_head by hand (not run: the patch does not touch it)" in families, families
    assert "qwen2_vl.py, dense_common.py, glm4v.py still read the sharded lm_head weight" in families, families


@pytest.mark.xdist_group("verify-flow")
def test_rerun_after_the_patch_file_is_gone_gives_the_same_outcome(flow):
    assert flow.rerun is not None, "verify of the candidate failed: " + _shown(flow.candidate)
    assert flow.rerun.returncode == 0, _shown(flow.rerun)
    assert "same as the stored record's pass" in flow.rerun.stdout and "no longer exists" in flow.rerun.stderr
    # The two rows say which is the stored record and which the new run.
    rows = [line for line in flow.rerun.stdout.splitlines() if line.startswith("| ") and "fsdp2-multigpu" in line]
    assert [r.split("|")[1].strip() for r in rows] == ["stored record", "new run"], flow.rerun.stdout
    assert f"stored record: {flow.out}:{flow.line}" in flow.rerun.stdout and "new run: " in flow.rerun.stdout


# The verify of upstream is the flow's too, and needs none of the rest: it runs in fsdp2-multigpu's process, where
# test_determinism_and_gather_bytes.py compares its record with the scenario item's (conftest.py upstream_verified).
@pytest.mark.xdist_group("fsdp2-multigpu")
def test_verify_of_upstream_fails_naming_the_cell_and_the_report_line_it_prints_works(upstream_verified, session_cli):
    upstream, _ = upstream_verified
    assert upstream.returncode == 1, _shown(upstream)
    # The closing block names the failing cell under its cause (render/verify_closing.py; commands/run.py prints it).
    lines = upstream.stdout.splitlines()
    assert "failures of upstream, by cause:" in lines, upstream.stdout
    assert any("lm_head.weight" in line and line.endswith(": fsdp2-multigpu") for line in lines), upstream.stdout
    [line] = [line.strip() for line in upstream.stdout.splitlines() if "harness report --full" in line]
    ref = line.split()[-1]
    assert ref.endswith(":1"), line
    assert ref.startswith(str(session_cli.results_dir)), line  # the results file of the user's own results dir
    report = session_cli("report", "--full", ref, timeout=120)
    assert report.returncode == 0, _shown(report)
    assert "fsdp2-multigpu" in report.stdout and "lm_head.weight" in report.stdout, report.stdout


@pytest.mark.xdist_group("fsdp2-1gpu")
def test_a_record_written_by_a_pytest_scenario_item_can_be_rerun(shared_cell_ref, capsys):
    """Scenario items (conftest.py) go through the same runner as the commands, so their records carry the
    scenario as it ran; rerun of one replays it. The record is fsdp2-1gpu x upstream's item's, as this process
    wrote it to its results file; the rerun, as a user's, is the flow's above: here it runs in this process."""
    from harness.cli import main

    assert main(["rerun", shared_cell_ref("fsdp2-1gpu", "upstream")]) == 0
    assert "same as the stored record's pass" in capsys.readouterr().out


@pytest.mark.xdist_group("verify-flow")
def test_verify_does_not_count_a_known_upstream_defect_against_the_candidate(flow):
    """engine-same-length errors in every arm with verl 0.9.1's packed position-id defect (expectations.yaml's
    known_defect): the candidate fails there exactly as upstream is expected to, so its verdict is exit 0."""
    done = flow.candidate
    assert done.returncode == 0, _shown(done)
    assert "engine-same-length: error: same as upstream: verl 0.9.1's packed position ids" in done.stdout
    assert "upstream not run: --alone" in done.stdout
    assert "why: no known pattern" not in done.stdout and "as_nested_tensor" in done.stdout


# Its cell is test_wrong_patches.py's unfused-lm-head: one verify run (verified_once) in one process serves both.
@pytest.mark.xdist_group("verify-unfused-lm-head")
def test_verify_alone_flags_an_unfused_fix_with_the_sizes(verified_once):
    """The unfused fix passes engine-long-sequences-1gpu (a scenario of the default verify: no --nightly) but builds its
    whole tokens x vocab logits; verl's fused head's bound (one chunk, read from the installed verl) is known without
    running upstream, so --alone flags it too."""
    unfused = Path(__file__).parent.parent / "fixtures" / "wrong_patches" / "unfused-lm-head.diff"
    done, _ = verified_once(str(unfused), "engine-long-sequences-1gpu")
    assert done.returncode == 0, _shown(done)
    verdict = next(line for line in done.stdout.splitlines() if line.startswith("verdict: "))
    assert verdict.startswith("verdict: unfused-lm-head passes all 1 scenario(s)"), verdict
    assert re.search(
        r"FLAG: larger tokens x vocab logits than upstream's fused head in 1 scenario\(s\) "
        r"\(engine-long-sequences-1gpu: \d+ x 256 > 512 x 256\)",
        verdict,
    ), verdict
    assert "at most 512 x 256 at once (FusedLinearForPPO's default chunk_size" in done.stdout
    # The picture a reviewer pastes: PNG beside SVG in the results directory.
    assert "picture: " in done.stdout
    png = verified_once.results_dir / "verify-unfused-lm-head.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
