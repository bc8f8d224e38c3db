"""Reach: where a patch's changed code ran in no scenario of the default set, the scenarios to try next, in order.

First the scenarios the harness has and did not run (nightly ones, those of another family), those whose engine
settings a never-run hunk's branch asks by name first (judge_change/patch_coverage.py settings_match); then variants of
the scenarios that came nearest (ran the most of the file's changed lines: the ones that reached the guard and took
the other way), along the axes the harness owns: Ulysses SP size (and the ranks it needs), the world size, the tiny
model's head layout (as many KV heads as query heads: verl's GQA repeat is then 1 and query, key and value have one
shape), verl's other trainer. A variant is an ordinary scenario (inputs/scenario.py, validated as a file's would be)
named after its seed and what it changes; `write_variant` writes it as YAML, which a `cp` into scenarios/ keeps.

Planning only: commands/reach.py runs the candidates, within its time budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.inputs.scenario import Scenario

MAX_RANKS = 4  # a variant's world size at most: 4 ranks of verl's engine on this project's 2 cores already take minutes


@dataclass(frozen=True)
class Candidate:
    scenario: Scenario
    how: str  # "nightly scenario", "engine-sp2 with SP 4 on 4 ranks"
    variant: bool = False
    seed: str = ""  # the scenario a variant varies


def _with(seed: Scenario, name: str, description: str, **changes) -> Scenario | None:
    """The seed with fields changed (a dotted `engine` dict merged), validated; None where the result is no valid
    scenario (an SP size that does not divide the ranks, say)."""
    from pydantic import ValidationError

    data = seed.model_dump()
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    data.update(name=name, description=description, tags=tuple(t for t in seed.tags if t != "nightly"))
    try:
        return Scenario.model_validate(data)
    except ValidationError:
        return None


def head_layout(model: str, overrides: dict) -> tuple[int, int] | None:
    """(query heads, KV heads) of a model as the scenario runs it; None where its config names neither."""
    from harness.inputs.models import model_fields

    fields = model_fields(model, overrides)
    for section in (fields.get("text_config") or {}, fields):
        if "num_key_value_heads" in section and "num_attention_heads" in section:
            return section["num_attention_heads"], section["num_key_value_heads"]
    return None


def variants(seed: Scenario) -> list[Candidate]:
    """The seed varied along each axis the harness owns, one axis at a time."""
    out: list[Candidate] = []
    sp = seed.engine.ulysses_sequence_parallel_size
    if seed.path == "engine" and sp * 2 <= MAX_RANKS:
        ranks = max(seed.ranks, sp * 2)
        words = f"{seed.name} with SP {sp * 2} on {ranks} ranks"
        found = _with(
            seed, f"{seed.name}-sp{sp * 2}", words, ranks=ranks, engine={"ulysses_sequence_parallel_size": sp * 2}
        )
        out += [Candidate(found, words, True, seed.name)] if found else []
    layout = head_layout(seed.model, seed.model_overrides)
    if layout is not None and layout[1] != layout[0]:
        heads = layout[0]
        inner = {"num_key_value_heads": heads}
        words = f"{seed.name} with {heads} KV heads (as many as query heads: no GQA repeat)"
        overrides = _merged(seed.model_overrides, {"text_config": inner} if _nested(seed) else inner)
        found = _with(seed, f"{seed.name}-kv{heads}", words, model_overrides=overrides)
        out += [Candidate(found, words, True, seed.name)] if found else []
    if seed.ranks * 2 <= MAX_RANKS:
        words = f"{seed.name} on {seed.ranks * 2} ranks"
        found = _with(seed, f"{seed.name}-w{seed.ranks * 2}", words, ranks=seed.ranks * 2)
        out += [Candidate(found, words, True, seed.name)] if found else []
    if seed.path == "engine":
        other = "v1" if seed.trainer == "ray" else "ray"
        words = f"{seed.name} under verl's {other} trainer"
        found = _with(seed, f"{seed.name}-{other}", words, trainer=other)
        out += [Candidate(found, words, True, seed.name)] if found else []
    return out


def _nested(seed: Scenario) -> bool:
    """Whether the seed's model keeps its heads under text_config (a vision-language model's)."""
    from harness.inputs.models import model_fields

    return "num_key_value_heads" in (model_fields(seed.model, {}).get("text_config") or {})


def _merged(base: dict, more: dict) -> dict:
    from harness.inputs.models import merge_overrides

    return merge_overrides(base, more)


def candidates(
    seeds: list[Scenario], not_run: list[tuple[Scenario, str]], known: set[str], max_ranks: int = MAX_RANKS
) -> list[Candidate]:
    """In the order they are tried: the scenarios not run (each with why it is worth a try, its settings first),
    then each seed's variants (seeds nearest first); none twice, none of a name already known, none larger than
    max_ranks."""
    out: list[Candidate] = []
    seen = set(known)
    for scenario, how in not_run:
        if scenario.name not in seen and scenario.ranks <= max_ranks:
            out.append(Candidate(scenario, how))
            seen.add(scenario.name)
    for seed in seeds:
        for c in sorted(variants(seed), key=lambda c: c.scenario.ranks):  # the cheapest first
            if c.scenario.name not in seen and c.scenario.ranks <= max_ranks:
                out.append(c)
                seen.add(c.scenario.name)
    return out


def write_variant(scenario: Scenario, directory: Path) -> Path:
    """The variant as a scenario file (only what differs from the defaults), for `cp` into scenarios/."""
    import yaml

    data = scenario.model_dump(exclude_defaults=True, mode="json")
    data.pop("name", None)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{scenario.name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
