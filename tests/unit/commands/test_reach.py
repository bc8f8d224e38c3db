"""Reach (commands/reach.py, plan/reach.py): where the changed code ran in no default scenario, the candidates are
the harness's own scenarios and variants of the nearest one (SP size, world size, the model's KV heads, the
trainer), tried in order within the budget; the first that runs the unrun branch is judged in both arms and named,
with the command that keeps it. The cells are stood in for by a runner that answers per scenario what a rank would
have watched (no cell runs: the rank's watch itself is tested in tests/unit/judge_change/test_changed_coverage.py)."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest
import yaml

from harness.commands.ran_lines import code_of
from harness.commands.reach import reach_further
from harness.inputs.scenario import Scenario
from harness.plan.arms import Arm
from harness.plan.reach import head_layout, variants
from harness.run.runner import PlanResult

pytestmark = pytest.mark.unit

SOURCE = "def gather(q, k):\n    return q, k\n"
DIFF = """--- a/verl/pack.py
+++ b/verl/pack.py
@@ -1,2 +1,5 @@
 def gather(q, k):
+    if q == k:
+        packed = q + k
+        return packed, packed
     return q, k
"""


def _code(tmp_path: Path):
    verl = tmp_path / "site" / "verl"
    verl.mkdir(parents=True)
    (verl / "pack.py").write_text(SOURCE)
    diff = tmp_path / "pack.diff"
    diff.write_text(DIFF)
    return code_of(verl, [(diff, DIFF.encode())])


def _equal_heads(scenario: Scenario) -> bool:
    """Where the stand-in's q and k have one shape: as many KV heads as query heads, or SP 4 (verl repeats KV)."""
    heads, kv = head_layout(scenario.model, scenario.model_overrides)
    return heads == kv or scenario.engine.ulysses_sequence_parallel_size >= 4


def _runner(record, ran: list):
    def run_cells(command, args, cells, reuse=frozenset()):
        records = []
        for scenario, arm in cells:
            ran.append((scenario.name, arm.name))
            taken = [(2, 3)] if _equal_heads(scenario) else [(2, 5)]
            lines = [2, 3, 4] if _equal_heads(scenario) else [2]
            watched = {"patch_lines_run": {"verl/pack.py": lines}, "patch_arcs_run": {"verl/pack.py": taken}}
            records.append(record(scenario.name, arm.name, **(watched if arm.name == "pr" else {})))
        return PlanResult(records, Path("results/x.jsonl"), [1] * len(records))

    return run_cells


def test_the_variants_of_a_seed_are_one_axis_each(scenario):
    found = {c.scenario.name: c.scenario for c in variants(scenario("engine-sp2"))}
    assert set(found) == {"engine-sp2-sp4", "engine-sp2-kv4", "engine-sp2-w4", "engine-sp2-v1"}
    assert (found["engine-sp2-sp4"].ranks, found["engine-sp2-sp4"].engine.ulysses_sequence_parallel_size) == (4, 4)
    assert head_layout("tiny-qwen3-vl", found["engine-sp2-kv4"].model_overrides) == (4, 4)
    assert found["engine-sp2-v1"].trainer == "v1" and "nightly" not in found["engine-sp2-w4"].tags


def test_reach_finds_the_scenario_that_takes_the_branch_and_judges_it_in_both_arms(
    tmp_path, record, scenario, monkeypatch
):
    import harness.commands.reach as reach

    monkeypatch.setattr(reach, "REACH_DIR", tmp_path / "reach")
    code = _code(tmp_path)
    seed = scenario("engine-sp2")
    done = [
        record("engine-sp2", "pr", patch_lines_run={"verl/pack.py": [2]}, patch_arcs_run={"verl/pack.py": [(2, 5)]})
    ]
    ran: list = []
    args = Namespace(reach_seconds=60.0)
    found = reach_further(args, Arm("pr", []), code, done, [seed], [], _runner(record, ran))
    # Nothing of the harness's own is on an axis of engine-sp2 with the branch's settings: its variants, cheapest
    # first; the KV-heads one (2 ranks) takes the branch, in the PR's arm, and then runs beside its base.
    assert ran[-2:] == [("engine-sp2-kv4", "pr"), ("engine-sp2-kv4", "upstream")]
    assert [r.arm for r in found.records] == ["pr", "upstream"]
    assert found.lines[0].startswith("reach: 3 piece(s) of the changed code (lines, branches) ran in no scenario")
    reached = next(line for line in found.lines if line.startswith("  engine-sp2-kv4 "))
    assert "ran verl/pack.py lines 3-4; `if q == k:` true; against its base: unchanged (pass / pass)" in reached
    kept = tmp_path / "reach" / "engine-sp2-kv4.yaml"
    assert f"keep it: cp {kept} scenarios/" in "\n".join(found.lines)
    assert yaml.safe_load(kept.read_text())["model_overrides"] == {"text_config": {"num_key_value_heads": 4}}


