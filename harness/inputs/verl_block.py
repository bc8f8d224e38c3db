"""A scenario's `verl:` block: settings named as verl's Hydra config names them
(`actor_rollout_ref.actor.kl_loss_coef`), folded into the scenario's own fields before it is validated.

One table (VERL_SETTINGS, then the patterns of OTHER_SETTINGS) says for every verl name what it is here:
- `sets`: the scenario field it sets (`actor_rollout_ref.actor.optim.lr` -> `optim.lr`); verl's objects are still
  built from that field, in rank/verl_side/verl_config.py only;
- `fixed`: a value the harness always runs (strategy fsdp2, shuffle off); the same value is accepted, another refused;
- `not applicable`, with why (the rollout engine, nodes, logger, data files): kept in the scenario, so `harness list`
  and every record show it;
- `refused`, with why: meaningful to verl's actor update, not honoured here yet. A known verl name the table does not
  list is refused too: nothing is silently ignored.

Every name is first checked against verl 0.9.1's own config names (harness/inputs/verl_names.json, written from verl's
dataclasses and trainer YAML by harness/rank/verl_side/config_names.py); an unknown name gets the closest known one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

NAMES_FILE = Path(__file__).with_name("verl_names.json")

A = "actor_rollout_ref.actor."
M = "actor_rollout_ref.model."
R = "actor_rollout_ref.ref."
RO = "actor_rollout_ref.rollout."


@dataclass(frozen=True)
class Setting:
    kind: str  # "sets", "fixed", "not applicable", "refused", "batch"
    field: str = ""  # `sets`: the scenario's dotted field
    why: str = ""
    value: object = None  # `fixed`: the value the harness runs
    values: tuple = ()  # `sets`: (verl's value, the field's value) pairs where the two name a choice differently


def sets(field: str, values: tuple = ()) -> Setting:
    return Setting("sets", field=field, values=values)


def fixed(value, why: str) -> Setting:
    return Setting("fixed", value=value, why=why)


def not_applicable(why: str) -> Setting:
    return Setting("not applicable", why=why)


def refused(why: str) -> Setting:
    return Setting("refused", why=why)


# The global batch's sizes: folded together (fold_batch_sizes), since the scenario counts micro-batches per rank.
BATCH = Setting("batch", why="folded into grad_accum and ppo_mini_batches with the micro-batch size and ranks")

_ROLLOUT = "the rollout engine (generation): the harness's responses are fixed tensors, nothing is generated"
_DATA = "data files and the dataloader: the harness's samples come from the scenario's seed (rank/oracle/batch.py)"
_HOSTS = "hosts and processes: the world size is the scenario's `ranks` (harness import scales it)"
_RUN = "the run's bookkeeping (logging, checkpoints, validation): no judged number depends on it"
_NO_CRITIC = (
    "the critic and the reward: they make the advantages before the actor update; the harness gives each sample its "
    "advantage"
)
_PROFILER = "the profiler: it observes, it changes no number"
_COMPILE = "verl compiles its unfused entropy path; the harness keeps it eager (CPU runs) and judges the fused head"
_OFFLOAD_BETWEEN = (
    "verl's engine moves the parameters (or optimizer state) to the CPU between phases; the harness does not model "
    "that movement (offload_policy, `cpu_offload`, is FSDP2's own offload and is honoured)"
)

VERL_SETTINGS: dict[str, Setting] = {
    # -- the actor's optimizer --------------------------------------------------------------------------------
    A + "optim.optimizer": sets("optim.optimizer"),
    A + "optim.optimizer_impl": fixed("torch.optim", "the oracle runs torch's own optimizer of the same name"),
    A + "optim.lr": sets("optim.lr"),
    A + "optim.weight_decay": sets("optim.weight_decay"),
    A + "optim.betas": sets("optim.betas"),
    A + "optim.clip_grad": sets("optim.clip_grad"),
    A + "grad_clip": sets("optim.clip_grad"),
    A + "optim.lr_warmup_steps": sets("optim.lr_warmup_steps"),
    A + "optim.lr_warmup_steps_ratio": sets("optim.lr_warmup_steps_ratio"),
    A + "optim.lr_scheduler_type": sets("optim.lr_scheduler_type"),
    A + "optim.min_lr_ratio": sets("optim.min_lr_ratio"),
    A + "optim.num_cycles": sets("optim.num_cycles"),
    A + "optim.override_optimizer_config.momentum": sets("optim.momentum"),
    A + "optim.total_training_steps": not_applicable(
        "the trainer sets it from the run's length; here the scenario's `steps` (verl_config.py passes them)"
    ),
    # -- the actor's mini-batching --------------------------------------------------------------------------
    A + "ppo_mini_batch_size": BATCH,
    "data.train_batch_size": BATCH,
    RO + "n": BATCH,
    A + "ppo_micro_batch_size_per_gpu": sets("batch.micro_batch_size"),
    A + "ppo_epochs": sets("ppo_epochs"),
    A + "shuffle": fixed(False, "the oracle takes the mini-batches in order (rank/oracle/update.py)"),
    A + "use_dynamic_bsz": sets("engine.use_dynamic_bsz"),
    A + "ppo_max_token_len_per_gpu": sets("engine.max_token_len_per_gpu"),
    # -- the actor's loss ---------------------------------------------------------------------------------------
    A + "clip_ratio": sets("loss.clip_ratio"),
    A + "clip_ratio_low": sets("loss.clip_ratio_low"),
    A + "clip_ratio_high": sets("loss.clip_ratio_high"),
    A + "clip_ratio_c": sets("loss.clip_ratio_c"),
    A + "entropy_coeff": sets("loss.entropy_coeff"),
    A + "calculate_entropy": sets("loss.calculate_entropy"),
    A + "loss_agg_mode": sets("loss.loss_agg_mode"),
    A + "policy_loss.loss_mode": sets("loss.loss_mode"),
    A + "use_kl_loss": sets("loss.use_kl_loss"),
    A + "kl_loss_coef": sets("loss.kl_loss_coef"),
    A + "kl_loss_type": sets("loss.kl_loss_type"),
    # -- the actor's engine ------------------------------------------------------------------------------------
    A + "strategy": fixed("fsdp2", "the subject of this harness is FSDP2"),
    A + "fsdp_config.strategy": fixed("fsdp2", "the subject of this harness is FSDP2"),
    A + "fsdp_config.fsdp_size": sets("engine.fsdp_size"),
    A + "fsdp_config.offload_policy": sets("cpu_offload"),
    A + "fsdp_config.use_no_sync_for_gradient_accumulation": sets("engine.no_sync"),
    A + "fsdp_config.param_offload": fixed(False, _OFFLOAD_BETWEEN),
    A + "fsdp_config.optimizer_offload": fixed(False, _OFFLOAD_BETWEEN),
    A + "fsdp_config.model_dtype": fixed("fp32", "the actor's master weights are fp32; `precision` sets the compute"),
    A + "fsdp_config.reshard_after_forward": fixed(True, "verl's default, the one the harness runs"),
    A + "fsdp_config.wrap_policy.min_num_params": fixed(0, "verl's default wrap policy, the one the harness runs"),
    A + "fsdp_config.ulysses_sequence_parallel_size": sets("engine.ulysses_sequence_parallel_size"),
    A + "ulysses_sequence_parallel_size": sets("engine.ulysses_sequence_parallel_size"),
    A + "fsdp_config.use_torch_compile": fixed(False, _COMPILE),
    A + "use_torch_compile": fixed(False, _COMPILE),
    A + "use_fused_kernels": sets("engine.use_fused_kernels"),
    A + "fsdp_config.forward_prefetch": fixed(False, "verl's default, the one the harness runs"),
    A + "checkpoint.*": not_applicable(_RUN),
    A + "profiler.*": not_applicable(_PROFILER),
    # -- the model ------------------------------------------------------------------------------------------------
    M + "path": not_applicable("the model: the harness's tiny model of the same architecture (`model:`) stands for it"),
    M + "trust_remote_code": not_applicable("how the checkpoint is loaded: the tiny model is built by transformers"),
    M + "use_shm": not_applicable("how the checkpoint is loaded: the tiny model is built by transformers"),
    M + "external_lib": not_applicable("an import before loading: the tiny model needs none"),
    M + "tokenizer_path": not_applicable("the tokenizer: the harness's samples are token ids"),
    M + "custom_chat_template": not_applicable("the tokenizer: the harness's samples are token ids"),
    M + "use_remove_padding": sets("engine.use_remove_padding"),
    M + "enable_gradient_checkpointing": sets("engine.gradient_checkpointing"),
    M + "use_fused_kernels": sets("engine.use_fused_kernels"),
    M + "fused_kernel_options.impl_backend": sets("fused_backend"),
    M + "use_liger": fixed(False, "Liger's kernels need CUDA and replace the model's forward; not honoured yet"),
    M + "enable_activation_offload": fixed(False, "activation offload: not honoured yet"),
    M + "lora_rank": fixed(0, "LoRA adapters: not honoured yet"),
    # -- the reference policy (forward only) -----------------------------------------------------------------
    R + "fsdp_config.param_offload": sets("ref.param_offload"),
    R + "log_prob_use_dynamic_bsz": sets("ref.log_prob_use_dynamic_bsz"),
    R + "log_prob_micro_batch_size_per_gpu": sets("batch.micro_batch_size"),
    R + "log_prob_max_token_len_per_gpu": sets("engine.max_token_len_per_gpu"),
    R + "ulysses_sequence_parallel_size": not_applicable(
        "the ref's forward runs at the actor's Ulysses SP size here (engine.ulysses_sequence_parallel_size); SP "
        "splits each sequence over ranks, not the ref's log-probs the KL loss reads"
    ),
    R + "strategy": fixed("fsdp2", "the subject of this harness is FSDP2"),
    R + "fsdp_config.strategy": fixed("fsdp2", "the subject of this harness is FSDP2"),
    R + "use_torch_compile": fixed(False, _COMPILE),
    R + "fsdp_config.use_torch_compile": fixed(False, _COMPILE),
    R + "profiler.*": not_applicable(_PROFILER),
    # -- the rollout's settings that the actor's old log-prob pass reads ----------------------------------------
    RO + "log_prob_micro_batch_size_per_gpu": sets("batch.micro_batch_size"),
    RO + "log_prob_use_dynamic_bsz": sets("engine.use_dynamic_bsz"),
    RO + "log_prob_max_token_len_per_gpu": sets("engine.max_token_len_per_gpu"),
    RO + "temperature": sets("temperature"),
    RO + "*": not_applicable(_ROLLOUT),
    # -- the algorithm ------------------------------------------------------------------------------------------
    "algorithm.adv_estimator": not_applicable(
        "it turns rewards into advantages before the actor update; the harness gives each sample its advantage"
    ),
    "algorithm.norm_adv_by_std_in_grpo": not_applicable(
        "part of the advantage estimator (see algorithm.adv_estimator)"
    ),
    "algorithm.gamma": not_applicable("part of the advantage estimator (see algorithm.adv_estimator)"),
    "algorithm.lam": not_applicable("part of the advantage estimator (see algorithm.adv_estimator)"),
    "algorithm.use_kl_in_reward": fixed(False, "a KL penalty in the reward: not honoured yet (use_kl_loss is)"),
    "algorithm.kl_ctrl.*": not_applicable("the in-reward KL controller (algorithm.use_kl_in_reward is off)"),
    "algorithm.rollout_correction.*": refused(
        "rollout correction's importance weights change the actor's loss: not honoured yet"
    ),
    # -- the run ----------------------------------------------------------------------------------------------
    "trainer.nnodes": not_applicable(_HOSTS),
    "trainer.n_gpus_per_node": not_applicable(_HOSTS),
    "trainer.device": not_applicable("the device is the scenario's `device` (auto: what this host has)"),
    "trainer.total_training_steps": sets("steps"),
    # main_ppo.py runs trainer/ppo/v1's trainer when true (verl 0.9.1's default), ray_trainer.py's when false.
    "trainer.use_v1": sets("trainer", values=((True, "v1"), (False, "ray"))),
    "trainer.*": not_applicable(_RUN),
    "data.*": not_applicable(_DATA),
    "critic.*": not_applicable(_NO_CRITIC),
    "reward_model.*": not_applicable(_NO_CRITIC),
    "reward.*": not_applicable(_NO_CRITIC),
    "custom_reward_function.*": not_applicable(_NO_CRITIC),
    "sandbox_fusion.*": not_applicable(_NO_CRITIC),
    "global_profiler.*": not_applicable(_PROFILER),
    "ray_kwargs.*": not_applicable("Ray's own settings: the harness launches its ranks with torchrun"),
    "transfer_queue.*": not_applicable("the trainer's data transport between Ray workers: no judged number"),
    "distillation.*": not_applicable("distillation: not the GRPO/PPO actor update this harness judges"),
    "skip.*": not_applicable(_RUN),
    "model_engine": not_applicable("the engine family: the harness runs verl's FSDP engine"),
}

# Any other known name: meaningful to verl, not honoured here.
UNLISTED = refused("a setting of verl's trainer that the harness does not honour yet")


@dataclass(frozen=True)
class Known:
    names: frozenset
    open: tuple  # names whose sub-keys are free (`+...override_config.x=...`)
    verl: str


@cache
def known_names() -> Known:
    data = json.loads(NAMES_FILE.read_text())
    return Known(frozenset(data["names"]), tuple(data["open"]), data["verl"])


def is_known(name: str) -> bool:
    known = known_names()
    if name in known.names:
        return True
    return any(name.startswith(prefix + ".") for prefix in known.open)


def closest_name(name: str) -> str | None:
    """The known verl name closest to a mistyped one: among the names of the same first part where there are
    (actor_rollout_ref.actor.kl_los_coef), else among all."""
    from difflib import get_close_matches

    names = known_names().names
    same_root = [n for n in names if n.split(".", 1)[0] == name.split(".", 1)[0]] or list(names)
    found = get_close_matches(name, same_root, n=1, cutoff=0.6)
    if not found and "." in name:
        # A misspelt last part under the right parent: compare the last parts of that parent's names.
        parent, last = name.rsplit(".", 1)
        siblings = {n.rsplit(".", 1)[1]: n for n in names if n.rsplit(".", 1)[0] == parent}
        near = get_close_matches(last, list(siblings), n=1, cutoff=0.6)
        found = [siblings[near[0]]] if near else []
    return found[0] if found else None


def setting_of(name: str) -> Setting:
    """The table's entry for a known name: its own line, else the first pattern that matches it, else refused."""
    if name in VERL_SETTINGS:
        return VERL_SETTINGS[name]
    for pattern, setting in VERL_SETTINGS.items():
        if "*" in pattern and fnmatchcase(name, pattern):
            return setting
    return UNLISTED


