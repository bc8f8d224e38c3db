"""verl's own default of a config name, from the installed verl's trainer YAML as Hydra composes it
(verl/trainer/config/_generated_ppo_trainer.yaml), read as data: verl is located, not imported (no torch here).
An interpolation (`${actor_rollout_ref.actor.strategy}`, `${oc.select:NAME,default}`) is resolved against the
script's own values first, then verl's defaults."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from harness.errors import UsageError

GENERATED = Path("trainer", "config", "_generated_ppo_trainer.yaml")
MISSING = object()  # verl's YAML has no such name, or its default is an expression this reader does not resolve
_SELECT = re.compile(r"\$\{oc\.select:([\w.]+),(.*)\}")
_REFERENCE = re.compile(r"\$\{([\w.]+)\}")


@cache
def _defaults() -> dict:
    import importlib.util

    from omegaconf import OmegaConf  # Hydra's YAML reading: `1e-6` a float, a quoted 'true' and `none` strings

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("verl is not installed in this environment: its defaults cannot be read (make venv)")
    path = Path(list(spec.submodule_search_locations)[0]) / GENERATED
    flat: dict = {}

    def walk(node, prefix: str):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = value

    walk(OmegaConf.to_container(OmegaConf.load(path), resolve=False), "")  # interpolations kept as their text
    return flat


def verl_default(name: str, given: dict, depth: int = 0):
    """verl's default of `name` where the script does not set it, its interpolations resolved; MISSING if none."""
    value = _defaults().get(name, MISSING)
    if not isinstance(value, str) or "${" not in value or depth > 5:
        return MISSING if isinstance(value, str) and "${" in value else value
    select, reference = _SELECT.fullmatch(value), _REFERENCE.fullmatch(value)
    if select or reference:
        other = (select or reference).group(1)
        if other in given:
            return given[other]
        found = verl_default(other, given, depth + 1)
        if found is MISSING and select:
            from harness.inputs.verl_overrides import hydra_value

            try:
                return hydra_value(select.group(2))
            except ValueError:
                return select.group(2)
        return found
    return MISSING


def is_interpolated(name: str) -> bool:
    """Whether verl's default of `name` follows another name's value (`${...}`)."""
    value = _defaults().get(name)
    return isinstance(value, str) and "${" in value
