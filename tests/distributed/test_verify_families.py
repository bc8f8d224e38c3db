"""A fix of one model family judged on both (issue 57): the Qwen3.5-only fix (tests/fixtures/family_fixes/
qwen3-5-only.diff, the candidate's change to qwen3_5.py alone) passes Qwen3.5's scenarios through verl's engine and
fails, named, on Qwen3-VL's, whose qwen3_vl.py keeps #6659's full_tensor(); the closing block says which family file
still gathers lm_head by hand. Which scenarios the default verify adds for which patch:
tests/unit/plan/test_families.py. Three cells (--alone: none's and upstream's outcomes from expectations.yaml), the
command through harness.cli.main in this process (cli_in_process: its subject is what verify prints and writes, not
a fresh interpreter's start and imports, 1-2.5 s of CPU; its cells are launched as a subprocess CLI's are). The
Qwen3-VL-only fix's closing line (qwen3_5.py still gathers lm_head by hand) is checked on the verify of the candidate
that tests/distributed/test_verify_rerun_report.py's flow runs anyway (its test_verify_of_a_qwen3_vl_only_fix_...)."""

from __future__ import annotations

import json
from pathlib import Path

QWEN3_5_ONLY = Path(__file__).parent.parent / "fixtures/family_fixes/qwen3-5-only.diff"


def test_a_qwen3_5_only_fix_passes_qwen3_5s_scenarios_and_fails_named_on_qwen3_vls(cli_in_process, tmp_path):
    out = tmp_path / "records.json"
    scenarios = ["fsdp2-multigpu", "engine-qwen3-5-multigpu", "engine-qwen3-5-update-3"]
    chosen = [arg for name in scenarios for arg in ("--scenario", name)]
    done = cli_in_process("verify", "--patch", str(QWEN3_5_ONLY), *chosen, "--alone", "--json", str(out))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    outcomes = {r["scenario"]: r["outcome"] for r in json.loads(out.read_text()) if r["arm"] == "qwen3-5-only"}
    assert outcomes == {
        "fsdp2-multigpu": "mismatch",
        "engine-qwen3-5-multigpu": "pass",
        "engine-qwen3-5-update-3": "pass",
    }
    lines = done.stdout.splitlines()
    assert "failures of qwen3-5-only, by cause:" in lines, done.stdout[-3000:]
    cause = next(line for line in lines if line.endswith(": fsdp2-multigpu"))
    assert cause.startswith("  grad lm_head.weight: this rank's gradient only, not reduced across ranks"), cause
    assert any(line.startswith("verdict: qwen3-5-only FAILS in 1 of 3 scenario(s)") for line in lines), lines[-12:]
    families = " ".join(line.strip() for line in lines if line.startswith(("families: ", "  ")))
    assert "qwen3_vl.py still gathers lm_head by hand (1 scenario(s) above)" in families, done.stdout[-3000:]
    assert "qwen3_5.py no longer reads lm_head.weight outside lm_head (2 scenario(s) above)" in families, families
