"""A bad file in scenarios/ fails only the commands that use it, named by its own path; `--scenario NAME` runs that
scenario, nightly or not; `harness import` writes a scenario only once it loads (issue 58)."""

from __future__ import annotations

import pytest
from user_checkout import copy_checkout, harness_in  # tests/user_checkout.py (tests/ is on sys.path)

from harness.errors import UsageError
from harness.inputs.scenario import load_all, load_chosen, load_each

pytestmark = pytest.mark.unit

GOOD = "description: fine\nranks: 2\n"
BAD = "description: a typo\nranks: 2\nprecison: fp32\n"


def test_a_bad_file_fails_only_what_uses_it_named_by_its_own_path(tmp_path):
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "mine-typo.yaml").write_text(BAD)
    assert [s.name for s in load_chosen(["good"], tmp_path)] == ["good"]
    with pytest.raises(UsageError) as caught:
        load_chosen(["mine-typo"], tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'mine-typo.yaml'}: field 'precison'")
    with pytest.raises(UsageError, match="mine-typo.yaml"):
        load_all(tmp_path)  # every scenario asked for: the bad one among them
    loaded, broken = load_each(tmp_path)
    assert [s.name for s in loaded] == ["good"] and len(broken) == 1 and "mine-typo.yaml" in broken[0]
    with pytest.raises(UsageError, match="unknown scenario 'goods' \\(did you mean 'good'"):
        load_chosen(["goods"], tmp_path)


def test_list_and_verify_of_another_scenario_stand_beside_a_bad_file(tmp_path):
    checkout = copy_checkout(tmp_path)
    (checkout / "scenarios" / "mine-typo.yaml").write_text(BAD)
    listed = harness_in(checkout, "list", "--names", results=tmp_path / "r", timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "fsdp2-multigpu" in listed.stdout.split() and "mine-typo" not in listed.stdout
    assert "does not load" in listed.stderr and "mine-typo.yaml: field 'precison'" in listed.stderr
    mine = harness_in(checkout, "verify", "--scenario", "mine-typo", "--alone", results=tmp_path / "r", timeout=120)
    assert mine.returncode == 2 and "mine-typo.yaml: field 'precison'" in mine.stderr, mine.stderr
    other = harness_in(checkout, "sensitivity", "nope-1", results=tmp_path / "r", timeout=120)
    assert other.returncode == 2 and "unknown scenario 'nope-1'" in other.stderr and "precison" not in other.stderr


def test_a_scenario_named_runs_nightly_or_not():
    from harness.commands.run import verify_scenarios

    scenarios = load_all()
    named = [s for s in scenarios if s.name in ("fsdp2-compile-inductor", "direct-1gpu")]
    assert "nightly" in named[[s.name for s in named].index("fsdp2-compile-inductor")].tags
    assert verify_scenarios(named, nightly=False, named=True) == (named, [])
    kept, left_out = verify_scenarios(named, nightly=False)
    assert [s.name for s in left_out] == ["fsdp2-compile-inductor"] and [s.name for s in kept] == ["direct-1gpu"]


def test_import_writes_nothing_that_does_not_load(tmp_path, cli_in_process):
    script = tmp_path / "run.sh"
    # a ranks-2 world whose batch cannot be shared out: 3 prompts x n 1 over 2 ranks of micro-batches of 2
    script.write_text(
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen3-VL-8B "
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 actor_rollout_ref.model.use_remove_padding=False "
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2\n"
    )
    target = tmp_path / "scenarios" / "run.yaml"
    message = cli_in_process.usage_error("import", script, "--out", target)
    assert "run.yaml: not written: the imported scenario does not load" in message
    assert "use_remove_padding" in message and not target.exists()
