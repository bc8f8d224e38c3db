"""The record says what verl ran (issue 49): `verl_config.objects` holds every field of verl's own config objects
(HFModelConfig, FSDPEngineConfig, FSDPActorConfig) as the cell's rank built them, JSON-safe, so gradient
checkpointing and dynamic bsz are read from verl's objects, not only from the scenario. Built with verl's own classes
(no torchrun): the same verl_config() every rank calls, in a process of its own (tests/own_process.py), since
importing verl into the test process would refuse every in-process oracle that runs after it in the same pytest
worker (the oracle is computed before verl is imported: rank/oracle/reference.py)."""

from __future__ import annotations

import json
import textwrap

from own_process import run_code  # tests/own_process.py (tests/ is on sys.path: its conftest)

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    from harness.inputs.scenario import load_scenario
    from harness.paths import SCENARIOS_DIR
    from harness.rank.oracle.model import build_model
    from harness.rank.verl_side.verl_config import save_tiny_model, verl_config

    scenario = load_scenario(SCENARIOS_DIR / "engine-ckpt-dynamic-bsz.yaml")
    model_dir = save_tiny_model(build_model(scenario.model, scenario.seed), Path(sys.argv[1]) / "model")
    plain = load_scenario(SCENARIOS_DIR / "engine-no-sync.yaml")
    print(json.dumps({
        "entropy_coeff": scenario.loss.entropy_coeff,
        "ckpt": verl_config(scenario, 2, model_dir).summary()["objects"],
        "plain": verl_config(plain, 2, model_dir).summary()["objects"],
    }))
    """
)


def test_the_summary_holds_verls_own_objects_gradient_checkpointing_and_dynamic_bsz_included(tmp_path):
    done = run_code(SCRIPT, str(tmp_path), folder=tmp_path / "script", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])  # JSON-safe as the record writes it
    objects = out["ckpt"]
    assert objects["model"]["enable_gradient_checkpointing"] is True
    assert objects["engine"]["use_dynamic_bsz"] is True and objects["actor"]["use_dynamic_bsz"] is True
    assert objects["actor"]["ppo_max_token_len_per_gpu"] == 64
    assert objects["actor"]["entropy_coeff"] == out["entropy_coeff"]
    assert objects["actor"]["optim"]["lr"] == 1e-6  # one backward: the optimizer verl builds, never stepped
    assert objects["model"]["hf_config"].startswith("<")  # transformers' config object: named by its type only
    # the opposite settings are read the same way, from a scenario that leaves them at the harness's defaults
    objects = out["plain"]
    assert objects["model"]["enable_gradient_checkpointing"] is False and objects["engine"]["use_dynamic_bsz"] is False
