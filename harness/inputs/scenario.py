"""Scenarios are data: one YAML file each under scenarios/, validated here, expanded into scenario x arm runs.

Here: the scenario model (Scenario and its sections BatchSettings, LossSettings, RefSettings, EngineSettings,
OptimizerSettings, HeadSettings), its YAML loader, its loading with one-line errors naming the file and field (a typo
gets the closest field), and twins (two scenarios on different paths with the same training configuration)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, get_args

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.errors import UsageError, first_error_line
from harness.inputs.size_ceilings import CEILINGS, ceiling_words, most
from harness.inputs.verl_block import fold as fold_verl_block
from harness.paths import SCENARIOS_DIR, model_config_path

# An image's patch grid side and a micro-batch's index, each under its ceiling (inputs/size_ceilings.py).
_GridSide = Annotated[int, Field(ge=1, le=most("batch.image_grid"))]
_MicroIndex = Annotated[int, Field(ge=0, le=most("batch.text_only_micro_batches"))]

# Data files beside the scenarios that are no scenario.
NON_SCENARIO_FILES = {"expectations.yaml", "releases.yaml"}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _tuple_of_list(value):
    return tuple(value) if isinstance(value, list) else value


# YAML has no tuple: a list in the file is the tuple such a field holds (strict otherwise: its items too), so that
# a frozen scenario holds no mutable list.
FromList = BeforeValidator(_tuple_of_list)


class BatchSettings(Strict):
    micro_batch_size: int = Field(2, ge=1, le=most("batch.micro_batch_size"))
    seq_len: int = Field(32, ge=4, le=most("batch.seq_len"))
    response_len: int = Field(12, ge=1, le=most("batch.response_len"))
    images_per_sample: int = Field(1, ge=0, le=most("batch.images_per_sample"))
    image_grid: Annotated[tuple[_GridSide, _GridSide, _GridSide], FromList] = (1, 4, 4)
    # Engine path: every sample of a rank has the same prompt and response length. Otherwise lengths differ
    # from sample to sample and rank to rank.
    same_length: bool = False
    # Engine path: micro-batches (by index) whose samples carry no image, as a mixed text / image dataset gives
    # them; the vision tower sits out those forwards.
    text_only_micro_batches: Annotated[tuple[_MicroIndex, ...], FromList] = ()

    @model_validator(mode="after")
    def _response_fits(self):
        if self.response_len >= self.seq_len:
            raise ValueError("response_len must be smaller than seq_len")
        return self


class LossSettings(Strict):
    """The actor's loss, named as verl's actor config names it (actor_rollout_ref.actor.*): verl's FSDPActorConfig is
    filled from it (rank/verl_side/verl_config.py), the oracle computes it from the definitions
    (rank/oracle/loss.py)."""

    clip_ratio: float = Field(0.2, gt=0)  # sets clip_ratio_low and clip_ratio_high where they are not given
    clip_ratio_low: float | None = Field(None, gt=0)  # DAPO's clip-higher: the ratio's lower bound is 1 - this
    clip_ratio_high: float | None = Field(None, gt=0)  # ... and its upper bound 1 + this
    clip_ratio_c: float = Field(3.0, gt=1)  # the dual clip of a negative advantage's loss (vanilla)
    # 0.01, not verl's 0: today's scenarios keep their verdicts, and every one of them runs the entropy term
    entropy_coeff: float = Field(0.01, ge=0)
    # Entropy is asked of the actor iff this or entropy_coeff != 0 (ray_trainer._update_actor's rule); without it
    # verl's fused head runs its entropy-free backward.
    calculate_entropy: bool = False
    loss_agg_mode: Literal[
        "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    ] = "token-mean"
    loss_mode: Literal["vanilla", "gspo"] = "vanilla"  # actor.policy_loss.loss_mode
    use_kl_loss: bool = False
    kl_loss_coef: float = Field(0.001, ge=0)
    kl_loss_type: Literal[
        "kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3",
        "kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+", "k3+",
    ] = "low_var_kl"  # fmt: skip

    @property
    def entropy_asked(self) -> bool:
        """Whether the trainer asks the actor for entropy in the update (ray_trainer._update_actor's rule)."""
        return self.calculate_entropy or self.entropy_coeff != 0


class RefSettings(Strict):
    """The reference policy's engine (actor_rollout_ref.ref.*), built where loss.use_kl_loss asks for its
    log-probs: a second verl TrainingWorker on the same ranks, forward only, on the seeded (initial) weights."""

    param_offload: bool = False  # ref.fsdp_config.param_offload
    log_prob_use_dynamic_bsz: bool = False  # ref.log_prob_use_dynamic_bsz: its micro-batches formed by token count


# The direct step's loss is the harness's own token-mean vanilla PPO (rank/oracle/loss.py micro_batch_loss): the
# loss fields verl's ppo_loss honours beyond these run on the engine path only.
DIRECT_LOSS_FIELDS = ("clip_ratio", "clip_ratio_c", "entropy_coeff")


class EngineSettings(Strict):
    """verl's own settings, named as in verl's model/actor/engine config. rank/verl_side/verl_config.py turns them into
    verl's config objects for both paths; the direct path honours the ones its step can (see Scenario)."""

    # The subject of this harness: the fused log-prob head (actor_rollout_ref.model.use_fused_kernels).
    use_fused_kernels: bool = True
    # None: the path's own layout. The engine packs the batch to (1, nnz) by default (verl's default, True); the
    # direct step feeds the padded (B, L) batch, so its configuration says False.
    use_remove_padding: bool | None = None
    gradient_checkpointing: bool = False  # HFModelConfig.enable_gradient_checkpointing
    no_sync: bool = False  # use_no_sync_for_gradient_accumulation
    use_dynamic_bsz: bool = False  # micro-batches re-formed by token count, max_token_len_per_gpu each
    max_token_len_per_gpu: int = Field(4096, ge=1, le=most("engine.max_token_len_per_gpu"))
    # -1: one FSDP group over all ranks; n < ranks: HSDP, mesh (ranks / n, n)
    fsdp_size: int = Field(-1, le=most("engine.fsdp_size"))
    # Ulysses sequence parallelism: each sequence split over this many ranks, data-parallel groups of ranks / n
    # (FSDPEngineConfig.ulysses_sequence_parallel_size; verl needs use_remove_padding for it).
    ulysses_sequence_parallel_size: int = Field(1, ge=1, le=most("engine.ulysses_sequence_parallel_size"))


class OptimizerSettings(Strict):
    """The actor's optimizer, named as verl's FSDPOptimizerConfig names it (actor_rollout_ref.actor.optim). Used by
    scenarios with `steps` > 0: rank/verl_side/verl_config.py fills verl's config from it, the oracle runs torch's own
    optimizer of that name with the same values (rank/oracle/update.py)."""

    optimizer: Literal["AdamW", "SGD"] = "AdamW"  # a class of torch.optim (optimizer_impl: torch.optim)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    # Adam's; verl passes them to Adam-like optimizers only
    betas: Annotated[tuple[float, float], FromList] = (0.9, 0.999)
    # SGD's momentum, through verl's override_optimizer_config (PyTorch's FSDP tests use SGD with momentum: Adam's
    # update does not see a gradient wrong by a constant factor).
    momentum: float = Field(0.0, ge=0)
    clip_grad: float = Field(1.0, gt=0)
    # -1: lr_warmup_steps_ratio x total training steps
    lr_warmup_steps: int = Field(-1, le=most("optim.lr_warmup_steps"))
    lr_warmup_steps_ratio: float = Field(0.0, ge=0, le=1)
    lr_scheduler_type: Literal["constant", "cosine"] = "constant"
    min_lr_ratio: float | None = None
    num_cycles: float = 0.5

    @model_validator(mode="after")
    def _momentum_is_sgds(self):
        if self.momentum and self.optimizer != "SGD":
            raise ValueError("momentum is SGD's (AdamW takes betas)")
        return self


class HeadSettings(Strict):
    """`path: head` (`harness bench --real-size`, rank/head_bench.py): the lm_head unit alone, FSDP2-wrapped, at a
    checkpoint's size, computed one `way`: verl #6659's full_tensor() into verl's fused head (`upstream`; under bf16
    `upstream-cast` casts what it gathered), the candidate's FSDP forward method (`candidate`), or FSDP's own
    unfused lm_head(...) (`unfused`)."""

    hidden: int = Field(ge=1, le=most("head.hidden"))
    vocab: int = Field(ge=1, le=most("head.vocab"))
    tokens: int = Field(256, ge=1, le=most("head.tokens"))  # per rank
    way: Literal["upstream", "upstream-cast", "candidate", "unfused"]


# A scenario's fields the head path (the lm_head unit alone) never reads: set there, one would be recorded as run.
HEAD_IGNORES = ("batch", "grad_accum", "model", "model_overrides", "compile", "cpu_offload", "forward_only")

# Settings of `engine:` the direct step can honour (it feeds a padded batch, one micro-batch at a time).
DIRECT_ENGINE_FIELDS = ("use_fused_kernels",)


class Scenario(Strict):
    name: str
    description: str = ""
    # engine: verl's own FSDP engine, batch layout and loss (what verl's trainer runs); direct: our own actor step
    # around verl's apply_monkey_patch + apply_fsdp2 (a minimal case that isolates the fused forward).
    path: Literal["direct", "engine", "head"] = "direct"  # head: the lm_head unit alone (HeadSettings)
    head: HeadSettings | None = None  # path: head only
    engine: EngineSettings = EngineSettings()
    # Engine path: the trainer whose batch the engine gets. ray: ray_trainer.py's RayPPOTrainer (verl's
    # trainer.use_v1=False): the padded batch through left_right_2_no_padding, response_mask dense (B, longest
    # response). v1: trainer/ppo/v1's PPOTrainer (trainer.use_v1=True, verl 0.9.1's default): one entry per sample
    # stacked by list_of_dict_to_tensordict, response_mask nested (one length per sample).
    trainer: Literal["ray", "v1"] = "ray"
    ranks: int = Field(ge=1, le=most("ranks"))
    device: Literal["auto", "cpu", "cuda"] = "auto"
    model: str = "tiny-qwen3-vl"
    model_overrides: dict = Field(default_factory=dict)  # nested changes to the model config's fields
    precision: Literal["fp32", "bf16-mixed"] = "fp32"
    compile: bool = False
    # aot_eager runs dynamo's fake-tensor pass and AOT autograd (where both findings show) without inductor's
    # per-rank code generation; inductor is what a user's torch.compile runs by default.
    compile_backend: Literal["inductor", "aot_eager"] = "inductor"
    # model: the whole FSDP2-wrapped model (what `torch.compile(model)` does); head: the model's own forward (verl's
    # fused head), the vision-language model it calls (vision tower, decoder) eager; layers: each transformer block
    # on its own (torchtitan's apply_compile), the rest, the fused head included, stays eager. Either path, through
    # one function (rank/verl_side/torch_compile.py).
    compile_scope: Literal["model", "head", "layers"] = "model"
    cpu_offload: bool = False
    forward_only: bool = False
    grad_accum: int = Field(1, ge=1, le=most("grad_accum"))
    # The whole training update (engine path): `steps` RL steps, each the old log-probs on the current weights and
    # then verl's actor update (TrainingWorker.train_mini_batch: ppo_epochs x ppo_mini_batches optimizer steps,
    # clip, lr schedule), judged after every optimizer step. 0: one forward and backward, no optimizer step.
    steps: int = Field(0, ge=0, le=most("steps"))
    # The global batch is cut into this many mini-batches (verl's ppo_mini_batch_size = global batch / this);
    # each rank's grad_accum micro-batches are shared out among them.
    ppo_mini_batches: int = Field(1, ge=1, le=most("ppo_mini_batches"))
    ppo_epochs: int = Field(1, ge=1, le=most("ppo_epochs"))
    optim: OptimizerSettings = OptimizerSettings()
    fused_backend: Literal["torch", "triton"] = "torch"
    batch: BatchSettings = BatchSettings()
    loss: LossSettings = LossSettings()
    ref: RefSettings = RefSettings()
    temperature: float = Field(0.7, gt=0)
    seed: int = 1234
    timeout_s: float = Field(180, gt=0, le=most("timeout_s"))
    repeat: int = Field(0, ge=0, le=most("repeat"))  # timed steps after the checked one (benchmarks); 0: none
    warmup: int = Field(1, ge=0, le=most("warmup"))  # untimed steps before them
    arms: Annotated[tuple[str, ...] | None, FromList] = None  # None: the command's default arms
    tags: Annotated[tuple[str, ...], FromList] = ()  # e.g. "repro": part of `make repro`
    # The file's `verl:` block as the loader resolved it (inputs/verl_block.py): verl name -> {value, kind, field or
    # why}. The names that set a field are already in that field; the not-applicable ones are kept here, with why,
    # for `harness list` and the record.
    verl: dict = Field(default_factory=dict)
    # Update scenarios: the settings or loss terms (`optim.clip_grad`, `term.clip`) the verdict cannot see at this
    # scenario's values, each with why (`harness sensitivity` checks every other one moves a judged number by at
    # least 10 of its tolerances: judge_change/setting_effects.py).
    cannot_see: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _engine_settings_the_path_can_run(self):
        if self.path == "direct" and self.trainer != "ray":
            raise ValueError("trainer: the batch a trainer hands verl's engine (path: engine)")
        if self.trainer == "v1" and self.batch.same_length:
            # verl's list_of_dict_to_tensordict stacks entries of one shape dense, and response_to_nested (the v1
            # trainer's advantages) asserts a nested response_mask; what the TransferQueue would hand back is not
            # known here (it is not installed).
            raise ValueError("batch.same_length: not with trainer v1 (one length makes response_mask dense)")
        if self.path == "direct":
            changed = [
                f
                for f in EngineSettings.model_fields
                if f not in DIRECT_ENGINE_FIELDS and getattr(self.engine, f) != getattr(EngineSettings(), f)
            ]
            if self.engine.use_remove_padding is False:
                changed.remove("use_remove_padding")
            if changed:
                raise ValueError(f"engine.{changed[0]}: verl's engine runs it, the direct path does not (path: engine)")
            loss_changed = [
                f
                for f in LossSettings.model_fields
                if f not in DIRECT_LOSS_FIELDS and getattr(self.loss, f) != getattr(LossSettings(), f)
            ]
            if loss_changed:
                raise ValueError(
                    f"loss.{loss_changed[0]}: verl's ppo_loss runs it on the engine path only (path: engine)"
                )
        if self.ref != RefSettings() and not self.loss.use_kl_loss:
            raise ValueError("ref: set for a reference engine that never runs (loss.use_kl_loss: false)")
        if self.loss.use_kl_loss and self.forward_only:
            raise ValueError("loss.use_kl_loss: set for a loss that never runs (forward_only: true)")
        if self.path == "engine" and "seq_len" in self.batch.model_fields_set:
            _seq_len_on_the_engine_path(self.batch)
        sp = self.engine.ulysses_sequence_parallel_size
        if self.ranks % sp:
            raise ValueError(f"engine.ulysses_sequence_parallel_size ({sp}) must divide ranks ({self.ranks})")
        if sp > 1 and not self.use_remove_padding:
            raise ValueError("engine.ulysses_sequence_parallel_size > 1 needs engine.use_remove_padding (verl)")
        return self

    @model_validator(mode="after")
    def _head_with_its_path(self):
        if (self.head is None) == (self.path == "head"):
            raise ValueError("head: set for path: head, and only there")
        if self.path == "head":  # the lm_head unit alone (rank/head_bench.py): its sizes are head's own
            ignored = [
                f
                for f in HEAD_IGNORES
                if getattr(self, f) != Scenario.model_fields[f].get_default(call_default_factory=True)
            ]
            if ignored:
                raise ValueError(f"{ignored[0]}: the head path does not run it (head.hidden, head.vocab, head.tokens)")
        return self

    @model_validator(mode="after")
    def _cannot_see_names_a_change(self):
        paths = set(field_paths(Scenario))
        for name in self.cannot_see:
            if name not in paths and not name.startswith("term."):
                raise ValueError(f"cannot_see: {name!r} is no field (optim.clip_grad) or loss term (term.clip)")
        return self

    @model_validator(mode="after")
    def _update_settings(self):
        update_fields = ("ppo_mini_batches", "ppo_epochs", "optim", "cannot_see")
        if not self.steps:
            defaults = {f: Scenario.model_fields[f].get_default(call_default_factory=True) for f in update_fields}
            changed = [f for f in update_fields if getattr(self, f) != defaults[f]]
            if changed:
                raise ValueError(f"{changed[0]}: set for an optimizer step that never runs (steps: 0)")
            return self
        if self.path != "engine":
            raise ValueError("steps: the training update runs through verl's engine (path: engine)")
        if self.forward_only:
            raise ValueError("steps: not with forward_only (an update has a backward and an optimizer step)")
        if self.compile and self.compile_scope != "head":
            # Only the head scope has been run through verl's update (engine-update-compile-head).
            raise ValueError(f"steps: compile_scope {self.compile_scope} not run through verl's update (use head)")
        if self.grad_accum % self.ppo_mini_batches:
            raise ValueError(
                f"ppo_mini_batches ({self.ppo_mini_batches}) must divide grad_accum ({self.grad_accum}): each "
                "mini-batch holds whole micro-batches of every rank"
            )
        return self

    @property
    def use_remove_padding(self) -> bool:
        """The batch layout verl is configured for: the engine's default packs, the direct step pads."""
        if self.engine.use_remove_padding is not None:
            return self.engine.use_remove_padding
        return self.path == "engine"

    @field_validator("model_overrides")
    @classmethod
    def _overrides_under_their_ceiling(cls, overrides):
        ceiling = most("model_overrides")
        for where, value in _numbers(overrides):
            if value > ceiling:
                raise ValueError(
                    f"{where}: {value} is above its ceiling {ceiling:g} ({CEILINGS['model_overrides'].why})"
                )
        return overrides

    @field_validator("model")
    @classmethod
    def _model_exists(cls, name):
        if not model_config_path(name).is_file():
            raise ValueError(f"no model config models/{name}.json")
        return name


# The engine path's prompts are a few tokens (rank/oracle/batch.py make_samples: up to 8 of text, or 7 around an
# image's); a sample is its response and such a prompt, so seq_len only bounds response_len there (response_len <
# seq_len). A seq_len set further above response_len than this reads as sequences that long, which never run.
ENGINE_SEQ_LEN_SLACK = 64


def _seq_len_on_the_engine_path(batch: BatchSettings):
    most_run = batch.response_len + ENGINE_SEQ_LEN_SLACK
    if batch.seq_len > most_run:
        raise ValueError(
            f"batch.seq_len: {batch.seq_len} is not run on the engine path: its samples are response_len "
            f"({batch.response_len}) and a prompt of a few tokens, seq_len only bounds response_len there; set at most "
            f"{most_run} or leave it out"
        )


def _numbers(mapping: dict, prefix: str = ""):
    """(dotted key, value) of every whole number in a nested mapping (a model override's sizes; booleans are not)."""
    for key, value in mapping.items():
        if isinstance(value, dict):
            yield from _numbers(value, f"{prefix}{key}.")
        elif isinstance(value, int) and not isinstance(value, bool):
            yield f"{prefix}{key}", value


# What does not describe the training configuration: names, prose, how a run is driven and how long it may take.
# Two scenarios that agree on everything else are twins: the same configuration of verl on different paths.
_NOT_CONFIGURATION = {"name", "description", "path", "tags", "timeout_s", "arms", "device", "verl", "cannot_see"}


def training_configuration(scenario: Scenario) -> dict:
    """The scenario as verl's trainer would see it: every field but _NOT_CONFIGURATION, the batch layout resolved."""
    fields = scenario.model_dump(exclude=_NOT_CONFIGURATION)
    fields["engine"]["use_remove_padding"] = scenario.use_remove_padding
    return fields


def configuration_but_trainer(fields: dict) -> str:
    """A scenario's dumped fields (a record's scenario_spec) as one key that two scenarios share when they differ
    only in `trainer`, the batch layout of verl's engine: the same training configuration under verl's two trainers."""
    import json

    kept = {k: v for k, v in fields.items() if k not in _NOT_CONFIGURATION | {"trainer"}}
    return json.dumps(kept, sort_keys=True, default=str)


def twins(scenarios: list[Scenario]) -> list[tuple[Scenario, Scenario]]:
    """Pairs of scenarios on different paths that describe the same training configuration."""
    pairs = []
    for i, a in enumerate(scenarios):
        for b in scenarios[i + 1 :]:
            if a.path != b.path and training_configuration(a) == training_configuration(b):
                pairs.append((a, b))
    return pairs


# libyaml's loader where PyYAML has it: the same values as yaml.safe_load (every YAML file of this repository
# compared) at a ninth of the time; each process that plans cells reads every scenario and expectations file.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str):
    """yaml.safe_load, through libyaml when it is there."""
    return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader


def read_mapping(path: Path, what: str) -> dict:
    """A YAML file of fields (a scenario, the release plan); any problem is a one-line UsageError naming the file."""
    try:
        raw = parse_yaml(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {what} file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UsageError(f"{path}:{where} malformed YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: a {what} must be a mapping of fields, got {type(raw).__name__}")
    return raw


def load_scenario(path: Path) -> Scenario:
    """Parse and validate one YAML file; any problem is a one-line UsageError naming file and field."""
    path = Path(path)
    raw = read_mapping(path, "scenario")
    raw.setdefault("name", path.stem)
    if raw["name"] != path.stem:
        # Records and expectations find a scenario's file by its name.
        raise UsageError(
            f"{path}: field 'name': must be the file name without .yaml ({path.stem!r}), got {raw['name']!r}"
        )
    fold_verl_block(raw, str(path), Scenario)
    try:
        return Scenario(**raw)
    except ValidationError as exc:
        raise UsageError(validation_message(path, Scenario, exc, raw)) from None


def validation_message(path: Path, model: type[BaseModel], exc: ValidationError, raw: dict, where=()) -> str:
    """The one line for a file's first invalid field: the file, the field's dotted path (under `where`, the keys
    above the model's mapping), pydantic's message, the value got and, for a typo, the closest known word.
    Scenarios and expectations say it the same way."""
    first = exc.errors()[0]
    shows_input = first["type"] != "missing" and not isinstance(first["input"], dict)
    value = f" (got {first['input']!r})" if shows_input else ""
    above = ceiling_words(first["loc"]) if first["type"] == "less_than_equal" else ""  # a size over its ceiling
    return f"{first_error_line(str(path), exc, within=tuple(where))}{value}{above}{typo_hint(model, first, raw)}"


def closest(word: str, known) -> str | None:
    """The known word a mistyped one is closest to, if any is close enough to suggest."""
    from difflib import get_close_matches

    found = get_close_matches(word, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def typo_hint(model: type[BaseModel], error: dict, raw: dict) -> str:
    """For a key the model does not know: the field it is closest to ("did you mean `precision`?"); for a
    required field that is missing: a key of the same mapping it is closest to (`rank` for `ranks`)."""
    from difflib import get_close_matches

    top = model
    *parents, key = error["loc"] or ("",)
    for name in parents:  # down to the nested model (batch:, engine:, loss:) and the mapping the key is in
        annotation = model.model_fields[name].annotation if name in model.model_fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)) or not isinstance(raw, dict):
            return ""
        model, raw = annotation, raw.get(name)
    if not isinstance(raw, dict) or not isinstance(key, str):
        return ""
    if error["type"] == "extra_forbidden":
        close = get_close_matches(key, list(model.model_fields), n=1, cutoff=0.6)
        if close:
            return f" (did you mean `{close[0]}`?)"
        elsewhere = closest_field_anywhere(key, top)
        return f" (did you mean `{elsewhere}`?)" if elsewhere else ""
    if error["type"] == "missing":
        unknown = [k for k in raw if isinstance(k, str) and k not in model.model_fields]
        close = get_close_matches(key, unknown, n=1, cutoff=0.6)
        return f" (the file has `{close[0]}`: did you mean `{key}`?)" if close else ""
    if error["type"] == "literal_error" and isinstance(error["input"], str) and key in model.model_fields:
        # A misspelt value of a field with a fixed set of them (outcome: eror, precision: bf16).
        allowed = [a for a in get_args(model.model_fields[key].annotation) if isinstance(a, str)]
        close = get_close_matches(error["input"], allowed, n=1, cutoff=0.6)
        return f" (did you mean '{close[0]}'?)" if close else ""
    return ""


def field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every field of a model as a dotted path, nested models' fields included (loss.clip_ratio)."""
    paths = []
    for name, info in model.model_fields.items():
        paths.append(prefix + name)
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            paths += field_paths(info.annotation, f"{prefix}{name}.")
    return paths


def closest_field_anywhere(key: str, model: type[BaseModel]) -> str | None:
    """A field at another depth of the schema that an unknown key names (`use_kl_loss` at the top: loss.use_kl_loss):
    one whose last part is the key, else the closest last part."""
    from difflib import get_close_matches

    by_last = {}
    for path in field_paths(model):
        by_last.setdefault(path.rsplit(".", 1)[-1], path)
    if key in by_last:
        return by_last[key]
    close = get_close_matches(key, list(by_last), n=1, cutoff=0.75)
    return by_last[close[0]] if close else None


def scenario_files(directory: Path = SCENARIOS_DIR) -> list[Path]:
    return sorted(p for p in Path(directory).glob("*.yaml") if p.name not in NON_SCENARIO_FILES)


def load_all(directory: Path = SCENARIOS_DIR) -> list[Scenario]:
    scenarios = [load_scenario(p) for p in scenario_files(directory)]
    names = [s.name for s in scenarios]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"{directory}: scenario name(s) used twice: {', '.join(dupes)}")
    return scenarios


