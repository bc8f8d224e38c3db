"""The one source of verl configuration on the rank side: verl's own config classes, filled from the scenario the way
verl's trainer fills them, and the settings every call into verl reads from those objects.

Both paths use it. The engine path hands the objects to verl's TrainingWorker; the direct path calls verl's
apply_monkey_patch and apply_fsdp2 with the values verl's engine would read from the same objects, and hands
apply_fsdp2 the engine config as TrainingWorker prepared it. So a fix that reads a config key (say
`use_fused_kernels` inside apply_fsdp2) is judged under the value verl's trainer sets, on either path. No verl
setting is written anywhere else in harness/.

Where a release differs: from verl 0.8.0 on, TrainingWorker copies use_remove_padding and use_fused_kernels from
the model config into the engine config, and the engine passes that engine config to apply_fsdp2. Before it
(0.6.x, 0.7.x: fsdp_workers.py), the actor's fsdp_config (an FSDPEngineConfig without those keys) is what
apply_fsdp2 receives. Which one ran is in every record (`verl_config.source`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass
class VerlConfig:
    model: object  # verl HFModelConfig
    engine: object  # verl FSDPEngineConfig, as apply_fsdp2 and the engine receive it
    actor: object  # verl FSDPActorConfig (ppo_loss reads it)
    training: object | None  # verl TrainingWorkerConfig, where the release has TrainingWorker
    source: str
    steps: int = 0  # the scenario's RL steps: with them the actor update runs (optimizer, mini-batches)

    # -- what verl's engine reads from these objects when it builds the module (transformer_impl.py) --------------
    def monkey_patch_kwargs(self) -> dict:
        """apply_monkey_patch's arguments as FSDPEngineWithLMHead._build_module (0.8+) / fsdp_workers (0.6, 0.7)
        compute them from the model and engine configs."""
        options = self.model.fused_kernel_options or {}
        return {
            "use_remove_padding": self.model.use_remove_padding,
            "ulysses_sp_size": self.engine.ulysses_sequence_parallel_size,
            "use_fused_kernels": self.model.use_fused_kernels,
            "fused_kernels_backend": options.get("impl_backend"),
        }

    def precision(self):
        """(param, reduce, buffer) dtypes as the engine derives them from engine.mixed_precision (None: bf16
        params, fp32 reduce and buffers, verl's default)."""
        import torch
        from verl.utils.torch_dtypes import PrecisionType

        mp = self.engine.mixed_precision
        if mp is None:
            return torch.bfloat16, torch.float32, torch.float32
        return tuple(PrecisionType.to_dtype(mp.get(k, "fp32")) for k in ("param_dtype", "reduce_dtype", "buffer_dtype"))

    def fsdp2_kwargs(self, mesh, device_type: str) -> dict:
        """fully_shard's keywords as the engine's fsdp2 branch builds them: the actor offloads only with
        offload_policy, a forward-only (ref) engine always, with pinned memory (no accelerator: not pinned, the
        offload-no-pin adapter's choice)."""
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

        param_dtype, reduce_dtype, _ = self.precision()
        offload = self.engine.offload_policy or self.engine.forward_only
        return {
            "mesh": mesh,
            "mp_policy": MixedPrecisionPolicy(
                param_dtype=param_dtype, reduce_dtype=reduce_dtype, cast_forward_inputs=True
            ),
            "offload_policy": CPUOffloadPolicy(pin_memory=device_type == "cuda") if offload else None,
            "reshard_after_forward": self.engine.reshard_after_forward,
        }

    def summary(self) -> dict:
        """What a record keeps: where the configuration came from and the values verl's calls read."""
        return {
            "source": self.source,
            **self.monkey_patch_kwargs(),
            "engine_use_fused_kernels": getattr(self.engine, "use_fused_kernels", None),
            "mixed_precision": self.engine.mixed_precision,
            "offload_policy": self.engine.offload_policy,
            "forward_only": self.engine.forward_only,
            "fsdp_size": self.engine.fsdp_size,
            "strategy": self.engine.strategy,
            **({} if self.engine.forward_only else {"loss": self.loss_summary()}),
            **(self.update_summary() if self.steps else {}),
            # Every setting of verl's own config objects, as their dataclass fields hold them (issue 49): what verl
            # ran, gradient checkpointing (model) and dynamic bsz (engine, actor) included.
            "objects": {
                "model": config_fields(self.model),
                "engine": config_fields(self.engine),
                "actor": config_fields(self.actor, {id(self.model): "model", id(self.engine): "engine"}),
            },
        }

    def loss_summary(self) -> dict:
        """What verl's ppo_loss reads from the actor config (new in records beside the fields they had), and
        whether the trainer asks the actor for entropy in the update (calculate_entropy below)."""
        actor = self.actor
        fields = (
            "loss_agg_mode",
            "clip_ratio",
            "clip_ratio_low",
            "clip_ratio_high",
            "clip_ratio_c",
            "entropy_coeff",
            "calculate_entropy",
            "use_kl_loss",
            "kl_loss_coef",
            "kl_loss_type",
        )
        return {
            **{k: getattr(actor, k, None) for k in fields},
            "loss_mode": actor.policy_loss.get("loss_mode", "vanilla"),
            "entropy_asked": calculate_entropy(actor),
        }

    def update_summary(self) -> dict:
        """What verl's actor update reads: the optimizer config and the mini-batching (new in records of scenarios
        with `steps`; one-backward records keep the fields they had)."""
        optim, actor = self.actor.optim, self.actor
        return {
            "optim": {
                k: getattr(optim, k)
                for k in (
                    "optimizer",
                    "optimizer_impl",
                    "lr",
                    "weight_decay",
                    "betas",
                    "clip_grad",
                    "lr_scheduler_type",
                    "lr_warmup_steps",
                    "total_training_steps",
                    "override_optimizer_config",
                )
            },
            "ppo_mini_batch_size": actor.ppo_mini_batch_size,
            "ppo_epochs": actor.ppo_epochs,
            "shuffle": actor.shuffle,
            "data_loader_seed": actor.data_loader_seed,
        }


def config_fields(value, shown_above: dict | None = None):
    """A verl config object made JSON-safe: a dataclass (verl's BaseConfig) as {field: value} over its fields
    (dataclasses.fields, as dataclasses.asdict walks them, without deep-copying what is not a config), recursively;
    mappings and sequences element-wise; anything else (a transformers config, a tokenizer) as its type name.
    shown_above: id -> name of an object written elsewhere in the record (the actor's engine), named not
    repeated."""
    shown_above = shown_above or {}
    if id(value) in shown_above and dataclasses.is_dataclass(value):
        return f"(as `{shown_above[id(value)]}` above)"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if _is_verl_config(value):
        return {
            f.name: config_fields(getattr(value, f.name, None), shown_above)
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    if isinstance(value, Mapping):  # a dict, an OmegaConf DictConfig
        return {str(k): config_fields(v, shown_above) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [config_fields(v, shown_above) for v in value]
    return f"<{type(value).__name__}>"


def _is_verl_config(value) -> bool:
    """One of verl's config dataclasses (a transformers config is a dataclass too, but no verl setting: the
    model's architecture is the scenario's `model`)."""
    return (
        dataclasses.is_dataclass(value)
        and not isinstance(value, type)
        and type(value).__module__.split(".")[0] == "verl"
    )


def _mixed_precision(precision: str):
    if precision == "fp32":
        return {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    if precision == "bf16-mixed":
        return None  # verl's default: param bf16, reduce fp32, buffer fp32, forward under bf16 autocast
    raise ValueError(f"unknown precision {precision!r}")


def _has_training_worker() -> bool:
    import importlib.util

    return importlib.util.find_spec("verl.workers.engine_workers") is not None


def verl_config(scenario, world: int, model_dir: Path) -> VerlConfig:
    """verl's config objects for this scenario, as ActorRolloutRefWorker.init_model builds the actor (or, with
    forward_only, the ref) and TrainingWorker.__init__ completes them. model_dir holds the tiny model
    (HFModelConfig loads from a directory)."""
    s = scenario
    model_config = _model_config(s, model_dir)
    actor_config = _actor_config(s, world, _fsdp_config(s))
    actor_config.model_config = model_config
    if not _has_training_worker():
        # 0.6.x / 0.7.x: fsdp_workers.py hands apply_fsdp2 the actor's fsdp_config as it is.
        return VerlConfig(
            model_config,
            actor_config.fsdp_config,
            actor_config,
            None,
            "verl config classes (HFModelConfig, FSDPEngineConfig, FSDPActorConfig) as fsdp_workers.py "
            "uses them: apply_fsdp2 gets the actor's fsdp_config",
        )
    return _with_training_worker(s, model_config, actor_config)


def ref_verl_config(scenario, world: int, model_dir: Path) -> VerlConfig:
    """verl's config objects of the reference policy's engine (loss.use_kl_loss), as ActorRolloutRefWorker.init_model
    builds the ref: the actor's model and FSDP settings with fsdp_config.forward_only (verl's ref.yaml sets it),
    the scenario's `ref:` (param_offload, log_prob_use_dynamic_bsz), no optimizer; TrainingWorkerConfig's engine
    assigned the infer_* fields only. Under FSDP2 verl's engine offloads a forward-only engine's parameters
    (CPUOffloadPolicy) whatever param_offload says; param_offload is still set as the trainer sets it."""
    ref_scenario = scenario.model_copy(
        update={
            "forward_only": True,
            "steps": 0,
            "cpu_offload": False,
            "engine": scenario.engine.model_copy(update={"use_dynamic_bsz": scenario.ref.log_prob_use_dynamic_bsz}),
        }
    )
    config = verl_config(ref_scenario, world, model_dir)
    config.engine.param_offload = scenario.ref.param_offload
    config.source += " (the reference policy's engine: ActorRolloutRefWorker.init_model's ref branch)"
    return config


def _model_config(s, model_dir: Path):
    """HFModelConfig: the model directory, attention, the remove-padding and fused-kernel switches."""
    from verl.workers.config import HFModelConfig

    e = s.engine
    return HFModelConfig(
        path=str(model_dir),
        load_tokenizer=False,
        # HFModelConfig's attention default is flash_attention_2, which a CPU host has not. Under Ulysses SP verl's
        # all-to-all lives in the flash path: the CPU varlen stand-in's flash-named implementation
        # (rank/verl_side/engine.py installs it).
        override_config={"attn_implementation": _attn_implementation(e.ulysses_sequence_parallel_size)},
        enable_gradient_checkpointing=e.gradient_checkpointing,
        use_remove_padding=s.use_remove_padding,
        use_fused_kernels=e.use_fused_kernels,
        fused_kernel_options={"impl_backend": s.fused_backend},
    )


def _fsdp_config(s):
    """FSDPEngineConfig as the actor's fsdp_config: FSDP2, precision, offload, no-sync, sequence parallelism."""
    from verl.workers.config import FSDPEngineConfig

    e = s.engine
    return FSDPEngineConfig(
        **_known_fields(
            FSDPEngineConfig,
            dict(
                strategy="fsdp2",
                wrap_policy={"min_num_params": 0},
                fsdp_size=e.fsdp_size,
                model_dtype="fp32",
                mixed_precision=_mixed_precision(s.precision),
                use_torch_compile=False,  # only verl's unfused entropy path compiles; off keeps CPU runs short
                use_no_sync_for_gradient_accumulation=e.no_sync,
                forward_only=s.forward_only,
                offload_policy=s.cpu_offload,
                ulysses_sequence_parallel_size=e.ulysses_sequence_parallel_size,
            ),
        )
    )


def _actor_config(s, world: int, fsdp_config):
    """FSDPActorConfig: mini-batching, the loss's settings, the optimizer, the fsdp_config."""
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPActorConfig, FSDPOptimizerConfig

    e = s.engine
    micro = s.batch.micro_batch_size
    return FSDPActorConfig(
        **_known_fields(
            FSDPActorConfig,
            dict(
                strategy="fsdp2",
                rollout_n=1,
                # the global batch in ppo_mini_batches mini-batches (one without `steps`); under SP the ranks of a
                # data-parallel group share its data
                ppo_mini_batch_size=world
                // e.ulysses_sequence_parallel_size
                * s.grad_accum
                * micro
                // s.ppo_mini_batches,
                ppo_epochs=s.ppo_epochs,
                # the order of the mini-batches: as they come (the oracle takes them so; the rank side checks the
                # samples verl's iterator handed each mini-batch, rank/verl_side/engine_update.py)
                shuffle=False,
                data_loader_seed=s.seed,
                ppo_micro_batch_size_per_gpu=micro,
                use_dynamic_bsz=e.use_dynamic_bsz,
                ppo_max_token_len_per_gpu=e.max_token_len_per_gpu,
                **_loss_fields(s.loss),
                use_fused_kernels=e.use_fused_kernels,
                use_remove_padding=s.use_remove_padding,
                use_torch_compile=False,
                optim=_optimizer_config(FSDPOptimizerConfig, s),
                checkpoint=CheckpointConfig(),
                fsdp_config=fsdp_config,
            ),
        )
    )


def _loss_fields(loss) -> dict:
    """The actor config's loss settings from the scenario's `loss:` (inputs/scenario.py LossSettings), each under
    verl's name: the clip bounds resolved as verl resolves them (an unset low or high is clip_ratio), the policy
    loss's mode in its PolicyLossConfig."""
    from verl.workers.config import PolicyLossConfig

    from harness.rank.oracle.loss import clip_bounds

    low, high = clip_bounds(loss)
    return dict(
        loss_agg_mode=loss.loss_agg_mode,
        policy_loss=PolicyLossConfig(loss_mode=loss.loss_mode),
        entropy_coeff=loss.entropy_coeff,
        calculate_entropy=loss.calculate_entropy,
        clip_ratio=loss.clip_ratio,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=loss.clip_ratio_c,
        use_kl_loss=loss.use_kl_loss,
        kl_loss_coef=loss.kl_loss_coef,
        kl_loss_type=loss.kl_loss_type,
    )


def calculate_entropy(actor) -> bool:
    """Whether the trainer asks the actor for entropy in the update, read from verl's actor config as
    ray_trainer._update_actor reads it: its calculate_entropy, or a non-zero entropy_coeff."""
    return bool(getattr(actor, "calculate_entropy", False)) or getattr(actor, "entropy_coeff", 0.0) != 0.0


def _with_training_worker(s, model_config, actor_config) -> VerlConfig:
    """From verl 0.8.0 on: the TrainingWorkerConfig, its engine config completed as init_model and
    TrainingWorker.__init__ complete it."""
    e = s.engine
    micro = s.batch.micro_batch_size
    from verl.workers.config import TrainingWorkerConfig

    training = TrainingWorkerConfig(
        model_type=model_config.get("model_type", "language_model"),
        model_config=actor_config.model_config,
        engine_config=actor_config.engine,
        optimizer_config=None if s.forward_only else actor_config.optim,
        checkpoint_config=actor_config.checkpoint,
        profiler_config=None,
    )
    engine = training.engine_config
    # ActorRolloutRefWorker.init_model, "assign engine configs" (the ref branch assigns only the infer_* fields).
    engine.use_dynamic_bsz = e.use_dynamic_bsz
    engine.infer_max_token_len_per_gpu = e.max_token_len_per_gpu
    engine.infer_micro_batch_size_per_gpu = micro
    if not s.forward_only:
        engine.max_token_len_per_gpu = e.max_token_len_per_gpu
        engine.micro_batch_size_per_gpu = micro
    # TrainingWorker.__init__: the engine config carries the model config's two switches.
    engine.use_remove_padding = model_config.get("use_remove_padding", False)
    engine.use_fused_kernels = model_config.get("use_fused_kernels", False)
    return VerlConfig(
        model_config,
        engine,
        actor_config,
        training,
        "verl config classes (HFModelConfig, FSDPEngineConfig, FSDPActorConfig -> TrainingWorkerConfig) "
        "as ActorRolloutRefWorker.init_model and TrainingWorker.__init__ fill them",
        steps=s.steps,
    )


def _optimizer_config(cls, scenario):
    """verl's FSDPOptimizerConfig: without `steps` no optimizer step runs (the one value it had before the
    training update existed); with them every field from the scenario's `optim`, the schedule over `steps` RL
    steps (the trainer's total_training_steps), SGD's momentum through override_optimizer_config."""
    if not scenario.steps:
        return cls(lr=1e-6)
    o = scenario.optim
    return cls(
        **_known_fields(
            cls,
            dict(
                optimizer=o.optimizer,
                optimizer_impl="torch.optim",
                lr=o.lr,
                weight_decay=o.weight_decay,
                betas=o.betas,
                clip_grad=o.clip_grad,
                lr_warmup_steps=o.lr_warmup_steps,
                lr_warmup_steps_ratio=o.lr_warmup_steps_ratio,
                lr_scheduler_type=o.lr_scheduler_type,
                min_lr_ratio=o.min_lr_ratio,
                num_cycles=o.num_cycles,
                total_training_steps=scenario.steps,
                override_optimizer_config={"momentum": o.momentum} if o.momentum else None,
            ),
        )
    )


def _attn_implementation(sp: int) -> str:
    if sp > 1:
        from harness.rank.verl_side.varlen_attention import ATTN_IMPLEMENTATION

        return ATTN_IMPLEMENTATION
    return "sdpa"


def _known_fields(cls, values: dict) -> dict:
    """Keep only the fields this release's class has (use_no_sync_for_gradient_accumulation, say, is newer than
    0.6): a field a release lacks is a setting its trainer cannot make."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in values.items() if k in names}


def save_tiny_model(model, directory) -> Path:
    """Write the tiny transformers model so verl's HFModelConfig can load it from a local directory.

    No tokenizer/processor is written: `HFModelConfig(load_tokenizer=False)` skips both. The attention
    implementation is not taken from config.json: HFModelConfig passes `override_config["attn_implementation"]`
    to AutoConfig.from_pretrained (see verl_config)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = model.config
    config.architectures = [type(model).__name__]
    config._attn_implementation = "sdpa"
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def shared_model_dir(r, model) -> str:
    """Rank 0 writes the seeded model under the run's directory; every rank gets the path."""
    import tempfile

    import torch.distributed as dist

    path = None
    if r.rank == 0:
        path = str(save_tiny_model(model, tempfile.mkdtemp(prefix="model-", dir=r.out_dir)))
    shared = [path]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]