def field_exists(model, dotted: str) -> bool:
    """Whether the scenario schema (a pydantic model) has this dotted field."""
    from pydantic import BaseModel

    *parents, last = dotted.split(".")
    for name in parents:
        info = model.model_fields.get(name)
        if info is None or not (isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)):
            return False
        model = info.annotation
    return last in model.model_fields


def _get(raw: dict, dotted: str):
    node = raw
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _put(raw: dict, dotted: str, value):
    *parents, last = dotted.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


_MISSING = object()


def _same(a, b) -> bool:
    as_tuple = lambda v: tuple(v) if isinstance(v, list) else v
    return as_tuple(a) == as_tuple(b)


class _Folder:
    """Sets scenario fields from verl names, remembering which name set each, so that two settings of one field
    that disagree are named together."""

    def __init__(self, where: str, raw: dict, schema):
        self.where, self.raw, self.schema = where, raw, schema
        self.given = {}  # field -> what the file itself set (before any verl name)
        self.set_by: dict[str, tuple[str, object]] = {}  # field -> (verl name, value)

    def set(self, field: str, value, name: str):
        from harness.errors import UsageError

        if not field_exists(self.schema, field):
            raise UsageError(
                f"{self.where}: verl.{name}: refused: not honoured yet (the scenario field it sets, `{field}`, "
                "is not in this harness's schema)"
            )
        if isinstance(value, list):
            value = tuple(value)
        if field in self.set_by and not _same(self.set_by[field][1], value):
            other, before = self.set_by[field]
            raise UsageError(
                f"{self.where}: verl.{name} ({value!r}) and verl.{other} ({before!r}) both set `{field}`, differently"
            )
        current = _get(self.raw, field)
        if field not in self.set_by and current is not _MISSING and not _same(current, value):
            raise UsageError(
                f"{self.where}: verl.{name} ({value!r}) and the field `{field}` ({current!r}) set the same setting "
                "differently: keep one"
            )
        self.set_by[field] = (name, value)
        _put(self.raw, field, value)