def select(scenarios: list[Scenario], names: list[str] | None) -> list[Scenario]:
    if not names:
        return scenarios
    known = {s.name: s for s in scenarios}
    _check_known(names, known)
    return [known[n] for n in names]


def _check_known(names: list[str], known) -> None:
    unknown = [n for n in names if n not in known]
    if unknown:
        near = closest(unknown[0], known)
        hint = f"did you mean '{near}'?" if near else f"known: {', '.join(sorted(known))}"
        raise UsageError(f"unknown scenario '{unknown[0]}' ({hint}; `python -m harness list --names` lists them)")


def scenario_names(directory: Path = SCENARIOS_DIR) -> set[str]:
    """Every scenario's name (its file's stem), no file read: what expectations.yaml may name."""
    return {p.stem for p in scenario_files(directory)}


def load_chosen(names: list[str] | None, directory: Path = SCENARIOS_DIR) -> list[Scenario]:
    """The scenarios named (every one where none is), only their files read: a file that does not load fails the
    commands that use it, named by its own path, and no other command."""
    if not names:
        return load_all(directory)
    files = {p.stem: p for p in scenario_files(directory)}
    _check_known(names, files)
    return [load_scenario(files[n]) for n in names]


def load_each(directory: Path = SCENARIOS_DIR) -> tuple[list[Scenario], list[str]]:
    """(the scenarios that load, a one-line error for each file that does not): for a listing of them all."""
    scenarios, errors = [], []
    for path in scenario_files(directory):
        try:
            scenarios.append(load_scenario(path))
        except UsageError as exc:
            errors.append(str(exc))
    return scenarios, errors
