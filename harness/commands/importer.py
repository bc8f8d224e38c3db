"""`python -m harness import FILE`: a verl run script (read as bash reads it: arrays, `"${A[@]}"`, defaults,
quoting; inputs/shell_script.py) or a file of overrides (one `key=value` a line) as a scenario with a `verl:` block,
on the tiny model of the script's own family, scaled to this host. It prints, and the written file records:
- each value it scaled (from -> to, why);
- each value the harness sets that the script left to verl (from verl's default -> the harness's, why), and each
  verl default it writes where the harness's own default differs (use_fused_kernels: verl's false, not the
  harness's true);
- each setting it dropped, each it keeps but does not run, and what bash would evaluate but import cannot (why,
  where); the trainer the script runs, and what the scenario is not though the script is (in its name and
  description).
It writes the scenario only once it loads.

What is scaled, and how (the settings themselves, lr, clip ratios, KL, ..., are kept as the script has them):
- the world (trainer.nnodes x trainer.n_gpus_per_node) to `ranks` 2, or 1 where the script runs on one GPU;
  Ulysses SP to 2 (on the 2 ranks, as engine-update-sp2 runs it);
- the micro-batch sizes to the tiny batch's 2 samples a rank;
- the global batch: rollout.n to at most 2, mini-batches a step to at most 2, one micro-batch a rank each;
- the token limits: the same number of longest sequences per limit, at the tiny model's sequence length;
- the run's length to 2 RL steps.
"""

from __future__ import annotations

import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import EXIT_OK, UsageError
from harness.inputs.model_families import chosen_model, tiny_model_of
from harness.inputs.verl_block import RO, VERL_SETTINGS, A, M, R, closest_name, field_exists, is_known, setting_of
from harness.inputs.verl_defaults import MISSING, is_interpolated, verl_default
from harness.inputs.verl_overrides import hydra_value, read_overrides_file
from harness.paths import SCENARIOS_DIR, shown_path

TINY_MICRO = 2  # samples a micro-batch holds in the tiny batch (BatchSettings.micro_batch_size)
TINY_SEQ = 32  # the tiny batch's longest sequence (BatchSettings.seq_len)
STEPS = 2  # RL steps: the second starts from updated weights, so the next old log-probs are judged too
MAX_N = 2
MAX_MINI_BATCHES = 2
SP = "engine.ulysses_sequence_parallel_size"
PRECISION_LINE = (
    "precision: verl's default (bf16 parameters under bf16 autocast) -> fp32 (the oracle's precision, where "
    "every update, metric and log-prob is judged tightly; set `precision: bf16-mixed` for verl's default)"
)


CLOSEST_SEARCHED = 20  # unknown names a close match is searched for (difflib over verl's names: slow in bulk)
BINARY_SAMPLE = 8192  # bytes looked at for a NUL: a text file has none


@dataclass
class Imported:
    names: dict = field(default_factory=dict)  # verl name -> value, in the script's order (the written block)
    comments: dict = field(default_factory=dict)  # verl name -> "from X: why" beside a scaled or set value
    fields: dict = field(default_factory=dict)  # scenario fields the import sets itself (ranks, steps, model)
    scaled: list = field(default_factory=list)  # "what: from -> to (why)"
    harness_set: list = field(default_factory=list)  # "name: verl's default X -> Y (why)": not in the script
    defaults: list = field(default_factory=list)  # "name: verl's default X (the harness's own Y)": written
    dropped: list = field(default_factory=list)  # "name=value: why"
    notes: list = field(default_factory=list)  # "path:line:col: ..." what the reading found unknown
    not_modelled: dict = field(default_factory=dict)  # why -> ["name=value", ...]: kept in the block, not run
    trainer: str = "verl.trainer.main_ppo: the PPO/GRPO actor update"  # what the script runs, in words
    not_as_run: list = field(default_factory=list)  # (word of the file's name, words): what the scenario is not


