"""A diff's change to a YAML config of verl (verl/trainer/config/_generated_ppo_trainer.yaml, say) said as what it is:
the keys whose default it changes, from and to, by verl's dotted names; and, for the scenarios a run judged, which
take that default and which set the key themselves (a scenario's `verl:` block: inputs/verl_block.py) or have the
harness set it (the table's `sets`, `fixed`, `not applicable`). Never "no line of it runs inside a function": a
config's line changes what every run that does not set the key gets.

Both sides are read with yaml.safe_load (no Hydra: interpolations stay their text, `${...}`), flattened to dotted
names, and compared; lists are values, not walked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONFIG_SUFFIXES = (".yaml", ".yml")
KEYS_NAMED = 8  # the changed keys named per file; the rest counted
ABSENT = "(absent)"


@dataclass(frozen=True)
class DefaultChange:
    key: str  # verl's dotted name
    before: object  # ABSENT where the key is new
    after: object  # ABSENT where the diff removes it


@dataclass(frozen=True)
class ConfigChange:
    file: str
    changes: tuple[DefaultChange, ...]
    error: str = ""  # where a side does not parse: why (the change then said as lines only)


def flatten(node, prefix: str = "") -> dict[str, object]:
    if not isinstance(node, dict):
        return {prefix.rstrip("."): node} if prefix else {}
    out: dict[str, object] = {}
    for key, value in node.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_change(file: str, before: str | None, after: str | None) -> ConfigChange:
    """The keys whose value differs between the two texts of one config file (None: the file absent there)."""
    import yaml

    try:
        old = flatten(yaml.safe_load(before) or {}) if before is not None else {}
        new = flatten(yaml.safe_load(after) or {}) if after is not None else {}
    except yaml.YAMLError as exc:
        return ConfigChange(file, (), f"does not parse as YAML: {str(exc).splitlines()[0]}")
    changes = [
        DefaultChange(key, old.get(key, ABSENT), new.get(key, ABSENT))
        for key in sorted(old.keys() | new.keys())
        if old.get(key, ABSENT) != new.get(key, ABSENT)
    ]
    return ConfigChange(file, tuple(changes))


def config_changes(verl_dir: Path, diffs: list[tuple[Path, bytes]]) -> list[ConfigChange]:
    """Per YAML file the diffs change, the defaults they change (verl_dir: the verl they apply to)."""
    from harness.plan.diffs import ENCODING, changed_lines

    out = []
    for path, (text, _) in changed_lines(verl_dir, diffs).items():
        if not path.endswith(CONFIG_SUFFIXES):
            continue
        on_disk = verl_dir.parent / path
        before = on_disk.read_bytes().decode(*ENCODING) if on_disk.is_file() else None
        out.append(config_change(path, before, text))
    return out


def _shown(value) -> str:
    text = value if value is ABSENT else repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def who_sets(key: str, scenarios: dict[str, dict]) -> str:
    """Which of the scenarios (name -> its `verl:` block, verl name -> entry) take the key's default and which set
    it themselves, by the verl block's table (inputs/verl_block.py)."""
    from harness.inputs.verl_block import is_known, setting_of

    own = sorted(name for name, block in scenarios.items() if key in (block or {}))
    named = f"set in its verl: block by {len(own)} ({', '.join(own[:4])}{', …' if len(own) > 4 else ''})"
    setting = setting_of(key) if is_known(key) else None
    if setting is not None and setting.kind == "sets":
        rest = f"the harness sets it from each scenario's `{setting.field}`: none of the {len(scenarios)} takes it"
    elif setting is not None and setting.kind == "fixed":
        rest = f"the harness always runs {setting.value!r} ({setting.why}): none of the {len(scenarios)} takes it"
    elif setting is not None and setting.kind == "batch":
        rest = (
            f"the harness derives it from each scenario's batch ({setting.why}): none of the {len(scenarios)} takes it"
        )
    elif setting is not None and setting.kind == "not applicable":
        rest = f"not applicable here ({setting.why}): no scenario runs it"
    else:
        taking = len(scenarios) - len(own)
        rest = f"taken by {taking} of the {len(scenarios)} scenario(s) (the harness does not set it)"
    return f"{rest}; {named}" if own else rest


def config_lines(change: ConfigChange, scenarios: dict[str, dict]) -> list[str]:
    """The closing block's lines for one config file: the defaults it changes, from and to, and who takes them."""
    if change.error:
        return [f"  {change.file}: a config file; {change.error}"]
    if not change.changes:
        return [f"  {change.file}: a config file; no key's value changes (comments, order or layout only)"]
    lines = [f"  {change.file}: a config file; the default(s) it changes ({len(change.changes)}):"]
    for c in change.changes[:KEYS_NAMED]:
        lines.append(f"    {c.key}: {_shown(c.before)} -> {_shown(c.after)}; {who_sets(c.key, scenarios)}")
    if len(change.changes) > KEYS_NAMED:
        lines.append(f"    +{len(change.changes) - KEYS_NAMED} more key(s)")
    return lines
