"""What a run produces, as data: the file each rank writes (RankResult) and the record of the run (Record).

Each rank builds its RankResult itself (rank/worker.py main: `r.out`) and sets every measure on it as it has it;
the model forbids undeclared fields and checks each value as it is set, so a wrong name fails in the rank, at that
line, as an error its record shows. A measure the record keeps is declared once, on RankMeasures, which RankResult
and the record's Measures inherit, with the rule judge merges it over the ranks by (merge_over_ranks). The record
is what judge_cell/verdict.py's judge and records/store.py's stamp_record produce, one JSON line per run in
results/*.jsonl, nested by what it holds (schema 4): the cell, its outcome and how it ran at the top; what the ranks
measured in `measures`; why the outcome in `verdict`; what is needed to trust and rerun it in `stamp`. Records of
schema 1 and 2 held every field flat, of schema 3 the measures, and load into the groups (nested_shape). The
fields are defined here and nowhere else. The collectives'
summary is typed (CommSummary), with the figures every reader derives from it; the other measures are typed in
records/measures.py (parity, residency, head memory, the update, the diagnosis...) and records/rank_measures.py
(what a rank compared); verl's configuration, the versions and a release's facts stay plain dicts. Pydantic only:
no torch.

Also here: VerlTree (the verl source tree a command ran on); Failure, one thing the judge found wrong, its kind one word
per concept (FailureKind; a gradient's gradient_of: one step, an update, the head unit), older records' words mapped on
load; ChangeKind, what a patch's record is against its base's; FAILING_OUTCOMES, the failing outcomes, one set.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field, field_serializer, model_validator

from harness.records.measures import (
    ArmPatch,
    Diagnosis,
    HeadMemory,
    HeadStep,
    Number,
    Parity,
    RaisedWarning,
    RecordedScenario,
    Residency,
    Settings,
    StepTime,
    ToleranceUsed,
    UpdateNumbers,
    Written,
)
from harness.records.rank_measures import RankParity, RankUpdate

# Records written since the models: 2; since the stamp and the verdict are groups of their own: 3; since the
# measures are: 4. A record without the field is version 1 (the fields of 2, untyped). 1, 2 and 3 load into the
# groups (Record, nested_shape).
SCHEMA_VERSION = 4

Outcome = Literal["pass", "mismatch", "error", "hang", "skipped"]

# How judge merges a measure over the ranks (RankMeasures, merge_over_ranks): rank 0's value; the largest any rank
# wrote; the first rank's (lowest) that wrote one; per key, the union of every rank's lists (sorted).
Merge = Literal["rank 0", "max", "first", "union"]


def measure(merge: Merge = "rank 0"):
    """A field of RankMeasures: None until a rank sets it; `merge` says which value the record keeps."""
    return Field(None, json_schema_extra={"merge": merge})


class RootCause(Written):
    """The innermost exception of a rank's error chain (rank/worker.py describe_error): its type and first line."""

    type: str | None = None
    message: str | None = None


# A rank's root error of these types stopped on an import: what the tree imports is not installed here (a cell that
# cannot run in this environment: judge_change/base_change.py, plan/bisect_search.py), not a finding about the code.
IMPORT_ERRORS = ("ModuleNotFoundError", "ImportError")


class RankError(Written):
    """What a rank that raised wrote (rank/worker.py's describe_error), or what judge says of a hang or a lost
    rank (type Timeout / RankKilled / RankLost: rank is then the stuck ranks' list, or the lost one)."""

    model_config = ConfigDict(validate_assignment=True)

    type: str
    message: str = ""
    phase: str | None = None
    rank_phase: str | None = None  # judge: the phase the rank announced, where its traceback places it elsewhere
    rank: int | list[int] | None = None
    full_message: str | None = None
    root_cause: RootCause | None = None
    location: str | None = None
    traceback_tail: str | None = None
    # Only in judge's errors: the signal that ended a rank; for a hang, the error a rank raised first, and
    # every stuck rank's Python stacks and the frame each waits in.
    signal: str | None = None
    root_cause_candidate: RankError | None = None
    stacks: dict[str, str] | None = None
    waits_in: dict[str, str | None] | None = None

    def root_type(self) -> str:
        """The type of the innermost exception of the chain: the root cause's, else the error's own."""
        return (self.root_cause.type if self.root_cause else None) or self.type

    def root_message(self) -> str:
        """The first line of the innermost exception of the chain: the root cause's, else the error's own."""
        return (self.root_cause.message if self.root_cause else None) or self.message