class _RunKind(BaseModel):
    """The overrides that say what kind of run the script is, as its text gives them (`+` dropped): the others are
    read through verl's names and the harness's table (scale)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    distillation: str = Field("", alias="distillation.enabled")
    loss_mode: str = Field("verl's default", alias="distillation.distillation_loss.loss_mode")
    multi_turn: str = Field("", alias="actor_rollout_ref.rollout.multi_turn.enable")


def read_overrides(text: str, where: str = "script") -> list[tuple[str, str]]:
    """(name, value text) per override, `+` kept, in order (verl_overrides.read_overrides_file's pairs)."""
    return read_overrides_file(text, where).pairs


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


def scale(pairs: list[tuple[str, str]], model: str | None = None, as_written: dict | None = None) -> Imported:
    """The overrides as a scenario's fields and verl block: each read as Hydra reads it, checked against verl's
    names and the harness's table, scaled, on the tiny model of the script's family (or `model`, chosen), with
    verl's defaults where the harness's own would differ."""
    out = Imported()
    searched = 0
    for given, text in pairs:
        name = given.removeprefix("+")
        try:
            value = hydra_value(text)
        except ValueError as exc:
            out.dropped.append(f"{given}={text}: cannot be kept whole ({exc})")
            continue
        if not is_known(name):
            searched += 1
            near = closest_name(name) if searched <= CLOSEST_SEARCHED else None
            out.dropped.append(
                f"{given}={text}: not a config name of verl 0.9.1" + (f" (closest: {near})" if near else "")
            )
            continue
        setting = setting_of(name)
        why = _why_dropped(name, setting, value, text)
        if why:
            out.dropped.append(f"{given}={text}: {why}")
            continue
        check_number(given, text, value)
        if setting.kind == "not applicable":
            out.not_modelled.setdefault(setting.why, []).append(f"{name}={text}")
        out.names[name] = value
    _drop_unrun_ref(out)
    what_it_is_not(out, pairs)
    _choose_model(out, model, (as_written or {}).get(M + "path"))
    fill_defaults(out)
    _scale_sp(out)
    _scale_world(out)
    _scale_batch(out)
    _scale_tokens(out)
    _scale_steps(out)
    out.scaled.append(PRECISION_LINE)
    return out


def _drop_unrun_ref(out: Imported):
    """The reference engine's settings where it never runs here (use_kl_loss not true): verl may still build it
    (use_kl_in_reward), the harness runs none, and its scenario loader refuses settings for an engine that never
    runs (a value other than the scenario's default). Dropped, each said so."""
    if out.names.get(A + "use_kl_loss") is True:
        return
    ref = [n for n in out.names if n.startswith(R) and _fields_set(n).startswith("ref.")]
    for name in [n for n in ref if not _same(out.names[n], _scenario_default(_fields_set(n)))]:
        value = out.names.pop(name)
        out.dropped.append(
            f"{name}={value!r}: the reference engine never runs here (use_kl_loss is not true; the harness runs "
            "no reference for use_kl_in_reward)"
        )


def check_number(given: str, text: str, value):
    """A value that is not a number where verl expects one (its default is a number) is refused in one line: verl
    would refuse it, and scaling it would hide that (`data.train_batch_size=aaaa` is no batch of 4)."""
    if value is None or (isinstance(value, str) and value.startswith("${")):
        return  # null (verl's own for an optional number), or a Hydra interpolation (verl resolves it)
    default = verl_default(given.removeprefix("+"), {})
    number = isinstance(default, (int, float)) and not isinstance(default, bool)
    if not number or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return
    kind = "an integer" if isinstance(default, int) else "a number"
    raise UsageError(f"{given}={text}: verl expects {kind} here (its default is {default!r}), not {value!r}")


# What a script's settings can say it is that the scenario is not: (the word its file name may hold, the test on the
# settings, the words the scenario's description says instead).
def _strategy_not_fsdp2(names: dict) -> str | None:
    found = {v for n, v in names.items() if n.endswith(".strategy") and isinstance(v, str) and v != "fsdp2"}
    return ", ".join(sorted(found)) or None


def what_it_is_not(out: Imported, pairs: list[tuple[str, str]]):
    """The trainer the script runs, in words, and what the scenario is not though the script is: another FSDP
    strategy run as fsdp2, video run on images, distillation's teacher or an agent loop not run."""
    given = {k.removeprefix("+"): v for k, v in pairs}
    strategy = _strategy_not_fsdp2({k: hydra_or_text(v) for k, v in given.items()})
    if strategy:
        out.not_as_run.append(("turbo" if "turbo" in strategy else strategy, f"FSDP2, not the script's {strategy}"))
    elif not any(k.endswith(".strategy") for k in given) and verl_default(A + "strategy", {}) != "fsdp2":
        default = verl_default(A + "strategy", {})
        out.not_as_run.append(("", f"FSDP2, not verl's default strategy {default} (no strategy read from the script)"))
    data = " ".join(f"{k}={v}" for k, v in given.items() if k.startswith(("data.", "reward")))
    if "video" in data.lower():
        out.not_as_run.append(("video", "images stand in for video (the harness's seeded images, not its videos)"))
    kind = _RunKind.model_validate(given)
    if kind.distillation.lower() == "true":
        mode = kind.loss_mode
        out.trainer = (
            f"verl.trainer.main_ppo with on-policy distillation (a teacher model, loss_mode {mode}): imported as its "
            "GRPO actor update without the teacher's loss"
        )
        out.not_as_run.append(("opd", "no distillation: the teacher and its loss are not run"))
    multi_turn = kind.multi_turn.lower() == "true"
    if multi_turn or any(k.startswith("actor_rollout_ref.rollout.agent") for k in given):
        out.trainer = f"{out.trainer}; rollouts through an agent loop (the harness's seeded samples stand in)"
        out.not_as_run.append(("agent", "seeded samples stand in for the agent loop's trajectories"))


def hydra_or_text(text: str):
    try:
        return hydra_value(text)
    except ValueError:
        return text


def _choose_model(out: Imported, model: str | None, written: str | None = None):
    """The tiny model: --model's, else that of the family the model path names (where the path holds an unknown,
    its text as the script writes it: the directory's name still names the family)."""
    path = out.names.get(M + "path")
    if model:
        tiny, why = chosen_model(model), "chosen with --model"
    else:
        tiny, family = tiny_model_of(path if path is not None or written is None else written)
        why = f"the tiny model of its family, {family}: models/{tiny}.json"
        if path is None and written is not None:
            path, why = written, f"{why}, from the path's name; the path itself is unknown to import (dropped)"
    out.fields["model"] = tiny
    out.scaled.append(f"model: {path if path is not None else '(not set)'} -> {tiny} ({why})")


def _why_dropped(name: str, setting, value, text: str) -> str:
    if setting.kind == "refused":
        return f"refused: {setting.why}"
    if setting.kind == "fixed" and value != setting.value:
        return f"the harness runs {setting.value!r} only ({setting.why})"
    if setting.kind == "sets" and not field_exists(_schema(), setting.field):
        return f"not honoured yet on this checkout (its field `{setting.field}` is not in the scenario schema)"
    if setting.kind != "not applicable" and "$" in text:
        return "its value names a shell variable the script does not set"
    return ""


# -- what the script leaves to verl ---------------------------------------------------------------------------
def fill_defaults(out: Imported):
    """Where the script leaves a setting to verl and the harness would run another value: a `sets` name gets verl's
    default written (the harness's own default is not used); a `fixed` one the harness's value, reported as set by
    the harness (verl's default -> the harness's). The ref's settings only where the ref runs (use_kl_loss)."""
    given = dict(out.names)
    fields = {_fields_set(n) for n in given} - {""}
    fixed_seen = {_fixed_key(n) for n in given}
    dynamic = any(given.get(n) is True for n in (A + "use_dynamic_bsz", RO + "log_prob_use_dynamic_bsz"))
    for name in sorted(_candidates(), key=lambda n: ("fsdp_config." in n, is_interpolated(n))):
        if name.startswith(R) and given.get(A + "use_kl_loss") is not True:
            continue
        setting = VERL_SETTINGS[name]
        verl = verl_default(name, given)
        if setting.kind == "fixed":
            if _fixed_key(name) in fixed_seen or verl is MISSING:
                continue
            fixed_seen.add(_fixed_key(name))
            if not _same(verl, setting.value):
                out.names[name] = setting.value
                out.comments[name] = f"set by the harness: verl's default {verl!r} ({setting.why})"
                out.harness_set.append(f"{name}: verl's default {verl!r} -> {setting.value!r} ({setting.why})")
            continue
        harness = _scenario_default(setting.field)
        if setting.field in fields or verl in (MISSING, None) or harness is None or _same(verl, harness):
            continue
        if setting.field == "engine.max_token_len_per_gpu" and not dynamic:
            continue  # read only with dynamic bsz
        fields.add(setting.field)
        out.names[name] = verl
        out.comments[name] = f"not in the script: verl's default (the harness's own default is {harness!r})"
        out.defaults.append(f"{name}: not in the script: verl's default {verl!r} (not the harness's own {harness!r})")
    _fill_batch(out, given)


def _fill_batch(out: Imported, given: dict):
    """The global batch where the script leaves it to verl: verl's train_batch_size and ppo_mini_batch_size, written
    and then scaled as a script's would be. No micro-batch size: verl has none (the script must give one, or dynamic
    bsz): the harness's, said so."""
    for name in ("data.train_batch_size", A + "ppo_mini_batch_size"):
        verl = verl_default(name, given)
        if name not in given and isinstance(verl, int):
            out.names[name] = verl
            out.defaults.append(f"{name}: not in the script: verl's default {verl!r} (scaled as the script's would be)")
    name = A + "ppo_micro_batch_size_per_gpu"
    if name not in given and verl_default(name, given) is None:
        out.names[name] = TINY_MICRO
        why = "the tiny batch's micro-batch; verl's update needs one unless dynamic bsz forms them"
        out.comments[name] = f"set by the harness: verl's default None ({why})"
        out.harness_set.append(f"{name}: verl's default None -> {TINY_MICRO} ({why})")


def _verl_value(out: Imported, name: str):
    """The script's value of a name, else verl's default."""
    return out.names[name] if name in out.names else verl_default(name, {})


def _candidates() -> list[str]:
    return [n for n, s in VERL_SETTINGS.items() if "*" not in n and s.kind in ("sets", "fixed")]


def _fixed_key(name: str) -> tuple[str, str]:
    """`actor.use_torch_compile` and `actor.fsdp_config.use_torch_compile` are one setting (verl syncs them)."""
    parent, _, last = name.rpartition(".")
    return parent.removesuffix(".fsdp_config"), last


def _same(a, b) -> bool:
    as_tuple = lambda v: tuple(v) if isinstance(v, list) else v
    return as_tuple(a) == as_tuple(b)


def _scenario_default(dotted: str):
    model = _schema()
    *parents, last = dotted.split(".")
    for part in parents:
        model = model.model_fields[part].annotation
    info = model.model_fields[last]
    return info.get_default(call_default_factory=True)


def _schema():
    from harness.inputs.scenario import Scenario

    return Scenario


def _scale_sp(out: Imported):
    """Ulysses SP (engine-update-sp2 runs it): the actor's size, 2 where larger (the harness's 2 ranks)."""
    for name in [n for n in out.names if _fields_set(n) == SP]:
        if isinstance(out.names[name], int) and out.names[name] > 2:
            _scale(out, name, 2, "each sequence split over the harness's 2 ranks (as engine-update-sp2 runs it)")


def _sp_size(out: Imported) -> int:
    return next((v for n, v in out.names.items() if _fields_set(n) == SP and isinstance(v, int)), 1)


def _scale_world(out: Imported):
    nodes = _verl_value(out, "trainer.nnodes")
    gpus = _verl_value(out, "trainer.n_gpus_per_node")
    world = nodes * gpus if isinstance(nodes, int) and isinstance(gpus, int) else None
    ranks = 1 if world == 1 and _sp_size(out) == 1 else 2
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
    dp = out.fields["ranks"] // _sp_size(out)
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
            f"{per_mini} prompts x n {small_n} = one micro-batch of {TINY_MICRO} on each of {dp} data-parallel rank(s)",
        )
    if "data.train_batch_size" in out.names:
        why = f"{few} mini-batches a step (the script's {mini_batches}, at most {MAX_MINI_BATCHES})"
        _scale(out, "data.train_batch_size", per_mini * few, why)


