"""What tests/installed_verl/test_adapters.py asks of verl, in a process of its own, since importing verl (and
installing the adapters) must not happen in the test process: `python -m adapter_facts without|with` prints one JSON
line."""

from __future__ import annotations

import inspect
import json
import os
import sys


def without() -> dict:
    import torch
    from verl.utils.device import get_device_name

    return {"device_name": get_device_name(), "accelerator": torch.accelerator.is_available()}


def with_adapters() -> dict:
    from harness.rank.verl_side.adapters import install_host_adapters, offload_without_pinning

    facts = {"installed": install_host_adapters()}
    from verl.utils.device import get_device_id, get_device_name

    facts["device"] = [get_device_name(), str(get_device_id())]
    import torch
    from verl.utils.device import get_torch_device
    from verl.workers.engine_workers import TrainingWorker

    facts["memory_counters"] = {
        "torch_cpu_has_them": hasattr(torch.cpu, "max_memory_allocated"),
        "verl_logs_them": "get_torch_device().max_memory_allocated()" in inspect.getsource(TrainingWorker),
        "adapter_reads": [get_torch_device().max_memory_allocated(), get_torch_device().max_memory_reserved()],
    }
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl as t

    facts["reads_override"] = "VERL_ENGINE_DEVICE" in inspect.getsource(EngineRegistry.get_engine_cls)
    facts["override_class"] = EngineRegistry.get_engine_cls("language_model", "fsdp2") is t.FSDPEngineWithLMHead
    del os.environ["VERL_ENGINE_DEVICE"]
    try:
        EngineRegistry.get_engine_cls("language_model", "fsdp2")
        facts["cpu_engine"] = "known"
    except Exception as exc:  # noqa: BLE001 - which exception verl raises is the fact
        facts["cpu_engine"] = type(exc).__name__
    src = inspect.getsource(t.FSDPEngine)
    facts["pin_forced"] = "CPUOffloadPolicy(pin_memory=True)" in src and "self.engine_config.forward_only" in src
    original = t.CPUOffloadPolicy
    with offload_without_pinning(True) as name:
        facts["on"] = [name, t.CPUOffloadPolicy(pin_memory=True).pin_memory]
    facts["restored"] = t.CPUOffloadPolicy is original
    with offload_without_pinning(False) as name:
        facts["off"] = name
    facts.update(older_tree_adapters_stay_off())
    return facts


def older_tree_adapters_stay_off() -> dict:
    """The adapters for older verl trees (docs/RELEASES.md) find nothing to do on the installed verl."""
    from verl.workers.engine.base import BaseEngineCtx

    from harness.rank.verl_side.bert_padding import install_bert_padding

    # keep-grads-on-exit looks for this attribute on the train-mode context (rank/verl_side/engine.py)
    ctx = BaseEngineCtx(engine=None, mode="train", zero_grad_on_exit=False)
    return {"bert_padding": install_bert_padding(), "keeps_zero_grad_on_exit": ctx.zero_grad_on_exit is False}


if __name__ == "__main__":
    print(json.dumps({"without": without, "with": with_adapters}[sys.argv[1]]()))
