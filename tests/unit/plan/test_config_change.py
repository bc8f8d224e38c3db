"""A diff's hunk in a YAML config of verl said as the defaults it changes (plan/config_change.py), from and to, by
verl's dotted names, with which scenarios take each default and which set the key themselves; never "no line of it
runs inside a function" (plan/patch_lines.py)."""

from __future__ import annotations

import pytest

from harness.commands.ran_lines import code_of, patch_ran_lines
from harness.plan.config_change import ABSENT, DefaultChange, config_change, config_lines

pytestmark = pytest.mark.unit

BEFORE = """actor_rollout_ref:
  actor:
    ppo_epochs: 1
    clip_ratio_c: 3.0
    entropy_coeff: 0
  rollout:
    n: 1
trainer:
  total_epochs: 30
"""

DIFF = """--- a/verl/trainer/config/_generated_ppo_trainer.yaml
+++ b/verl/trainer/config/_generated_ppo_trainer.yaml
@@ -1,9 +1,10 @@
 actor_rollout_ref:
   actor:
     ppo_epochs: 1
-    clip_ratio_c: 3.0
+    clip_ratio_c: 10.0
     entropy_coeff: 0
+    loss_scale_factor: 2
   rollout:
     n: 1
 trainer:
-  total_epochs: 30
+  total_epochs: 15
"""

FILE = "verl/trainer/config/_generated_ppo_trainer.yaml"


def test_the_keys_whose_value_changes_are_found_from_both_sides():
    after = BEFORE.replace("3.0", "10.0").replace("entropy_coeff: 0\n", "entropy_coeff: 0\n    extra: [1, 2]\n")
    assert config_change(FILE, BEFORE, after).changes == (
        DefaultChange("actor_rollout_ref.actor.clip_ratio_c", 3.0, 10.0),
        DefaultChange("actor_rollout_ref.actor.extra", ABSENT, [1, 2]),
    )
    assert config_change(FILE, BEFORE, "# only a comment\n" + BEFORE).changes == ()
    assert config_change(FILE, BEFORE, "a: [").error.startswith("does not parse as YAML")


def test_each_changed_default_names_who_takes_it():
    change = config_change(FILE, BEFORE, BEFORE.replace("3.0", "10.0").replace("total_epochs: 30", "total_epochs: 1"))
    scenarios = {"engine-sp2": {}, "recipe-grpo": {"actor_rollout_ref.actor.clip_ratio_c": {"value": 3.0}}}
    assert config_lines(change, scenarios) == [
        f"  {FILE}: a config file; the default(s) it changes (2):",
        "    actor_rollout_ref.actor.clip_ratio_c: 3.0 -> 10.0; the harness sets it from each scenario's "
        "`loss.clip_ratio_c`: none of the 2 takes it; set in its verl: block by 1 (recipe-grpo)",
        "    trainer.total_epochs: 30 -> 1; not applicable here (the run's bookkeeping (logging, checkpoints, "
        "validation): no judged number depends on it): no scenario runs it",
    ]
    unset = config_change(FILE, "a:\n  b: 1\n", "a:\n  b: 2\n")  # a name the harness does not set
    assert (
        config_lines(unset, scenarios)[1]
        == "    a.b: 1 -> 2; taken by 2 of the 2 scenario(s) (the harness does not set it)"
    )


def test_a_config_hunk_is_said_as_its_defaults_in_the_closing_block(tmp_path, record):
    verl = tmp_path / "site" / "verl"
    (verl / "trainer" / "config").mkdir(parents=True)
    (verl.parent / FILE).write_text(BEFORE)
    diff = tmp_path / "cfg.diff"
    diff.write_text(DIFF)
    code = code_of(verl, [(diff, DIFF.encode())])
    assert [h.where for h in code.hunks] == ["a config file: the defaults it changes, by key, below"]
    assert code.files == []  # no Python: no line of it is watched
    lines, note = patch_ran_lines(code, "pr", [record("engine-sp2", "pr", patch_lines_run={})])
    assert lines[0] == f"  {FILE}: a config file; the default(s) it changes (3):"
    assert lines[2] == (
        "    actor_rollout_ref.actor.loss_scale_factor: (absent) -> 2; taken by 1 of the 1 scenario(s) (the harness "
        "does not set it)"
    )
    assert not any("inside a function" in line for line in lines) and note == ""