def _scale_tokens(out: Imported):
    """The tiny batch's sequence lengths; the same number of longest sequences (prompt + response limits) per token
    limit, at the tiny length."""
    prompt, response = _verl_value(out, "data.max_prompt_length"), _verl_value(out, "data.max_response_length")
    seq, tiny_response = _scenario_default("batch.seq_len"), _scenario_default("batch.response_len")
    out.scaled.append(
        f"sequence lengths: data.max_prompt_length {prompt} + data.max_response_length {response} -> at most {seq} "
        f"tokens, {tiny_response} of them response (the tiny batch's: batch.seq_len, batch.response_len)"
    )
    if not (isinstance(prompt, int) and isinstance(response, int)):
        return
    longest = prompt + response
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
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_yaml_value(str(k))}: {_yaml_value(v)}" for k, v in value.items()) + "}"
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


def report_sections(out: Imported) -> list[tuple[str, list[str]]]:
    """(heading, lines): what the import changed, set, kept from verl, dropped, did not model and found unknown;
    printed and written at the head of the scenario alike."""
    return [
        ("scaled", out.scaled),
        ("set by the harness, not in the script (verl's default -> the harness's)", out.harness_set or ["(nothing)"]),
        ("not in the script: verl's default written (the harness's own default differs)", out.defaults or ["(none)"]),
        ("dropped", out.dropped or ["(nothing)"]),
        ("not modelled (kept in the verl block, not run)", not_modelled_lines(out) or ["(nothing)"]),
        ("unknown to import (bash would evaluate it; import does not)", out.notes or ["(nothing)"]),
    ]