def fold(raw: dict, where: str, schema) -> dict:
    """raw with its `verl:` block folded in: each `sets` name's value in its scenario field, the batch sizes in
    grad_accum and ppo_mini_batches, and `verl` rewritten as name -> {value, kind, field | why} (what `harness list`
    and the record show). Any unknown, refused or conflicting name: a one-line UsageError naming the file and name."""
    from harness.errors import UsageError

    block = raw.get("verl")
    if block is None:
        return raw
    if not isinstance(block, dict) or not all(isinstance(k, str) for k in block):
        raise UsageError(f"{where}: field 'verl': a mapping of verl config names (dotted) to values")
    folder = _Folder(where, raw, schema)
    resolved, batch = {}, {}
    for given, value in block.items():
        name = given.removeprefix("+")
        value = _number_of(value)
        if not is_known(name):
            near = closest_name(name)
            hint = f" (did you mean `{near}`?)" if near else ""
            raise UsageError(f"{where}: verl.{given}: not a config name of verl {known_names().verl}{hint}")
        setting = setting_of(name)
        if setting.kind == "refused":
            raise UsageError(f"{where}: verl.{name}: refused: {setting.why}")
        if setting.kind == "fixed" and not _same(value, setting.value):
            raise UsageError(
                f"{where}: verl.{name}: the harness runs {setting.value!r} only ({setting.why}), got {value!r}"
            )
        if setting.kind == "sets":
            folder.set(setting.field, _field_value(setting, value), name)
        if setting.kind == "batch":
            batch[name] = value
        entry = {"value": value, "kind": setting.kind}
        entry.update({"field": setting.field} if setting.kind == "sets" else {"why": setting.why})
        resolved[name] = entry
    if batch:
        fold_batch_sizes(folder, batch)
    raw["verl"] = resolved
    return raw


