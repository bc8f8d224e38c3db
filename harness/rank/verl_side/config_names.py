"""The names verl's trainer config accepts, read from the installed verl: the trainer's Hydra config (ppo_trainer.yaml,
composed as verl.trainer.main_ppo composes it) and the config dataclass each node's `_target_` names (a dataclass field
the YAML leaves out is still a name a `key=value` override can set). Written to inputs/verl_names.json, which the
user's side reads to check a scenario's `verl:` block without importing verl (harness/inputs/verl_block.py).

    .venv/bin/python -m harness.rank.verl_side.config_names          # rewrite the file from the installed verl

tests/installed_verl/test_verl_names.py regenerates it and fails if the committed file differs.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import typing
from pathlib import Path

from harness.paths import ROOT

NAMES_FILE = ROOT / "harness" / "inputs" / "verl_names.json"


def _trainer_config() -> dict:
    """ppo_trainer.yaml composed by Hydra from the installed verl's config directory, interpolations unresolved."""
    import verl.trainer.config as config_package
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(Path(config_package.__file__).parent), version_base=None):
        return OmegaConf.to_container(compose(config_name="ppo_trainer"), resolve=False)


def _is_mapping_type(annotation) -> bool:
    """dict, dict[...], Optional[dict], Any-free: a field whose keys are free (override_config, mixed_precision)."""
    origin = typing.get_origin(annotation)
    if annotation is dict or origin is dict:
        return True
    if origin is typing.Union or str(origin) == "types.UnionType":
        return any(_is_mapping_type(a) for a in typing.get_args(annotation) if a is not type(None))
    return False


def _dataclass_of(target: str):
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return cls if dataclasses.is_dataclass(cls) else None


def _walk(node, prefix: str, names: set, open_prefixes: set):
    if not isinstance(node, dict):
        names.add(prefix)
        return
    if not node and prefix:
        open_prefixes.add(prefix)  # an empty mapping: keys of the user's own (`+key=value`)
        names.add(prefix)
        return
    cls = _dataclass_of(node["_target_"]) if isinstance(node.get("_target_"), str) else None
    if cls is not None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name.startswith("_"):
                continue
            name = f"{prefix}.{f.name}"
            names.add(name)
            if _is_mapping_type(hints.get(f.name)) and not isinstance(node.get(f.name), dict):
                open_prefixes.add(name)
    for key, value in node.items():
        if key == "_target_":
            continue
        _walk(value, f"{prefix}.{key}" if prefix else str(key), names, open_prefixes)


def config_names() -> dict:
    """{"verl": version, "names": every dotted name, "open": names whose sub-keys are free}."""
    import verl

    names: set[str] = set()
    open_prefixes: set[str] = set()
    _walk(_trainer_config(), "", names, open_prefixes)
    # A name that has names under it is a mapping, not a value of its own.
    parents = {n.rsplit(".", 1)[0] for n in names if "." in n}
    names = {n for n in names if n not in parents or n in open_prefixes}
    return {
        "verl": verl.__version__,
        "source": "verl/trainer/config/ppo_trainer.yaml composed by Hydra, plus the fields of each node's _target_ "
        "dataclass (harness/rank/verl_side/config_names.py)",
        "open": sorted(open_prefixes),
        "names": sorted(names),
    }


def render(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"


def main():
    NAMES_FILE.write_text(render(config_names()))
    print(f"wrote {NAMES_FILE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