# The origin of a collective outside FSDP's own hooks (harness/rank/measures/collectives.py): a hand-made full_tensor().
OTHER = "other"


class CollectiveTotals(Written):
    """How many collectives of one origin ("fsdp", OTHER) or FSDP unit, and their bytes per rank."""

    count: int = 0
    bytes: int = 0


class CollectiveKind(Written):
    """One kind of collective (all_gather, reduce_scatter, ...) in a step, as harness/rank/measures/collectives.py sums
    it: bytes are the ring estimate per rank, payload the tensors' own size, time the backend's work."""

    count: int = 0
    bytes: int = 0
    payload_bytes: int = 0
    time_ms: int | float = 0.0
    by_origin: dict[str, CollectiveTotals] = {}
    dtypes: list[str] = []
    by_module: dict[str, CollectiveTotals] | None = None  # FSDP's collectives by the unit they gather for
    unsized: int | None = None  # counted but not sized: an element type the trace did not name

    def of_origin(self, origin: str) -> CollectiveTotals:
        """The totals of one origin; none counted there: zero."""
        return self.by_origin.get(origin) or CollectiveTotals()


class CollectiveOp(Written):
    """One collective of the step: its kind, origin, FSDP unit, payload, element type and shape."""

    kind: str | None = None
    origin: str | None = None
    module: str | None = None
    payload_bytes: int | None = None
    dtype: str | None = None
    shape: list | None = None


class CommSummary(Written):
    """A step's collectives (harness/rank/measures/collectives.py summarize_trace), and the figures read from them."""

    all_gather: CollectiveKind | None = None
    reduce_scatter: CollectiveKind | None = None
    all_reduce: CollectiveKind | None = None
    broadcast: CollectiveKind | None = None
    ops: list[CollectiveOp] = []
    unsized: list[str] | None = None

    def _kind(self, kind: str) -> CollectiveKind | None:
        return {
            "all_gather": self.all_gather,
            "reduce_scatter": self.reduce_scatter,
            "all_reduce": self.all_reduce,
            "broadcast": self.broadcast,
        }[kind]

    def other_bytes(self, kind: str = "all_gather") -> int | None:
        """Bytes per rank of `kind` outside FSDP's own hooks (a hand-made full_tensor() of the lm_head weight: the
        headline figure of verl PR #6659, 32,768 at W=2 on the tiny model); None where no origin was told apart."""
        entry = self._kind(kind)
        if entry is None or not entry.by_origin:
            return None
        return entry.of_origin(OTHER).bytes

    def count_by_origin(self, kind: str = "all_gather") -> tuple[int, int] | None:
        """(FSDP's count, the others' count) of `kind`; None where no origin was told apart."""
        entry = self._kind(kind)
        if entry is None or not entry.by_origin:
            return None
        return entry.of_origin("fsdp").count, entry.of_origin(OTHER).count

    def lm_head_bytes(self, kind: str) -> int:
        """lm_head's share of `kind` per rank: FSDP's lm_head unit plus every collective outside FSDP's hooks."""
        entry = self._kind(kind)
        if entry is None:
            return 0
        unit = (entry.by_module or {}).get("lm_head")
        return (unit.bytes if unit else 0) + (self.other_bytes(kind) or 0)

    def lm_head_dtypes(self) -> list[str]:
        """The element types of lm_head's collectives and of every collective outside FSDP's hooks."""
        return sorted({op.dtype for op in self.ops if op.origin == OTHER or op.module == "lm_head"})


def other_all_gather_bytes(record: Record | None) -> int | None:
    """The headline figure of a record (CommSummary.other_bytes): None for no record or no collectives."""
    comm = record.measures.comm if record is not None else None
    return comm.other_bytes() if comm is not None else None


def measured_head_memory(record: Record | None) -> HeadMemory | None:
    """The record's fused-head memory where it was measured with a logits-shaped tensor seen, else None (an error
    before the step ended, torch.compile): what the verdict's flag and the tables' logits column read."""
    memory = record.measures.head_memory if record else None
    return memory if memory and memory.measured and memory.largest_vocab_tensor_shape else None