def _field_value(setting: Setting, value):
    """The field's value for verl's (trainer.use_v1: true -> trainer: v1); a value the pairs do not name is passed
    on as given, for the scenario's own check to refuse naming the file and field."""
    for verl_value, field_value in setting.values:
        if type(value) is type(verl_value) and value == verl_value:
            return field_value
    return value


def _number_of(value):
    """`1e-6` in YAML is a string to PyYAML (YAML 1.1 wants `1.0e-6`); Hydra, reading the same text from a run
    script, takes a number. A verl value's number is read as Hydra's own override parser reads it."""
    if isinstance(value, str):
        from harness.inputs.verl_overrides import hydra_value

        try:
            read = hydra_value(value)
        except ValueError:
            return value
        return read if isinstance(read, (int, float)) and not isinstance(read, bool) else value
    return value


class _CountedEngine(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    ulysses_sequence_parallel_size: int = 1


class _CountedBatch(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    micro_batch_size: int = 2


class _Counted(BaseModel):
    """The scenario fields verl's batch sizes are counted against, as the file has them with the `sets` names
    folded in (the scenario itself is validated after the fold): each a whole number, the scenario's defaults."""

    model_config = ConfigDict(extra="ignore", strict=True)
    ranks: int
    engine: _CountedEngine = _CountedEngine()
    batch: _CountedBatch = _CountedBatch()
    grad_accum: int = 1


def fold_batch_sizes(folder: _Folder, sizes: dict):
    """verl counts its global batch in prompts (data.train_batch_size, the mini-batch ppo_mini_batch_size), each
    with rollout.n responses; the scenario counts micro-batches of samples per data-parallel rank (grad_accum) and
    mini-batches per step (ppo_mini_batches). Every response is one sample here (the harness's advantages are given,
    so no group of n shares a prompt's reward)."""
    from harness.errors import UsageError

    raw, where = folder.raw, folder.where
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UsageError(f"{where}: verl.{name}: a positive whole number, got {value!r}")
    n = sizes.get(RO + "n", 1)
    try:
        counted = _Counted.model_validate(raw)
    except ValidationError as exc:
        if exc.errors()[0]["loc"] == ("grad_accum",):
            raise UsageError(f"{where}: field 'grad_accum': a whole number, got {raw['grad_accum']!r}") from None
        counted = None
    if counted is None or counted.ranks % counted.engine.ulysses_sequence_parallel_size:
        raise UsageError(f"{where}: verl: the batch sizes need whole `ranks`, micro-batch size and SP size")
    ranks, sp, micro = counted.ranks, counted.engine.ulysses_sequence_parallel_size, counted.batch.micro_batch_size
    dp = ranks // sp
    if "data.train_batch_size" in sizes:
        samples = sizes["data.train_batch_size"] * n
        if samples % (dp * micro):
            raise UsageError(
                f"{where}: verl.data.train_batch_size x rollout.n ({samples} samples) must be a multiple of "
                f"{dp} data-parallel ranks x micro-batch size {micro}"
            )
        folder.set("grad_accum", samples // (dp * micro), "data.train_batch_size")
    else:
        samples = dp * counted.grad_accum * micro
    if A + "ppo_mini_batch_size" in sizes:
        per_mini = sizes[A + "ppo_mini_batch_size"] * n
        if samples % per_mini:
            raise UsageError(
                f"{where}: verl.{A}ppo_mini_batch_size x rollout.n ({per_mini} samples) must divide the global batch "
                f"({samples} samples)"
            )
        folder.set("ppo_mini_batches", samples // per_mini, A + "ppo_mini_batch_size")


def not_applicable_lines(resolved: dict) -> list[str]:
    """`name=value: why` for each not-applicable name of a scenario's resolved `verl` block."""
    return [
        f"{name}={entry['value']}: {entry['why']}"
        for name, entry in resolved.items()
        if entry.get("kind") == "not applicable"
    ]