def not_modelled_lines(out: Imported) -> list[str]:
    """The settings the harness keeps but does not run, grouped by why: "why: a=1, b=2"."""
    return [f"{why}: {', '.join(names)}" for why, names in out.not_modelled.items()]


def one_line(text: str) -> str:
    """TEXT as one line of a YAML comment: a dropped value's newlines (a multi-line bash array entry) escaped, so
    that nothing of it starts a line of the file."""
    return str(text).replace("\r", "\\r").replace("\n", "\\n")


def scenario_text(source: Path, out: Imported) -> str:
    header = [f"# Imported from {shown_path(source)} by `python -m harness import` (verl 0.9.1's names)."]
    header += [f"# Trainer: {out.trainer}"] + [f"# Not as the script runs: {words}" for _, words in out.not_as_run]
    for heading, lines in report_sections(out):
        header += [f"# {heading[0].upper()}{heading[1:]}:"] + [f"#   {line}" for line in lines]
    header = [one_line(line) for line in header]
    body = [
        f"description: {_yaml_value(description(source, out))}",
        "path: engine",
        f"ranks: {out.fields['ranks']}",
    ]
    if "steps" in out.fields:
        body.append(f"steps: {out.fields['steps']}")
    body += [
        f"model: {out.fields['model']}",
        "precision: fp32  # set by the harness: verl's default is bf16 (see the head of this file)",
        "timeout_s: 300",
        "verl:",
    ]
    for name, value in out.names.items():
        comment = f"  # {one_line(out.comments[name])}" if name in out.comments else ""
        body.append(f"  {name}: {_yaml_value(value)}{comment}")
    return "\n".join(header + body) + "\n"