class Baseline(Written):
    """FSDP2's own unfused path run beside the arm for `bench` (rank/verl_side/direct_path.py): its collectives and step
    times."""

    comm: CommSummary | None = None
    step_time: StepTime | None = None


class RankMeasures(Written):
    """The measures a rank sets and the record keeps, declared once: RankResult (rank<R>.json) and the record's
    measures (Measures, record.measures) both have these fields. Each says how judge merges it over the ranks
    (`measure(merge=...)`, merge_over_ranks below); a measure the judge reads in its own way (parity, residency, head
    memory, the update) is declared on each model."""

    # rank/worker.py: the rank's own process.
    device_name: str | None = measure()
    adapters: list | None = measure()  # the transformers 4.x adapters, then the engine path's (verl_side/adapters.py)
    phase_times_s: dict[str, float] | None = measure()
    peak_rss_bytes: int | None = measure("max")  # the rank's peak resident set (getrusage), the largest rank's
    # rank/verl_side/direct_path.py and rank/verl_side/engine_path.py: the step and what it was built with.
    verl_file: str | None = measure("first")
    verl_config: dict | None = measure()
    lm_head_shape: list[int] | None = measure()
    engine_init_s: float | None = measure()
    # rank/verl_side/engine_path.py: the global batch as the scenario's trainer handed it to verl (the first one of
    # an update): the trainer, response_mask's layout ("nested" or "dense BxR") and every sample's response length.
    batch_layout: dict | None = measure()
    # rank/verl_side/ref_engine.py: the reference policy's engine where loss.use_kl_loss builds one.
    ref_verl_config: dict | None = measure()
    ref_engine_init_s: float | None = measure()
    # The engine path's oracle: "computed" by this cell, or "computed by <cell>", an earlier cell of the same
    # command (rank/verl_side/engine_path.py _of_this_command).
    oracle_from: str | None = measure()
    compiled_modules: int | None = measure()
    # engine path: whether the module verl built recomputes its layers in backward (transformers'
    # is_gradient_checkpointing), the evidence that engine.gradient_checkpointing took effect
    gradient_checkpointing: bool | None = measure()
    # rank/measures/around_step.py and the paths: the step's collectives, time and memory.
    comm: CommSummary | None = measure()
    step_s: float | None = measure("max")
    step_time: StepTime | None = measure()
    baseline: Baseline | None = measure()  # `bench`: FSDP2's own unfused path beside the arm
    cuda_peak_allocated_bytes: int | None = measure()
    cuda_allocated_after_bytes: int | None = measure()
    saved_lm_head_bytes: int | None = measure("max")
    # rank/measures/line_watch.py, a patched arm's cells: {"verl/...": the lines of its diffs (plan/patch_lines.py)
    # this rank ran}; every watched file is a key, so {} means none watched and an empty list none ran.
    patch_lines_run: dict[str, list[int]] | None = measure("union")
    # The same watch with branch=True: {"verl/...": the arcs (from, to) out of the changed code's branching
    # statements (plan/changed_code.py) this rank took, in raw lines; to < 0: the function left}.
    patch_arcs_run: dict[str, list[tuple[int, int]]] | None = measure("union")
    # The same module, where part of the rank's Python is out of the watch's reach (on CUDA autograd runs backward
    # on threads of its own): what is not seen.
    patch_lines_unseen: str | None = measure("first")


def merge_over_ranks(results: list[RankMeasures]) -> dict:
    """Every measure of RankMeasures that some rank set, merged over the ranks (results by rank) by its rule. A
    measure the ranks set to None (saved_lm_head_bytes on the engine path: not measured there) is kept as None."""
    merged = {}
    for name, field in RankMeasures.model_fields.items():
        value = _merged(field.json_schema_extra["merge"], [getattr(r, name) for r in results])
        if value is not None or any(name in r.model_fields_set for r in results):
            merged[name] = value
    return merged


def _merged(rule: Merge, values: list):
    present = [v for v in values if v is not None]
    if rule == "rank 0":
        return values[0] if values else None
    if rule == "max":
        return max(present, default=None)
    if rule == "union":
        return union_of_lists(present) if present else None
    return present[0] if present else None  # "first"