def test_no_reach_without_a_budget_or_with_nothing_unrun(tmp_path, record, scenario):
    code = _code(tmp_path)
    ran: list = []
    unrun = [record("engine-sp2", "pr", patch_lines_run={"verl/pack.py": [2]}, patch_arcs_run={"verl/pack.py": []})]
    assert (
        reach_further(Namespace(reach_seconds=0), Arm("pr", []), code, unrun, [], [], _runner(record, ran)).lines == []
    )
    every = {"patch_lines_run": {"verl/pack.py": [2, 3, 4]}, "patch_arcs_run": {"verl/pack.py": [(2, 3), (2, 5)]}}
    done = [record("engine-sp2", "pr", **every)]
    assert (
        reach_further(Namespace(reach_seconds=60), Arm("pr", []), code, done, [], [], _runner(record, ran)).lines == []
    )
    assert ran == []


def test_a_family_file_no_scenario_ran_seeds_the_scenarios_of_its_family(record, scenario):
    """A change to qwen2_vl.py's SP branch: no scenario ran a line of it, so the seeds are the scenarios whose model
    runs its fused forward there (their SP variant is the one to try), the nearest two."""
    from harness.commands.reach import _seeds
    from harness.judge_change.changed_coverage import file_coverage
    from harness.plan.changed_code import ChangedFile

    changed = ChangedFile("verl/models/transformers/qwen2_vl.py", (221, 222))
    run = [scenario(n) for n in ("engine-sp2", "engine-qwen2-5-vl-multigpu", "engine-qwen2-5-vl-multigpu-3")]
    records = [record(s.name, "pr", patch_lines_run={changed.file: []}) for s in run]
    seeds = _seeds(file_coverage([changed], records), run)
    assert seeds == {n: {changed.file} for n in ("engine-qwen2-5-vl-multigpu", "engine-qwen2-5-vl-multigpu-3")}
    # Its scenarios run the padded batch (verl's packed Qwen2.5-VL attention needs flash-attn): SP needs the packed
    # one, so no SP variant is a valid scenario here; the others (KV heads, ranks, trainer) are, each named by its seed.
    found = variants(run[1])
    assert all(c.scenario.engine.ulysses_sequence_parallel_size == 1 for c in found)
    assert found and {c.seed for c in found} == {"engine-qwen2-5-vl-multigpu"}


def test_verifys_json_holds_the_cells_the_reach_added(tmp_path, record, scenario, monkeypatch):
    """The reach's cells are judged with verify's own (commands/run.py _reach): --json, written when verify's cells
    ended, is written again with them, so the records a user reads are the ones the verdict counted."""
    import json

    import harness.commands.ran_lines as ran_lines
    import harness.commands.reach as reach
    import harness.commands.run as run

    monkeypatch.setattr(reach, "REACH_DIR", tmp_path / "reach")
    code = _code(tmp_path)
    monkeypatch.setattr(ran_lines, "code_of_files", lambda patches: code)
    ran: list = []
    monkeypatch.setattr(run, "run_cells", _runner(record, ran))
    done = record("engine-sp2", "pr", patch_lines_run={"verl/pack.py": [2]}, patch_arcs_run={"verl/pack.py": [(2, 5)]})
    out = tmp_path / "records.json"
    run.write_json([done], str(out))  # what finish wrote after verify's cells
    result = PlanResult([done], Path("results/x.jsonl"), [1])
    args = Namespace(reach_seconds=60.0, json=str(out))
    run._reach(args, Arm("pr", [tmp_path / "pack.diff"]), result, [scenario("engine-sp2")], [])
    written = [(r["scenario"], r["arm"]) for r in json.loads(out.read_text())]
    assert written == [(r.scenario, r.arm) for r in result.records]
    assert written[1:] == [("engine-sp2-kv4", "pr"), ("engine-sp2-kv4", "upstream")]
