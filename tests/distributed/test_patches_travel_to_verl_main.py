"""The project's patches on verl's real main (a clone at $HARNESS_VERL_REPO; skipped, saying why, without one: CI has
none), one scenario, as `make repro VERL=<main>` runs it:

- `none` (written against the installed 0.9.1) does not apply as is: main's `FusedLinearForPPO()` line, the context
  of its second hunk, is 0.9.1's `FusedLinearForPPO(impl_backend=...)`. It is merged three-way with the installed
  verl, the record says so, and the merged file is main's own file from before #6659: the crash, again;
- upstream is main as it is: #6659's unreduced lm_head gradient;
- the candidate leaves verl's own FusedLinearForPPO line alone (that line is its context, not one of its changes):
  merged onto main the same way, it passes; so does the candidate in every family file (`-all`);
- a diff that replaces that very line (tests/fixtures/wrong_patches/unfused-lm-head.diff) is a real conflict: a
  skipped row naming the hunk and main's line, and how to make a patch for main;
- a patch made with `patch start --verl` on main (the candidate carried onto main's copy) applies there as it is and
  passes.
"""

from __future__ import annotations

import json

import pytest

from harness.paths import INSTALLED_VERL_ENV, PATCHES_DIR, ROOT
from harness.plan.arms import installed_verl_dir
from harness.plan.diffs import ENCODING, applied
from harness.processes.wire import KEEP
from harness.records.results import Record

pytestmark = pytest.mark.verl_repo

# verl main of 2026-08-22 (the commit this was measured on; a clone's main moves on).
MAIN = "1dda039b9c6311889a9c9a26040677e1254814f9"
SCENARIO = "fsdp2-multigpu"
QWEN3_VL = "verl/models/transformers/qwen3_vl.py"
UNFUSED = ROOT / "tests" / "fixtures" / "wrong_patches" / "unfused-lm-head.diff"
NO_KEPT_PARENT = {KEEP: "0"}  # the tree's environment starts its own parent; none is left up after the test


def _main(verl_repo):
    from harness import git

    if git.commit_of(verl_repo, MAIN) is None:
        pytest.skip(f"{verl_repo} has no commit {MAIN} (verl main of 2026-08-22)")
    return f"{verl_repo}@{MAIN}"


def _port(harness_cli, spec, tmp_path, monkeypatch):
    """A patch for main as a user makes one: `patch start --verl`, the candidate's change carried onto that copy (a
    three-way merge with the installed verl), `patch diff`."""
    copy = tmp_path / "port"
    done = harness_cli("patch", "start", "--verl", spec, copy, env=NO_KEPT_PARENT)
    assert done.returncode == 0, done.stderr
    candidate = PATCHES_DIR / "fsdp2-lmhead-forward.diff"
    with monkeypatch.context() as patched:  # the candidate's base, as a tree's environment names it
        patched.setenv(INSTALLED_VERL_ENV, str(installed_verl_dir()))
        carried = applied(copy / "verl", [(candidate, candidate.read_bytes())])
    assert len(carried.merges) == 1  # merged: main's FusedLinearForPPO line is not 0.9.1's
    for rel, text in carried.files.items():
        (copy / rel).write_bytes(text.encode(*ENCODING))
    diff = harness_cli("patch", "diff", copy)
    assert diff.returncode == 0, diff.stderr
    assert f"Written against: {spec.rpartition('@')[0]}@{MAIN}\n" in diff.stdout
    port = tmp_path / "fsdp2-lmhead-forward-main.diff"
    port.write_text(diff.stdout)
    return port


def test_the_project_patches_on_verl_main(verl_repo, harness_cli, tmp_path, monkeypatch):
    spec = _main(verl_repo)
    port = _port(harness_cli, spec, tmp_path, monkeypatch)
    out = tmp_path / "run.json"
    arms = ["--arm", "none", "--arm", "upstream", "--arm", "fsdp2-lmhead-forward", "--arm", "fsdp2-lmhead-forward-all"]
    arms += ["--arm", port, "--arm", UNFUSED]
    done = harness_cli("run", "--verl", spec, "--scenario", SCENARIO, *arms, "--json", out, env=NO_KEPT_PARENT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = {d["arm"]: Record.model_validate(d) for d in json.loads(out.read_text())}

    none = records["none"]
    assert none.outcome == "error" and "outside its FSDP unit's forward" in none.verdict.why, none.verdict.why
    [merged] = none.stamp.arm_patches
    assert merged.merged_against.endswith(", the installed verl") and merged.merged_files == [QWEN3_VL]
    assert f"arm none: patches/none.diff merged onto this verl ({QWEN3_VL}), three-way against" in done.stdout

    assert records["upstream"].outcome == "mismatch"
    assert records["upstream"].measures.parity.failing_params() == ["lm_head.weight"]

    # -all: main differs from 0.9.1 in every file it touches (each family file's FusedLinearForPPO line among them)
    family = {f"verl/models/transformers/{f}.py" for f in ("dense_common", "glm4v", "qwen2_vl", "qwen3_5")}
    every = {QWEN3_VL, "verl/utils/experimental/torch_functional.py"} | family
    for name, files in (("fsdp2-lmhead-forward", {QWEN3_VL}), ("fsdp2-lmhead-forward-all", every)):
        merged = records[name]
        assert merged.outcome == "pass", (name, merged.verdict)
        [patch] = merged.stamp.arm_patches
        assert patch.merged_against.endswith(", the installed verl") and set(patch.merged_files) == files, name
        assert f"arm {name}: patches/{name}.diff merged onto this verl (" in done.stdout

    skipped = records[UNFUSED.stem]
    na = skipped.verdict.not_applied
    assert skipped.outcome == "skipped" and na.file == QWEN3_VL and na.hunk.startswith("hunk #1 (@@ -366,17 ")
    assert na.why.startswith("it conflicts with this verl's line 373 (`fused_linear_for_ppo = FusedLinearForPPO()`)")
    assert f"patch start --verl {spec.rpartition('@')[0]}@{MAIN} DIR" in na.port

    assert records[port.stem].outcome == "pass", records[port.stem].verdict
    assert not records[port.stem].stamp.arm_patches[0].merged_against  # written against main: applied as it is
    assert {r.stamp.verl_tree.commit for r in records.values()} == {MAIN}
