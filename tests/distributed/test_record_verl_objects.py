"""The record says what verl ran (issue 49): `verl_config.objects` holds every field of verl's own config objects
(HFModelConfig, FSDPEngineConfig, FSDPActorConfig) as the cell's rank built them, JSON-safe, so gradient
checkpointing and dynamic bsz are read from verl's objects, not only from the scenario. Built here in-process with
verl's own classes (no torchrun): the same verl_config() every rank calls."""

from __future__ import annotations

import json

from harness.inputs.scenario import load_scenario
from harness.paths import SCENARIOS_DIR
from harness.rank.oracle.model import build_model
from harness.rank.verl_side.verl_config import save_tiny_model, verl_config


def test_the_summary_holds_verls_own_objects_gradient_checkpointing_and_dynamic_bsz_included(tmp_path):
    scenario = load_scenario(SCENARIOS_DIR / "engine-ckpt-dynamic-bsz.yaml")
    model_dir = save_tiny_model(build_model(scenario.model, scenario.seed), tmp_path / "model")
    summary = verl_config(scenario, 2, model_dir).summary()
    objects = json.loads(json.dumps(summary["objects"]))  # JSON-safe as the record writes it
    assert objects["model"]["enable_gradient_checkpointing"] is True
    assert objects["engine"]["use_dynamic_bsz"] is True and objects["actor"]["use_dynamic_bsz"] is True
    assert objects["actor"]["ppo_max_token_len_per_gpu"] == 64
    assert objects["actor"]["entropy_coeff"] == scenario.loss.entropy_coeff
    assert objects["actor"]["optim"]["lr"] == 1e-6  # one backward: the optimizer verl builds, never stepped
    assert objects["model"]["hf_config"].startswith("<")  # transformers' config object: named by its type only
    # the opposite settings are read the same way, from a scenario that leaves them at the harness's defaults
    plain = load_scenario(SCENARIOS_DIR / "engine-no-sync.yaml")
    objects = verl_config(plain, 2, model_dir).summary()["objects"]
    assert objects["model"]["enable_gradient_checkpointing"] is False and objects["engine"]["use_dynamic_bsz"] is False