def union_of_lists(dicts: list[dict[str, list]]) -> dict[str, list]:
    """{key: the sorted union of every dict's list under it}: lines (or arcs, as tuples) run by any rank, or by any
    cell."""
    out: dict[str, set] = {}
    for d in dicts:
        for key, values in d.items():
            out.setdefault(key, set()).update(tuple(v) if isinstance(v, list) else v for v in values)
    return {key: sorted(values) for key, values in sorted(out.items())}


class RankResult(RankMeasures):
    """rank<R>.json: what one rank wrote. Every field but the first few is absent when the rank failed first.

    The rank builds it (rank/worker.py main) and sets each measure on it as it has it; a name not declared here, or a
    value of the wrong shape, raises in the rank at that line, and the rank's error in the record says which."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # rank/worker.py main(): always written.
    rank: int
    world_size: int
    device: str
    error: RankError | None = None
    pid: int | None = None
    warnings: list[dict] = []
    phase: str | None = None
    # rank/worker.py setup.
    path: str | None = None
    backend: str | None = None
    # rank/measures/*: what judge reads in its own way.
    residency: Residency | None = None
    parity: dict[str, RankParity] | None = None  # reference name -> this rank's comparison with it
    head_memory: HeadMemory | None = None
    # rank/verl_side/engine_path.py run_update (scenarios with `steps`): every optimizer step's comparison, verl's
    # metrics, the log-probs of each step, the micro-batches verl formed; rank 0 adds the oracle's metrics.
    update: RankUpdate | None = None
    # rank/head_bench.py (path: head): the lm_head unit alone's figures, merged by judge_cell/head_step.py.
    head_step: HeadStep | None = None


class VerlTree(Written):
    """A verl source tree a command ran on (plan/verl_trees.py resolve: VERL=PATH[@REF]), as the records' stamp and
    HARNESS_VERL_TREE hold it. Records written by hand (tests) may lack the version and key."""

    path: str  # the checkout's root
    ref: str | None = None  # as given after '@'
    commit: str | None = None  # the full commit (PATH@REF, or HEAD of a checkout as it is on disk); None outside git
    dirty: bool = False  # PATH as it is on disk differs from its HEAD under verl/
    version: str | None = None  # verl/version/version of the tree
    key: str | None = None  # its environment's directory name (.cache/verl-trees/<key>)

    @property
    def spec(self) -> str:
        """The tree as --verl names it again: at its commit (a ref moves), or its files on disk where it had edits
        or no git."""
        return self.path if self.dirty or not self.commit else f"{self.path}@{self.commit}"

    @classmethod
    def of_this_command(cls) -> VerlTree | None:
        """The verl tree this command runs on (plan/verl_trees.py enter sets HARNESS_VERL_TREE), or None: the
        installed verl (or a value that is not a tree's JSON)."""
        import os

        from harness.paths import VERL_TREE_ENV

        raw = os.environ.get(VERL_TREE_ENV)
        try:
            return cls.model_validate_json(raw) if raw else None
        except ValueError:  # pydantic's ValidationError is one
            return None


class Stamp(Written):
    """What is needed to trust and rerun a record (records/store.py stamp_record), and where it came from."""

    model_config = ConfigDict(validate_assignment=True)

    scenario_spec: RecordedScenario | None = None  # the whole scenario as it ran (rerun builds it again from this)
    versions: dict[str, str | None] | None = None
    harness_commit: str | None = None
    host: str | None = None
    command: str | None = None
    finished_at: str | None = None
    scenario_file: str | None = None
    scenario_sha256: str | None = None
    arm_patches: list[ArmPatch] | None = None
    # plan/reuse.py: one digest of everything the record depends on (scenario, device, arm, harness code,
    # environment, host); and, on a record verify reused instead of running its cell again, the FILE:N it came from.
    reuse_key: str | None = None
    reused_from: str | None = None
    # commands/releases.py: the release the cell ran on.
    release: str | None = None
    release_facts: dict | None = None
    release_python: str | None = None
    # plan/verl_trees.py: the verl source tree the command ran on (VERL=PATH[@REF]).
    verl_tree: VerlTree | None = None


class NotApplied(Written):
    """An arm whose diff finds no place in the verl the command ran on (plan/diffs.py DoesNotApply): its cells are
    skipped rows, and this says which diff, file and hunk, and whether that hunk's result is already there (this
    verl has the change: for `none`, nothing to undo)."""

    patch: str
    file: str
    hunk: str | None = None
    why: str
    already_there: bool = False
    port: str | None = None  # how to make a patch for the verl it ran on (plan/verl_trees.py port_words)

    @property
    def where(self) -> str:
        """The hunk and file as a line names them (the file alone where it is missing)."""
        return f"{self.hunk} of {self.file}" if self.hunk else self.file


class FailureKind(StrEnum):
    """What kind of number or event a failure is: one word per concept, wherever the judge finds it (a gradient is
    "gradient" in a one-step cell, an update and the lm_head unit alone: GradientOf says which where it matters).
    render/cause_words.py writes each kind's words; judge_cell/update_why.py orders an update's kinds causally."""

    ERROR = "error"  # a rank raised (subject: the class judge_cell/diagnosis.py found)
    HANG = "hang"  # no result before the timeout
    LOG_PROBS = "log-probs"
    REFERENCE_LOG_PROBS = "reference log-probs"  # verl's ref engine's (loss.use_kl_loss), not the actor's
    ENTROPY = "entropy"
    GRADIENT = "gradient"
    UPDATE = "update"  # a parameter's update (weights after - before) of an optimizer step
    WEIGHTS = "weights"
    METRIC = "metric"  # one of verl's metrics (subject: its name)
    RESIDENCY = "residency"  # an FSDP unit or an lm_head copy left after the step
    MISMATCH = "mismatch"  # numbers off with no finding that explains them
    OPTIMIZER_STEPS = "optimizer steps"  # steps some rank did not take, or took beyond the update's
    MICRO_BATCHES = "micro-batches"  # verl's micro-batches not the oracle's plan
    SETTING = "setting"  # a setting whose effect verl's module does not show
    LOSS_SLIP = "loss-slip"  # verl's loss metrics fit the loss with a slip (another KL estimator, clip bounds)
    WHY = "why"  # words alone: a record's why from before causes were kept, a failure line from before they were typed


# The outcomes of a cell that failed: every comparison of failures (records/failure_signature.py) and every count
# of failing cells reads this set.
FAILING_OUTCOMES = frozenset({"error", "mismatch", "hang"})


class ChangeKind(StrEnum):
    """What a patch's record of one scenario is against its base's (judge_change/base_change.py change_against decides):
    the kinds in the one order every list and table of them follows (render/differential.py, render/comment_body.py)."""

    NEW = "new"  # fails where the base passes, or otherwise than the base: the only kind counted against a patch
    FIXED = "fixed"  # the base fails, the patch passes
    SAME = "same"  # both fail alike (records/failure_signature.py same_failure): the base's own failure
    NOT_JUDGED = "not judged"  # the cell cannot run in this environment
    UNCHANGED = "unchanged"  # both pass
    NO_BASE = "no base"  # nothing of the base beside it (verify --alone, or its cell skipped)


class GradientOf(StrEnum):
    """What a gradient failure is the gradient of. A separate field, not a kind of its own: it is the same concept
    (a parameter's gradient against the reference's), but the cell that took it decides what its subject is and how
    its words read, and verify must not group a one-step class with an update's parameter."""

    STEP = "one step"  # a one-step cell's backward: the cause's subject is the class the diagnosis found
    UPDATE = "update"  # an optimizer step of an update, before the clip, at a moment: its subject the parameter
    HEAD_UNIT = "head unit"  # the lm_head unit alone (path: head): its subject the parameter


# The kinds records written before FailureKind named otherwise: old word -> (kind, what the gradient was of). A
# "gradient" that does not say what it is of is an update's: the only one those records called so.
LEGACY_KINDS = {
    "grad": (FailureKind.GRADIENT, GradientOf.STEP),
    "head gradient": (FailureKind.GRADIENT, GradientOf.HEAD_UNIT),
    "gradient": (FailureKind.GRADIENT, GradientOf.UPDATE),
}


def _words_alone(words: str) -> dict:
    """A failure known by its words alone: they are its subject too, so that one why groups with the same why."""
    return {"kind": FailureKind.WHY, "subject": words, "words": words}


class Failure(Written):
    """One thing the judge found wrong, as data: what kind of number or event (kind, FailureKind; for a gradient,
    what it is the gradient of: gradient_of), what it concerns (subject: a parameter, a metric, the class a
    diagnosis found), when (moment: the words, "at step 1, mini-batch 2"; step and mini_batch: 0-based), the value
    against its bound, verl's and the reference's numbers where there are two, the known issue it is, the
    parameters it names, and the words the judge wrote. Readers take the fields; render/ writes a group's words."""

    kind: FailureKind
    gradient_of: GradientOf | None = None
    subject: str | None = None
    moment: str | None = None
    step: int | None = None
    mini_batch: int | None = None
    value: Number | None = None
    bound: float | None = None
    verl: Number | str | None = None
    reference: Number | str | None = None
    known_issue: str | None = None
    parameters: list[str] = []
    words: str = ""

    @field_serializer("kind", "gradient_of")
    def _plain_word(self, word: StrEnum | None) -> str | None:
        """Written as the plain word: a record's data is plain (JSON's types), which pytest-xdist's transport of a
        scenario item's record (conftest.py user_properties) needs as much as a JSON line does."""
        return None if word is None else str(word)

    @model_validator(mode="before")
    @classmethod
    def _kind_of_an_older_record(cls, data):
        """An older record's kind in today's words (LEGACY_KINDS); a record's failure line from before failures
        were typed (a string) as the words alone (of_words)."""
        if isinstance(data, str):
            return _words_alone(data)
        if isinstance(data, dict) and "gradient_of" not in data and data.get("kind") in LEGACY_KINDS:
            kind, of = LEGACY_KINDS[data["kind"]]
            data = {**data, "kind": kind, "gradient_of": of}
        return data

    @classmethod
    def of_words(cls, words: str) -> Failure:
        """A failure known by its words alone (kind WHY): an older record's why or failure line."""
        return cls(**_words_alone(words))

    def key(self) -> tuple[str, str | None, str | None]:
        """What verify groups failing cells by: the same kind of failure (of the same cell's gradient) of the same
        subject, whatever the world size, step or numbers."""
        return self.kind, self.gradient_of, self.subject


class Verdict(Written):
    """Why the record's outcome is what it is (judge_cell/verdict.py): the error and every rank's, the failures (each a
    Failure, in the order the judge found them; a record from before they were typed held their words alone, which
    load as failures of kind WHY), the diagnosis in one line (why) and in parts, or why the cell was skipped."""

    model_config = ConfigDict(validate_assignment=True)

    error: RankError | None = None
    rank_errors: list[RankError] = []
    failures: list[Failure] = []
    skipped_reason: str | None = None
    not_applied: NotApplied | None = None  # a skipped cell whose arm's diff does not apply to this verl
    diagnosis: Diagnosis | None = None
    why: str | None = None
    # The failure that explains the others (judge_cell/verdict.py): an update's first wrong number in causal order, an
    # error's class, a one-step mismatch's class; records from before the field have none (records/record_cause.py).
    cause: Failure | None = None

    def failure_words(self) -> list[str]:
        """Each failure's words, in order: what the tables, CI and drift say of a mismatch."""
        return [f.words for f in self.failures]


class Measures(RankMeasures):
    """What the ranks measured, as judge keeps it (judge_cell/verdict.py): every measure of RankMeasures merged over the
    ranks by its rule, and the ones judge reads in its own way: parity, residency, head memory, the update."""

    model_config = ConfigDict(validate_assignment=True)

    parity: Parity | None = None
    residency: Residency | None = None
    head_memory: HeadMemory | None = None
    # judge_cell/update_verdict.py (scenarios with `steps`): per RL step the log-probs, per optimizer step every
    # parameter's update error, the clip, verl's metrics beside the oracle's; the worst of each.
    update: UpdateNumbers | None = None
    # judge_cell/head_step.py (path: head): the lm_head unit alone's figures merged over the ranks.
    head_step: HeadStep | None = None


# The groups of a record (schema 4), by the field that holds each; schemas 1 and 2 wrote every field flat, schema 3
# the measures.
GROUPS = {"stamp": Stamp, "verdict": Verdict, "measures": Measures}
_GROUP_OF = {name: group for group, model in GROUPS.items() for name in model.model_fields}


def nested_shape(data: dict) -> dict:
    """A record's JSON in the nested shape of schema 4: the fields of a group that a record of schema 1, 2 or 3 (or
    judge's own fields) holds at the top level, moved into the group. What Record does on load, and what a reader
    of the raw JSON (plan/estimate.py, plan/reuse.py) calls before reading a group."""
    flat = {name: group for name, group in _GROUP_OF.items() if name in data}
    if not flat:
        return data
    nested = {k: v for k, v in data.items() if k not in flat}
    for group in GROUPS:
        held = nested.get(group)
        held = held.written() if isinstance(held, Written) else dict(held or {})
        nested[group] = held | {name: data[name] for name, g in flat.items() if g == group}
    return nested


class Record(Written):
    """One run's record (schema 4): the cell and its outcome at the top, with how it ran; what the ranks measured
    (RankMeasures' fields and the judged ones) in `measures`; why the outcome is what it is in `verdict`; what is
    needed to trust and rerun it in `stamp`. Only the fields a run sets are written (exclude_unset): a skipped
    cell's record has no measures but the two every record names (parity and comm: None). Unknown fields of an
    older record are kept (extra="allow"), and a record of schema 1 or 2, which held every field flat, or of schema
    3, which held its measures flat, loads into the groups (nested_shape)."""

    model_config = ConfigDict(validate_assignment=True)

    schema_version: int = 1
    scenario: str
    arm: str
    outcome: Outcome
    verdict: Verdict = Field(default_factory=Verdict)  # judge: why the outcome
    stamp: Stamp = Field(default_factory=Stamp)  # records/store.py stamp_record, plan/reuse.py, commands/releases.py
    measures: Measures = Field(default_factory=Measures)  # judge: what the ranks measured
    # judge: the run.
    world_size: int | None = None
    device: str | None = None
    backend: str | None = None
    wall_s: float | None = None
    rank_start: str | None = None  # "fork" of the preloaded parent, or a fresh interpreter (and why)
    # launch/sandboxing.py: "sandboxed" (the OS sandbox, docs/SANDBOX.md) or "none (why)"; absent in older records.
    sandbox: str | None = None
    run_dir: str | None = None  # the rank logs (torchrun.log) and result files of this run
    rank_logs: dict[str, list[str]] | None = None
    # plan/devices.py: the GPUs the cell's ranks were shown (CUDA_VISIBLE_DEVICES ids: nvidia-smi's indices, or
    # the node's as Ray gave them); absent on CPU and in records older than the field.
    cuda_devices: list[str] | None = None
    # run/ray_executor.py: the Ray node the cell ran on ("hostname (ip)"); absent for a cell run by this host.
    node: str | None = None
    tolerance: ToleranceUsed | None = None
    # The nine settings a table shows beside the numbers (every reader of those takes them from here); the whole
    # scenario, for a rerun and for any other setting, is stamp.scenario_spec.
    settings: Settings | None = None
    warnings: list[RaisedWarning] | None = None

    @model_validator(mode="before")
    @classmethod
    def _groups_of_an_older_schema(cls, data):
        return nested_shape(data) if isinstance(data, dict) else data

    def __setattr__(self, name: str, value):
        # A name of a group set on the record itself would be kept as an unknown field (extra="allow") and lost to
        # every reader: refused, naming where it lives now.
        group = _GROUP_OF.get(name)
        if group is not None:
            raise AttributeError(f"a record's {name} is record.{group}.{name} (schema 4)")
        super().__setattr__(name, value)

    def trainer(self) -> str | None:
        """The trainer whose batch the record's engine got (scenario field `trainer`; before it, every engine
        record's was ray_trainer's); None on the direct path."""
        spec = self.stamp.scenario_spec
        return (spec.trainer or "ray") if spec is not None and spec.path == "engine" else None

    def written(self) -> dict:
        """The record's JSON: the fields set, and each group that holds any (a group filled in place counts)."""
        data = self.model_dump(exclude_unset=True, exclude=set(GROUPS))
        for group in GROUPS:
            held = getattr(self, group).written()
            if held:
                data[group] = held
        return data