def description(source: Path, out: Imported) -> str:
    text = f"verl run script {source.name}, imported and scaled to the tiny model (harness import)"
    if out.not_as_run:
        text += "; not as the script runs: " + "; ".join(words for _, words in out.not_as_run)
    return text


def default_out(source: Path, out: Imported | None = None) -> Path:
    """scenarios/ + the file's stem, less the words that name what the scenario is not (`-turbo` on an fsdp2 run).
    A script under a directory named examples/ (verl's layout) has its folders there in the name too: verl's
    ppo_trainer/, rloo_trainer/ and gspo_trainer/ each hold a run_qwen3_8b_fsdp.sh."""
    parts = source.parts
    where = len(parts) - 1 - parts[::-1].index("examples") if "examples" in parts[:-1] else None
    named = "_".join([*parts[where + 1 : -1], source.stem]) if where is not None else source.stem
    stem = re.sub(r"[^a-z0-9]+", "-", named.lower()).strip("-")
    dropped = {word for word, _ in (out.not_as_run if out else [])}
    kept = [part for part in stem.split("-") if part not in dropped]
    return SCENARIOS_DIR / f"{'-'.join(kept) or stem}.yaml"


def read_text_file(source: Path, where: str) -> str:
    """The file's text; a file that is not text (a NUL byte, or not UTF-8) is one line naming why."""
    blob = source.read_bytes()
    if b"\x00" in blob[:BINARY_SAMPLE]:
        at = blob.index(b"\x00")
        raise UsageError(f"{where}: not a text file (a NUL byte at byte {at}): give a run script or key=value lines")
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{where}: not a text file (not UTF-8 at byte {exc.start}): give a run script or key=value lines"
        ) from None


