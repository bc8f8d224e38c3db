"""The typed measures of a record (and the ones a rank writes in the same shape): parity, residency, head memory,
the training update, the diagnosis, the tolerances and settings a run was judged with.

Every model keeps unknown fields (extra="allow"), so a record written before a field was declared still loads, and
writes only the fields that were set (exclude_unset), so a record's JSON is what the plain dicts wrote. A number
that was not finite is written as the string "inf" (judge_cell/verdict.py _json_number). Pydantic only: no torch.

Also an arm's fingerprint (ArmFingerprint) and the warnings the ranks raised (RaisedWarning); Parity is per reference.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# A judged number as records write it: int and float kept as they came, a non-finite one as "inf".
Number = int | float | Literal["inf"]


class Written(BaseModel):
    """The base of every record and rank-result model (here, records/results.py, records/rank_measures.py): unknown
    fields kept, and built when first used (a command that stops at a usage error never pays for the models of a
    record). A model changes only the keys it needs (pydantic merges a subclass's config with this one)."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    def written(self) -> dict:
        """The fields this model has, as plain data: what its JSON holds (fields never set are not written)."""
        return self.model_dump(exclude_unset=True)


class Parity(Written):
    """The parity numbers against the oracle, merged over ranks (judge_cell/verdict.py _parity_against). Every other
    reference the ranks compared with (fsdp_unfused under bf16) sits beside them, under its name, as a Parity."""

    __pydantic_extra__: dict[str, Parity] = Field(init=False)

    logprob_max_abs: Number | None = None
    entropy_max_abs: Number | None = None
    grad_worst_rel: Number | None = None
    grad_worst_param: str | None = None
    missing_grads: list[str] = []
    grad_problems: list[str] = []
    grads_over_tolerance: dict[str, Number] = {}
    grad_rel: dict[str, Number] = {}  # every parameter's relative error (render/pictures.py)
    # judge_cell/verdict.py, where the ranks compared rows verl's trainer never reads (the direct path: every row): the
    # same over the rows it reads, which are the ones judged, and the remark where only the others differ.
    logprob_read_max_abs: Number | None = None
    entropy_read_max_abs: Number | None = None
    unread_rows_remark: str | None = None

    @property
    def references(self) -> dict[str, Parity]:
        """The other references' parity, by name (none against the oracle alone)."""
        return dict(self.__pydantic_extra__ or {})

    def failing_params(self) -> list[str]:
        """The parameters whose gradient is over tolerance or missing against this reference."""
        return sorted(set(self.grads_over_tolerance) | set(self.missing_grads))


class Residency(Written):
    """What a step left behind (rank/measures/residency.py), per rank or merged over ranks (the largest of each)."""

    unsharded_units: dict[str, int] = {}  # FSDP unit -> bytes per rank still unsharded
    lm_head_copies: int = 0
    lm_head_copy_bytes: int = 0


class HeadMemory(Written):
    """The largest logits-shaped tensor and the largest tensor of the step (rank/measures/around_step.py
    LargestTensors); merged over ranks, the largest of each with ranks_measured. Not measured under torch.compile: why
    says so."""

    measured: bool = False
    vocab_size: int | None = None
    why: str | None = None
    largest_vocab_tensor_bytes: int | None = None
    largest_vocab_tensor_shape: list[int] | None = None
    largest_vocab_tensor_dtype: str | None = None
    largest_vocab_tensor_op: str | None = None
    largest_tensor_bytes: int | None = None
    largest_tensor_shape: list[int] | None = None
    largest_tensor_dtype: str | None = None
    largest_tensor_op: str | None = None
    ranks_measured: int | None = None

    def with_prefix(self, prefix: str) -> dict:
        """The written fields of one tensor ("largest_vocab_tensor_"): what merging takes from the rank that holds
        the largest."""
        return {k: v for k, v in self.written().items() if k.startswith(prefix)}


class HeadStep(Written):
    """The lm_head unit alone's step (`path: head`, rank/head_bench.py): a rank's own figures as it sets them
    (RankResult.head_step), and the record's, merged over the ranks by judge_cell/head_step.py (bytes: rank 0's, every
    rank moves the same; memory, times and what autograd holds: the largest rank's; the gradient's squared sums
    against the fp32 reference: added)."""

    way: str | None = None  # the scenario's head.way, hidden, vocab and tokens per rank, as the rank ran them
    hidden: int | None = None
    vocab: int | None = None
    tokens: int | None = None
    step_s: float | None = None
    bytes: dict[str, int] = {}  # all_gather, reduce_scatter, all_reduce: per rank (ring estimate)
    dtypes: list[str] = []  # of the all-gathers and reduce-scatters
    collective_ms: float | None = None
    held_fwd_to_bwd: int | None = None  # autograd's saved tensors between forward and backward, unique storages
    held_weight_sized: int | None = None  # ... those of the weight's shape
    peak_rss_over_step: int | None = None  # VmHWM over the measured step, above the resident size before it
    peak_rss_process: int | None = None  # VmHWM over the whole process
    ref_sq: float | None = None  # sum of the reference gradient's squares over the rank's rows
    diff_sq: float | None = None  # sum of (gradient - reference)^2 there


class StepTime(Written):
    """Repeated steps' times (rank/measures/around_step.py time_steps)."""

    n: int | None = None
    median_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    times_s: list[float] | None = None


class MetricComparison(Written):
    """One of verl's metrics for one mini-batch beside the oracle's (judge_cell/update_verdict.py)."""

    verl: Number | None = None
    oracle: Number | None = None
    error: Number | None = None
    kind: Literal["rel", "abs"] | None = None


class UpdateStepNumbers(Written):
    """One optimizer step of a training update as the record keeps it."""

    step: int | None = None
    epoch: int = 0
    mini_batch: int = 0
    clip_active: bool | None = None
    update_worst: dict[str, Number] = {}
    update_rel: dict[str, Number] = {}  # parameter -> its update's relative error
    grad_rel: dict[
        str, Number
    ] = {}  # parameter -> its gradient's relative error before the clip (absent: not measured)
    param_worst_rel: Number | None = None
    metrics: dict[str, MetricComparison] = {}


class UpdateLogProbs(Written):
    step: int | None = None
    logprob_max_abs: Number | None = None
    entropy_max_abs: Number | None = None


class UpdateNumbers(Written):
    """A training update's numbers (record field `update`, judge_cell/update_verdict.py update_parity)."""

    log_probs: list[UpdateLogProbs] = []
    steps: list[UpdateStepNumbers] = []
    optimizer_steps: int | None = None
    update_worst_rel: Number | None = None
    update_worst_param: str | None = None
    param_worst_rel: Number | None = None
    clip_active: list[bool | None] = []
    metric_worst: dict[str, Number] = {}
    logprob_max_abs: Number | None = None
    entropy_max_abs: Number | None = None
    # dynamic bsz: per optimizer step and rank, the micro-batches verl formed (judge_cell/micro_batching.py)
    micro_batching: dict | None = None
    ref_logprob_max_abs: Number | None = None  # verl's ref engine against the oracle's frozen model (KL loss)


class NoiseFloor(Written):
    """The measured floor each bound sits above (inputs/tolerances.py), by the bound's name."""

    logprob_abs: float | None = None
    entropy_abs: float | None = None
    grad_rel: float | None = None
    update_rel: float | None = None
    param_rel: float | None = None
    metric_rel: float | None = None
    metric_abs: float | None = None


class UpdateToleranceUsed(Written):
    """inputs/tolerances.py UpdateTolerance as a record keeps it."""

    update_rel: float | None = None
    param_rel: float | None = None
    metric_rel: float | None = None
    metric_abs: float | None = None
    logprob_abs: float | None = None
    grad_rel: float | None = None  # the gradient before the clip after the first optimizer step
    noise_floor: NoiseFloor | None = None


class ToleranceUsed(Written):
    """inputs/tolerances.py Tolerance as a record keeps it, with the update's bounds for a training update."""

    logprob_abs: float | None = None
    entropy_abs: float | None = None
    grad_rel: float | None = None
    noise_floor: NoiseFloor | None = None
    update: UpdateToleranceUsed | None = None


class Settings(Written):
    """The scenario's settings a record shows beside its numbers (judge_cell/verdict.py _run_fields), in the order a
    record's JSON has them (sorted), so that a record shows them alike fresh and read back."""

    compile: bool | None = None
    cpu_offload: bool | None = None
    forward_only: bool | None = None
    grad_accum: int | None = None
    model: str | None = None
    path: str | None = None
    precision: str | None = None
    seed: int | None = None
    temperature: float | None = None


class RecordedEngine(Written):
    use_fused_kernels: bool = True  # verl's trainer default, as inputs/scenario.py has it


class RecordedScenario(Written):
    """The scenario as the record's run had it (inputs/scenario.py Scenario, dumped): the fields the driver reads
    back typed; the rest kept as written, for `harness rerun`."""

    precision: str | None = None
    fused_backend: str | None = None
    engine: RecordedEngine | None = None
    path: str | None = None  # direct, engine or head
    trainer: str | None = None  # the engine's trainer (ray, v1); absent before the field, when every one was ray
    model: str | None = None
    model_overrides: dict | None = None
    verl: dict | None = None  # a recipe's verl: block (verl's own names)


class ArmPatch(Written):
    """A diff of the arm (plan/arms.py arm_fingerprint): its path, sha256 and, since records keep it, text; applied
    as it is, or, where merged_against is set, merged: carried onto the verl the record ran on by a three-way merge
    with the verl it was written against (plan/diffs.py), these words naming that verl."""

    file: str
    sha256: str
    text: str | None = None
    merged_against: str | None = None
    merged_files: list[str] = []  # the files merged (the diff's others applied as they are)


class RaisedWarning(Written):
    """A warning the ranks raised (rank/warning_log.py, merged over the ranks by judge_cell/verdict.py merged_warnings):
    its category, text (cut at its first MESSAGE_CHARS), where it was raised, how often and by which ranks."""

    category: str = ""
    message: str = ""
    where: str | None = None
    count: int = 1
    ranks: list[int] = []


class ArmFingerprint(Written):
    """An arm as records carry it (plan/arms.py arm_fingerprint): its name and each diff it applies, read once per
    arm; the stamp's arm_patches are its patches."""

    name: str
    patches: list[ArmPatch] = []


class ErrorDiagnosis(Written):
    """The root cause's failure class, the object it concerns, and for a known failure its public reference."""

    model_config = ConfigDict(extra="allow", validate_by_name=True, serialize_by_alias=True)

    error_class: str | None = Field(None, alias="class")
    object: str | None = None
    text: str = ""
    reference: str | None = None


class OutputDiagnosis(Written):
    """The alternative the log-probs match (or the closest one) and their largest difference from it."""

    pattern: str | None = None
    max_abs: float | None = None
    closest: str | None = None
    text: str = ""


class SpPositionsDiagnosis(Written):
    """Where wrong log-probs sit relative to the Ulysses SP shards: how many of how many positions."""

    pattern: str | None = None
    wrong: int | None = None
    of: int | None = None
    text: str = ""


class RowsDiagnosis(Written):
    """Which samples' log-probs are wrong (judge_cell/diagnosis.py row_diagnosis): their places in the global batch, and
    whether they are exactly the responses shorter than the batch's longest."""

    wrong: list[int] = []
    of: int = 0
    shorter_than_longest: bool = False
    # The largest log-prob difference among the wrong samples and among the right ones (a test checks these against
    # the record's tolerance, never by their digits), and every sample's response length by its place.
    wrong_max_abs: float | None = None
    right_max_abs: float | None = None
    lengths: list[int] = []
    text: str = ""


class GradDiagnosis(Written):
    """What one parameter's gradient matches: the alternative, the fitted factor k, the residual, in words."""

    pattern: str | None = None
    k: float | None = None
    residual: float | None = None
    closest: str | None = None
    text: str = ""


class Diagnosis(Written):
    """Why a run failed (judge_cell/diagnosis.py diagnose): empty for a pass, a hang, a training update."""

    error: ErrorDiagnosis | None = None
    log_probs: OutputDiagnosis | None = None
    skipped_rows: str | None = None  # rows the head wrote as exactly 0: how many, where, the loss's among them
    sp_positions: SpPositionsDiagnosis | None = None
    rows: RowsDiagnosis | None = None
    grads: dict[str, GradDiagnosis] | None = None
    residency: str | None = None
