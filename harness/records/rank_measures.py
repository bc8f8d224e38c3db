"""What a rank writes of its comparisons with the oracle, typed (rank<R>.json's `parity` and `update`): the rank
code builds them as plain dicts (harness/rank/measures/parity.py, rank/verl_side/engine_path.py and
engine_update.py) and sets them whole on its RankResult, which checks them against these models there and
writes what they hold. Unknown fields are kept (extra="allow")."""

from __future__ import annotations

from harness.records.measures import Written as _Read  # the records' base: unknown fields kept, built when first used


class SpPositions(_Read):
    """Every response token's SP shard, offset in it, the shard's length and its log-prob error
    (rank/oracle/sequence_parallel.py), for one data-parallel group."""

    sp: int
    group: int = 0
    tokens: list[list[int | float]] = []


class Comparison(_Read):
    """One output against the reference (rank/measures/parity.py compare_outputs): the largest difference, and from each
    alternative the oracle computed."""

    max_abs: float
    finite: bool | None = None
    missing: bool | None = None  # the arm returned no such output (entropy)
    shape: list[list[int]] | None = None  # [actual, expected] where they differ
    alternatives: dict[str, float] | None = None
    sp_positions: SpPositions | None = None
    # engine path: per sample of this rank [its place in the global batch, its response length, max |diff|]
    # (rank/verl_side/engine_path.py), so that a verdict can name the samples it got wrong (judge_cell/diagnosis.py).
    rows: list[list[int | float]] | None = None


class SkippedRows(_Read):
    """The rows where the arm's log-prob and entropy are exactly 0 and the reference's log-prob is not
    (rank/measures/rows.py skipped_rows): how many of the rows scored, by role, how many the trainer reads and
    how many the loss weighs."""

    count: int = 0
    of: int = 0
    by_role: dict[str, int] = {}
    read: int = 0
    in_loss: int = 0


class OutputComparisons(_Read):
    """One micro-batch's log-probs and entropy against the reference; where the rows compared include some verl's
    trainer never reads (the direct path compares every row), the same over the rows it reads (`_read`)."""

    log_probs: Comparison
    entropy: Comparison | None = None
    skipped_rows: SkippedRows | None = None
    log_probs_read: Comparison | None = None
    entropy_read: Comparison | None = None


class GradShard(_Read):
    """One parameter's gradient shard against the reference's (rank/measures/parity.py compare_gradients): squared sums
    to be added over ranks, and the terms of the alternatives' fit (gg, and per alternative gb and bb)."""

    diff_sq: float = 0.0
    ref_sq: float = 0.0
    max_abs: float = 0.0
    problem: str | None = None
    numel: int = 0
    fit: dict | None = None


class RankParity(_Read):
    """One rank's comparison with one reference: per micro-batch the outputs, per parameter the gradient shard
    (none for a forward-only step)."""

    outputs: dict[str, OutputComparisons]
    grads: dict[str, GradShard] | None = None


class ParamUpdateSums(_Read):
    """One parameter's shard after one optimizer step: squared sums of the weights' and the update's errors."""

    theta_diff_sq: float
    theta_ref_sq: float
    delta_diff_sq: float
    delta_ref_sq: float
    numel: int


class ObservedOptimizerStep(_Read):
    """An optimizer step a rank watched verl take (rank/verl_side/engine_update.py OptimizerWatch)."""

    step: int
    index: int
    extra: bool = False  # beyond the update's steps: nothing to compare with
    params: dict[str, ParamUpdateSums] = {}
    # every parameter's gradient shard before verl's clip against the oracle's before its clip (absent: not measured,
    # records from before it was)
    grads: dict[str, GradShard] = {}


class StepLogProbs(_Read):
    """verl's log-probs (and entropy) on the weights an RL step starts from, against the oracle's."""

    step: int
    log_probs: Comparison
    entropy: Comparison | None = None
    skipped_rows: SkippedRows | None = None


class VerlMetrics(_Read):
    step: int
    verl: dict | None = None  # verl's metrics of the RL step, by verl's name (a list: one per mini-batch)


class OracleStep(_Read):
    """The oracle's optimizer step as the rank keeps it (rank/verl_side/engine_update.py oracle_summary)."""

    step: int
    epoch: int
    mini_batch: int
    clip_active: bool
    metrics: dict[str, float]
    # global sample index -> [clipped tokens, sum of old - new log-prob, response tokens]: the per-micro-batch metrics
    # (pg_clipfrac, ppo_kl) over whatever micro-batches verl formed
    samples: dict[str, list[float]] = {}
    # what a slip in verl's loss would log instead (rank/oracle/update.py _term_alternatives): name -> metrics
    metric_alternatives: dict[str, dict[str, float]] = {}


class RankUpdate(_Read):
    """A training update as one rank observed it (rank/verl_side/engine_path.py run_update); rank 0 adds the
    oracle's."""

    log_probs: list[StepLogProbs]
    metrics: list[VerlMetrics] = []
    micro_batches: list = []
    # per micro-batch, beside micro_batches: its tokens (prompt and response) and the optimizer step it fed, counted
    # over the whole update (under dynamic bsz verl decides how many micro-batches a mini-batch has)
    micro_batch_tokens: list[int | None] = []
    micro_batch_steps: list[int] = []
    optimizer_steps: list[ObservedOptimizerStep] = []
    plan: list[list[list[int]]] = []
    oracle: list[OracleStep] | None = None
    # per RL step, verl's ref engine's log-probs (loss.use_kl_loss) against the oracle's frozen initial model's
    ref_log_probs: list[StepLogProbs] = []
