"""`python -m harness import FILE`: a verl run script (`python3 -m verl.trainer.main_ppo key=value ...`, shell
variables and all) or a file of overrides (one `key=value` a line) as a scenario with a `verl:` block, scaled to the
tiny model and this host. It prints each value it scaled (from -> to, why) and each setting it dropped (why); the
written file says the same in its header and beside each scaled value.

What is scaled, and how (the settings themselves, lr, clip ratios, KL, ..., are kept as the script has them):
- the world (trainer.nnodes x trainer.n_gpus_per_node) to `ranks` 2, or 1 where the script runs on one GPU;
- the micro-batch sizes to the tiny batch's 2 samples a rank;
- the global batch: rollout.n to at most 2, mini-batches a step to at most 2, one micro-batch a rank each;
- the token limits: the same number of longest sequences per limit, at the tiny model's sequence length;
- the run's length to 2 RL steps.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UsageError
from harness.inputs.verl_block import RO, A, closest_name, field_exists, is_known, setting_of
from harness.paths import SCENARIOS_DIR, shown_path

TINY_MICRO = 2  # samples a micro-batch holds in the tiny batch (BatchSettings.micro_batch_size)
TINY_SEQ = 32  # the tiny batch's longest sequence (BatchSettings.seq_len)
STEPS = 2  # RL steps: the second starts from updated weights, so the next old log-probs are judged too
MAX_N = 2
MAX_MINI_BATCHES = 2
# verl's defaults where the script leaves them (ppo_trainer.yaml)
VERL_DEFAULTS = {"trainer.nnodes": 1, "trainer.n_gpus_per_node": 8, "data.max_prompt_length": 512}
VERL_DEFAULTS["data.max_response_length"] = 512

# A Hugging Face model name's family -> the tiny model of models/ that stands for it (the engine path's samples need
# a vision-language model). Checked in order: the first substring found in the lower-cased name wins.
TINY_MODELS = (
    (("qwen3-vl", "a3b"), "tiny-qwen3-vl-moe"),
    (("qwen3-vl",), "tiny-qwen3-vl"),
    (("qwen3_vl",), "tiny-qwen3-vl"),
    (("qwen2.5-vl",), "tiny-qwen2-5-vl"),
    (("qwen2_5_vl",), "tiny-qwen2-5-vl"),
    (("glm-4", "v"), "tiny-glm4v"),
)
DEFAULT_TINY = "tiny-qwen3-vl"


@dataclass
class Imported:
    names: dict = field(default_factory=dict)  # verl name -> value, in the script's order (the written block)
    comments: dict = field(default_factory=dict)  # verl name -> "from X: why" beside a scaled value
    fields: dict = field(default_factory=dict)  # scenario fields the import sets itself (ranks, steps, model)
    scaled: list = field(default_factory=list)  # "what: from -> to (why)"
    dropped: list = field(default_factory=list)  # "name=value: why"


# -- reading the file -------------------------------------------------------------------------------------------
_VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)")
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=(.*)$")


def _expand(text: str, variables: dict) -> str:
    """$VAR, ${VAR}, ${VAR:-default}: the script's own assignments, else the default; an unset one stays as written
    (its name's value is then dropped, unless the name is not applicable here)."""

    def one(match):
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        if match.group(2) is not None:
            return match.group(2)
        return match.group(0)

    return _VARIABLE.sub(one, text)


def read_overrides(text: str) -> list[tuple[str, str]]:
    """(name, value text) per override, `+` kept, in order: the arguments of the script's main_ppo command, its
    shell variables (`VAR=...` lines above it) expanded, or each `key=value` line of a plain file."""
    logical = re.sub(r"\\\n", " ", text).splitlines()
    command = next(
        (i for i, line in enumerate(logical) if "verl.trainer.main_ppo" in line.split("#", 1)[0]),
        None,
    )
    if command is None:
        return _plain_lines(logical)
    variables: dict[str, str] = {}
    for line in logical[:command]:
        match = _ASSIGNMENT.match(line)
        if match and not line.lstrip().startswith("#"):
            words = shlex.split(_expand(match.group(2), variables), comments=True)
            variables[match.group(1)] = words[0] if words else ""
    words = shlex.split(_expand(logical[command], variables), comments=True)
    start = next(i for i, w in enumerate(words) if "verl.trainer.main_ppo" in w) + 1
    pairs = []
    for word in words[start:]:
        if "=" in word and not word.startswith("-"):
            key, _, value = word.partition("=")
            pairs.append((key, value))
    return pairs


def _plain_lines(lines: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for line in lines:
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if "=" not in text:
            raise UsageError(f"a line that is no key=value: {text!r}")
        key, _, value = text.partition("=")
        words = shlex.split(_expand(value, {}), comments=True)
        pairs.append((key.strip(), words[0] if words else ""))
    return pairs


def hydra_value(text: str):
    """A Hydra override's value as YAML would hold it: bool, null, int, float, a [list], else the string."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [hydra_value(item.strip().strip("'\"")) for item in inner.split(",")] if inner else []
    return text


# -- scaling ------------------------------------------------------------------------------------------------------
def _fields_set(name: str) -> str:
    setting = setting_of(name)
    return setting.field if setting.kind == "sets" else ""


def _scale(out: Imported, name: str, to, why: str):
    before = out.names[name]
    if before == to:
        return
    out.names[name] = to
    out.comments[name] = f"from {before!r}: {why}"
    out.scaled.append(f"{name}: {before!r} -> {to!r} ({why})")


def _tiny_model(path) -> tuple[str, str]:
    name = str(path or "").lower()
    for words, tiny in TINY_MODELS:
        if all(w in name for w in words):
            return tiny, f"the tiny model of the same family ({tiny}, models/{tiny}.json)"
    return DEFAULT_TINY, f"no tiny model of that family: {DEFAULT_TINY}, the fused head's subject"


def scale(pairs: list[tuple[str, str]]) -> Imported:
    out = Imported()
    for given, text in pairs:
        name = given.removeprefix("+")
        value = hydra_value(text)
        if not is_known(name):
            near = closest_name(name)
            out.dropped.append(
                f"{given}={text}: not a config name of verl 0.9.1" + (f" (closest: {near})" if near else "")
            )
            continue
        setting = setting_of(name)
        why = _why_dropped(name, setting, value, text)
        if why:
            out.dropped.append(f"{given}={text}: {why}")
            continue
        out.names[name] = value
    _scale_world(out)
    _scale_batch(out)
    _scale_tokens(out)
    _scale_steps(out)
    tiny, why = _tiny_model(out.names.get("actor_rollout_ref.model.path"))
    out.fields["model"] = tiny
    out.scaled.append(f"model: {out.names.get('actor_rollout_ref.model.path', '(not set)')!s} -> {tiny} ({why})")
    out.scaled.append(
        "precision: verl's default (bf16 parameters under bf16 autocast) -> fp32 (the oracle's precision, where "
        "every update, metric and log-prob is judged tightly; set `precision: bf16-mixed` for verl's default)"
    )
    return out


def _why_dropped(name: str, setting, value, text: str) -> str:
    if setting.kind == "refused":
        return f"refused: {setting.why}"
    if setting.kind == "fixed" and value != setting.value:
        return f"the harness runs {setting.value!r} only ({setting.why})"
    if setting.kind == "sets" and not field_exists(_schema(), setting.field):
        return f"not honoured yet on this checkout (its field `{setting.field}` is not in the scenario schema)"
    if setting.kind == "sets" and setting.field == "engine.ulysses_sequence_parallel_size" and value != 1:
        return "Ulysses SP: the training update refuses it (the oracle plans mini-batches per rank, not per SP group)"
    if setting.kind != "not applicable" and "$" in text:
        return "its value names a shell variable the script does not set"
    return ""


def _schema():
    from harness.inputs.scenario import Scenario

    return Scenario


def _scale_world(out: Imported):
    nodes = out.names.get("trainer.nnodes", VERL_DEFAULTS["trainer.nnodes"])
    gpus = out.names.get("trainer.n_gpus_per_node", VERL_DEFAULTS["trainer.n_gpus_per_node"])
    world = nodes * gpus if isinstance(nodes, int) and isinstance(gpus, int) else None
    ranks = 1 if world == 1 else 2
    out.fields["ranks"] = ranks
    why = (
        "one GPU stays one rank"
        if ranks == 1
        else "two ranks: where #6659's unreduced lm_head gradient shows, and what this host's CPUs run"
    )
    out.scaled.append(f"ranks: {world} (trainer.nnodes {nodes} x trainer.n_gpus_per_node {gpus}) -> {ranks} ({why})")


def _scale_batch(out: Imported):
    """Micro-batches of the tiny batch's 2 samples; each rank one micro-batch per mini-batch; n and the mini-batches a
    step capped at 2 (each kept where smaller)."""
    for name in [n for n in out.names if _fields_set(n) == "batch.micro_batch_size"]:
        _scale(out, name, TINY_MICRO, f"the tiny batch's {TINY_MICRO} samples a micro-batch")
    dp = out.fields["ranks"]
    n = out.names.get(RO + "n", 1)
    small_n = min(n, MAX_N) if (dp * TINY_MICRO) % min(n, MAX_N) == 0 else 1
    if RO + "n" in out.names:
        _scale(out, RO + "n", small_n, f"at most {MAX_N} responses a prompt keep the global batch tiny")
    total, mini = out.names.get("data.train_batch_size"), out.names.get(A + "ppo_mini_batch_size")
    mini_batches = total // mini if isinstance(total, int) and isinstance(mini, int) and mini <= total else 1
    few = max(1, min(mini_batches, MAX_MINI_BATCHES))
    per_mini = dp * TINY_MICRO // small_n  # prompts: one micro-batch of every rank
    if A + "ppo_mini_batch_size" in out.names:
        _scale(
            out,
            A + "ppo_mini_batch_size",
            per_mini,
            f"{per_mini} prompts x n {small_n} = one micro-batch of {TINY_MICRO} on each of {dp} ranks",
        )
    if "data.train_batch_size" in out.names:
        why = f"{few} mini-batches a step (the script's {mini_batches}, at most {MAX_MINI_BATCHES})"
        _scale(out, "data.train_batch_size", per_mini * few, why)


def _scale_tokens(out: Imported):
    """The same number of longest sequences (prompt + response limits) per token limit, at the tiny length."""
    longest = out.names.get("data.max_prompt_length", VERL_DEFAULTS["data.max_prompt_length"]) + out.names.get(
        "data.max_response_length", VERL_DEFAULTS["data.max_response_length"]
    )
    for name in [n for n in out.names if _fields_set(n) == "engine.max_token_len_per_gpu"]:
        value = out.names[name]
        if not isinstance(value, int):
            continue
        sequences = value / longest
        to = max(TINY_SEQ, math.ceil(sequences * TINY_SEQ))
        why = f"{sequences:g} sequences of the script's longest ({longest} tokens) at the tiny {TINY_SEQ}"
        _scale(out, name, to, why)


def _scale_steps(out: Imported):
    name = "trainer.total_training_steps"
    if name in out.names:
        _scale(out, name, STEPS, f"{STEPS} RL steps: the second's old log-probs are on updated weights")
        return
    out.fields["steps"] = STEPS
    length = out.names.get("trainer.total_epochs")
    what = f"trainer.total_epochs {length}" if length is not None else "the script's run"
    out.scaled.append(f"steps: {what} -> {STEPS} RL steps (the second's old log-probs are on updated weights)")


# -- writing -----------------------------------------------------------------------------------------------------
def _yaml_value(value) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return yaml_float(value)
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))  # a JSON string is a YAML string


def yaml_float(value: float) -> str:
    """A float YAML reads back as one: PyYAML (YAML 1.1) takes `1e-06` for a string, `1.0e-06` for a float."""
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"
    return text


def scenario_text(source: Path, out: Imported) -> str:
    header = [f"# Imported from {shown_path(source)} by `python -m harness import` (verl 0.9.1's names)."]
    header += ["# Scaled:"] + [f"#   {line}" for line in out.scaled]
    header += ["# Dropped:"] + [f"#   {line}" for line in out.dropped or ["(nothing)"]]
    body = [
        f'description: "verl run script {source.name}, imported and scaled to the tiny model (harness import)"',
        "path: engine",
        f"ranks: {out.fields['ranks']}",
    ]
    if "steps" in out.fields:
        body.append(f"steps: {out.fields['steps']}")
    body += [f"model: {out.fields['model']}", "timeout_s: 300", "verl:"]
    for name, value in out.names.items():
        comment = f"  # {out.comments[name]}" if name in out.comments else ""
        body.append(f"  {name}: {_yaml_value(value)}{comment}")
    return "\n".join(header + body) + "\n"


def default_out(source: Path) -> Path:
    stem = re.sub(r"[^a-z0-9]+", "-", source.stem.lower()).strip("-")
    return SCENARIOS_DIR / f"{stem}.yaml"


def cmd_import(args) -> int:
    from harness.inputs.scenario import load_scenario

    source = Path(args.file)
    if not source.is_file():
        raise UsageError(f"{source}: no such file")
    try:
        pairs = read_overrides(source.read_text())
    except (UsageError, ValueError) as exc:
        raise UsageError(f"{source}: {exc}") from None
    if not pairs:
        raise UsageError(f"{source}: no key=value override found (a main_ppo command, or one key=value a line)")
    out = scale(pairs)
    target = Path(args.out) if args.out else default_out(source)
    if target.exists() and not args.force:
        raise UsageError(f"{target}: exists (--force to overwrite)")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(scenario_text(source, out))
    print(f"{shown_path(source)}: {len(pairs)} settings, {len(out.names)} kept, {len(out.dropped)} dropped")
    print("scaled:")
    for line in out.scaled:
        print(f"  {line}")
    print("dropped:")
    for line in out.dropped or ["(nothing)"]:
        print(f"  {line}")
    try:
        scenario = load_scenario(target)
    except UsageError as exc:
        print(f"error: wrote {shown_path(target)}, but it does not load on this checkout: {exc}")
        return 2
    print(
        f"wrote {shown_path(target)} (scenario {scenario.name}: grad_accum {scenario.grad_accum}, "
        f"ppo_mini_batches {scenario.ppo_mini_batches}, steps {scenario.steps})"
    )
    if target.parent.resolve() == SCENARIOS_DIR.resolve():
        print(
            "next: run its cells (make verify ARGS='--scenario NAME') and give each arm an entry in "
            "scenarios/expectations.yaml"
        )
    return 0