def environment(given: list[str] | None) -> dict:
    """--env NAME=VALUE, each once."""
    env = {}
    for item in given or []:
        name, eq, value = item.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise UsageError(f"--env {item}: not NAME=VALUE")
        env[name] = value
    return env


def loaded_text(target: Path, text: str):
    """The scenario the text is, loaded from a file of the target's name in a directory of its own: nothing is
    written under scenarios/ unless it loads (a file there that does not would fail the commands that use it)."""
    from harness.inputs.scenario import load_scenario

    with tempfile.TemporaryDirectory() as tmp:
        trial = Path(tmp) / target.name
        trial.write_text(text)
        try:
            return load_scenario(trial)
        except UsageError as exc:
            why = str(exc).split(": ", 1)[-1]
            raise UsageError(
                f"{shown_path(target)}: not written: the imported scenario does not load ({why})"
            ) from None


def import_script(source: Path, env: dict, model: str | None = None) -> tuple:
    """(read, out, text): the script read (verl_overrides), scaled (Imported) and written as a scenario's text;
    a script import refuses raises UsageError, one line naming the file."""
    where = shown_path(source)
    read = read_overrides_file(read_text_file(source, where), where, env)
    if not read.pairs:
        raise UsageError(f"{where}: no key=value override found (a main_ppo command, or one key=value a line)")
    try:
        out = scale(read.pairs, model, read.as_written)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    out.dropped = read.dropped + out.dropped
    out.notes = read.notes + out.notes
    return read, out, scenario_text(source, out)


def fused_head_on(out: Imported) -> bool:
    """Whether the recipe runs the fused head (#6659's path): use_fused_kernels as the script, or verl, has it."""
    return out.names.get(M + "use_fused_kernels") is True


def cmd_import(args) -> int:
    if not args.file:
        raise UsageError("import: give a run script (or --examples DIR)")
    source = Path(args.file)
    if not source.is_file():
        raise UsageError(f"{source}: no such file")
    where = shown_path(source)
    read, out, text = import_script(source, environment(getattr(args, "env", None)), getattr(args, "model", None))
    target = Path(args.out) if args.out else default_out(source, out)
    if target.exists() and not args.force:
        raise UsageError(f"{target}: exists (--force to overwrite)")
    print(f"{where}: {len(read.pairs)} settings, {len(out.names)} written, {len(out.dropped)} dropped")
    print(f"trainer: {out.trainer}")
    for _, words in out.not_as_run:
        print(f"not as the script runs: {words}")
    for heading, lines in report_sections(out):
        print(f"{heading}:")
        for line in lines:
            print(f"  {line}")
    scenario = loaded_text(target, text)
    if not fused_head_on(out):
        print(f"{where}: not affected: use_fused_kernels is false (the fused head, #6659's path, never runs)")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(
        f"wrote {shown_path(target)} (scenario {scenario.name}: model {scenario.model}, grad_accum "
        f"{scenario.grad_accum}, ppo_mini_batches {scenario.ppo_mini_batches}, steps {scenario.steps})"
    )
    if target.parent.resolve() == SCENARIOS_DIR.resolve():
        print(
            "next: run its cells (make verify ARGS='--scenario NAME') and give each arm an entry in "
            "scenarios/expectations.yaml"
        )
    return EXIT_OK
