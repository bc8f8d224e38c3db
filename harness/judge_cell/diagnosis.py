"""Why a run failed, from its numbers and its error text, never from the arm's name.

Gradients: every rank reported, per parameter, <g, g> and for each alternative B the oracle provides
(rank/oracle/reference.py, rank/measures/parity.py) <g, B> and <B, B>. Summed over ranks (judge_cell/shard_stats.py)
they fit g = k B over the whole gradient: k = <g, B> / <B, B>, residual ||g - k B|| / ||g||. The alternative with the
smallest residual names the defect when the residual is within MATCH_BOUND; the fitted k then says how it is scaled (x
W: a sum where FSDP averages; x 1/W: divided by the world size once too often). Log-probs: the largest difference from
each alternative the oracle computed (another temperature, shifted labels), matched within the log-prob tolerance.
Errors: the root cause's type, message and traceback, matched against the failure classes seen in verl's fused head
under FSDP2. "No known pattern" is an answer, with the closest alternative and its residual."""

from __future__ import annotations

import math
import re

from harness.judge_cell.shard_stats import GradientSums, merge_ranks
from harness.records import error_classes as classes
from harness.records.known_failures import known_failure
from harness.records.measures import (
    Diagnosis,
    ErrorDiagnosis,
    GradDiagnosis,
    OutputDiagnosis,
    Residency,
    RowsDiagnosis,
    SpPositionsDiagnosis,
)
from harness.records.rank_measures import OutputComparisons
from harness.records.results import RankError, RankResult, Record

# A gradient matches an alternative when ||g - k B|| / ||g|| is within this bound. fp32: the oracle's
# alternatives are sums and differences of fp32 gradients, exact to ~1e-7 relative; the defects matched
# measured residuals of 7e-8..8e-7 (docs/FINDINGS.md "Why a verdict fails"); the pass tolerance 1e-4 sits two
# orders above them and below the smallest defect seen (the entropy bonus's sign: 6e-4 from the reference).
# bf16-mixed: a bf16 arm differs from any fp32 alternative by its own rounding, measured at 5.8e-3 on the
# lm_head weight (cast-full-tensor), so the bound is the sharp bf16 gradient tolerance against FSDP's own path.
MATCH_BOUND = {"fp32": 1e-4, "bf16-mixed": 0.05}
# k counts as a named factor (1, W, 1/W, -1) within this relative distance; other k are reported as numbers.
K_CLOSE = 0.02
NO_PATTERN = "no known pattern"


def close_to(k: float, target: float) -> bool:
    return abs(k - target) <= K_CLOSE * abs(target)


def _fit_each_alternative(sums: GradientSums | None) -> tuple[float, dict]:
    """(<g,g>, {alternative: (k, residual)}) of the whole gradient; residual relative to ||g||. Only alternatives
    every rank compared its shard with: a sum missing a rank's shard is not the whole gradient's."""
    if sums is None or not sums.every_rank_compared():
        return 0.0, {}
    gg, out = sums.gg, {}
    for alternative, terms in sums.alternatives.items():
        if terms.ranks != sums.ranks or terms.bb <= 0 or gg <= 0:
            continue
        k = terms.gb / terms.bb
        out[alternative] = (k, math.sqrt(max(gg - terms.gb * terms.gb / terms.bb, 0.0) / gg))
    return gg, out


def _describe(alternative: str, k: float, world: int) -> str:
    w = world
    if alternative == "reference":
        if close_to(k, w) and w > 1:
            return f"the sum over ranks instead of the mean (x W = {w})"
        if close_to(k, 1 / w) and w > 1:
            return f"divided by the world size once too often (x 1/W = {1 / w:g})"
        if close_to(k, -1):
            return "the right gradient with the wrong sign"
        if close_to(k, 1):
            return "the right gradient"
        return f"the right gradient times a constant k = {k:.4g}"
    if alternative == "unreduced":
        if close_to(k, 1):
            return "this rank's gradient only, not reduced across ranks"
        if close_to(k, 1 / w):
            return (
                f"this rank's gradient only, divided by W = {w}: not reduced across ranks (dividing does not "
                "add the other ranks' share)"
            )
        return f"this rank's gradient only (not reduced across ranks), times k = {k:.4g}"
    scaled = "" if close_to(k, 1) else f", times k = {k:.4g}"
    if alternative == "entropy_sign":
        return f"the entropy bonus with the wrong sign (added to the loss, not subtracted){scaled}"
    if alternative == "even_cut":
        return (
            "the right gradient on shifted rows: each rank's rows cut at rank x rows // n, as if its n-rank shard "
            f"group's shards were equal, where FSDP2's uneven shards (torch.chunk sizes) start elsewhere{scaled}"
        )
    if alternative == "kl_sign":
        return f"the KL loss with the wrong sign (subtracted from the loss, not added){scaled}"
    if alternative == "agg:seq-mean-token-sum-norm/micro-batch width":
        return (
            "seq-mean-token-sum-norm divided by each micro-batch's own longest response, not the global batch's: "
            "verl's agg_loss divides by response_mask's padded width (loss_scale_factor unset), which is each "
            f"micro-batch's own where response_mask is nested (the v1 trainer's batch){scaled}"
        )
    if alternative.startswith("agg:"):
        return (
            f"the loss aggregated as {alternative[4:]}, not as the scenario's loss_agg_mode (verl's agg_loss weighs "
            f"the sequences or tokens of the batch otherwise){scaled}"
        )
    if alternative == "rank_token_mean":
        return f"each rank's own token-mean averaged over ranks, not the mean over the global token count{scaled}"
    return f"{alternative}{scaled}"


def grad_diagnosis(merged: dict[str, GradientSums], name: str, world: int, precision: str) -> GradDiagnosis:
    """What one parameter's gradient matches: pattern, k, residual, text. merged: every rank's gradient
    statistics, summed (judge_cell/shard_stats.py merge_ranks)."""
    sums = merged.get(name)
    problems = sums.problems if sums else set()
    if "missing" in problems:
        return GradDiagnosis(pattern="zero", k=0.0, residual=0.0, text="no gradient at all (the parameter got none)")
    if problems:
        return GradDiagnosis(pattern=None, k=None, residual=None, text=f"{NO_PATTERN} ({', '.join(sorted(problems))})")
    gg, fits = _fit_each_alternative(sums)
    if not fits:
        if gg == 0 and sums and sums.alternative_ranks:
            return GradDiagnosis(pattern="zero", k=0.0, residual=0.0, text="no gradient at all (all zeros)")
        return GradDiagnosis(pattern=None, k=None, residual=None, text=f"{NO_PATTERN} (no alternatives measured)")
    alternative, (k, residual) = min(fits.items(), key=lambda kv: kv[1][1])
    text = _describe(alternative, k, world)
    bound = MATCH_BOUND.get(precision, MATCH_BOUND["fp32"])
    if residual > bound:
        return GradDiagnosis(
            pattern=None,
            k=k,
            residual=residual,
            closest=alternative,
            text=f"{NO_PATTERN} (closest: {text}, residual {residual:.2g})",
        )
    return GradDiagnosis(pattern=alternative, k=k, residual=residual, text=text)


def output_diagnosis(outputs: list[OutputComparisons], bound: float) -> OutputDiagnosis:
    """outputs: every rank's and micro-batch's comparison with the oracle; the alternative that all their log-probs
    are within `bound` of, the closest one if none."""
    worst = {}
    for o in outputs:
        alternatives = o.log_probs.alternatives
        if alternatives is None:
            return OutputDiagnosis(pattern=None, max_abs=None, text=f"{NO_PATTERN} (no alternatives measured)")
        for name, value in alternatives.items():
            worst[name] = max(worst.get(name, 0.0), value)
    if not worst:
        return OutputDiagnosis(pattern=None, max_abs=None, text=f"{NO_PATTERN} (no alternatives measured)")
    name, value = min(worst.items(), key=lambda kv: kv[1])
    if value <= bound:
        return OutputDiagnosis(
            pattern=name, max_abs=value, text=f"matches the oracle with {name} (max diff {value:.2g})"
        )
    return OutputDiagnosis(
        pattern=None, max_abs=value, closest=name, text=f"{NO_PATTERN} (closest: {name}, max diff {value:.2g})"
    )


def sp_position_diagnosis(outputs: list[OutputComparisons], bound: float) -> SpPositionsDiagnosis | None:
    """Where the wrong log-probs sit relative to the Ulysses SP shards (rank/oracle/sequence_parallel.py): each response
    token's shard, offset in it and error, one rank per data-parallel group (its SP ranks report the same
    gathered log-probs). None without such records or without a wrong token."""
    groups = {}
    for o in outputs:
        positions = o.log_probs.sp_positions
        if positions:
            groups.setdefault(positions.group, positions)
    if not groups:
        return None
    tokens = [t for g in groups.values() for t in g.tokens]
    wrong = [t for t in tokens if t[3] > bound]
    if not wrong:
        return None
    sp = max(g.sp for g in groups.values())
    ends = [t for t in tokens if t[1] == t[2] - 1]
    wrong_ends = [t for t in wrong if t[1] == t[2] - 1]
    rest_max = max((t[3] for t in tokens if t[1] != t[2] - 1), default=0.0)
    per_shard = {s: [t for t in tokens if t[0] == s] for s in range(sp)}
    wrong_shards = sorted({t[0] for t in wrong})
    counts = ", ".join(f"shard {s}: {sum(t[3] > bound for t in ts)} of {len(ts)}" for s, ts in per_shard.items())
    worst = max(t[3] for t in wrong)
    if len(wrong_ends) == len(wrong):
        every = "each SP shard" if len(wrong_ends) == len(ends) else "an SP shard"
        text = (
            f"log-probs wrong at the last position of {every} only ({len(wrong)} of {len(ends)} scored "
            f"shard-end positions, max diff {worst:.2g}); every other position right (max diff {rest_max:.2g}): "
            "that position scored against the wrong token, as when labels are rolled within the local shard"
        )
        return SpPositionsDiagnosis(pattern="sp-shard-end", wrong=len(wrong), of=len(tokens), text=text)
    right_shards = [s for s in range(sp) if s not in wrong_shards]
    if right_shards and all(sum(t[3] > bound for t in per_shard[s]) >= 0.5 * len(per_shard[s]) for s in wrong_shards):
        right_max = max((t[3] for s in right_shards for t in per_shard[s]), default=0.0)
        names = ", ".join(str(s) for s in wrong_shards)
        text = (
            f"log-probs wrong throughout SP shard(s) {names} ({counts}; max diff {worst:.2g}) and right on "
            f"shard(s) {', '.join(str(s) for s in right_shards)} (max diff {right_max:.2g}): those ranks score "
            "their positions against labels that are not theirs"
        )
        return SpPositionsDiagnosis(pattern="sp-whole-shards", wrong=len(wrong), of=len(tokens), text=text)
    text = (
        f"log-probs wrong at {len(wrong)} of {len(tokens)} positions ({counts}; at shard ends "
        f"{len(wrong_ends)} of {len(ends)}; max diff {worst:.2g})"
    )
    return SpPositionsDiagnosis(pattern=None, wrong=len(wrong), of=len(tokens), text=text)


def row_diagnosis(outputs: list[OutputComparisons], bound: float, layout: dict | None) -> RowsDiagnosis | None:
    """Which samples of the global batch have wrong log-probs, where some do and some do not (the engine path's
    per-sample rows); whether they are exactly the responses shorter than the batch's longest, the ones a layout of
    batch x longest response pads (layout: the record's batch_layout, the trainer and response_mask's layout)."""
    rows: dict[int, tuple[int, float]] = {}
    for o in outputs:
        for index, length, error in o.log_probs.rows or []:
            before = rows.get(int(index), (int(length), 0.0))[1]
            rows[int(index)] = (int(length), max(float(error), before))
    wrong = sorted(i for i, (_, e) in rows.items() if e > bound)
    if not wrong or len(wrong) == len(rows):
        return None
    right = sorted(set(rows) - set(wrong))
    longest = max(n for n, _ in rows.values())

    def named(indices: list[int]) -> str:
        return ", ".join(f"{i} ({rows[i][0]} tokens)" for i in indices)

    wrong_max, right_max = (max(rows[i][1] for i in indices) for indices in (wrong, right))
    text = (
        f"log-probs wrong in samples {named(wrong)} of the global batch's {len(rows)} (max diff "
        f"{wrong_max:.2g}), right in {named(right)} (max diff {right_max:.2g})"
    )
    exact = wrong == sorted(i for i, (n, _) in rows.items() if n < longest)
    if exact:
        text += f": exactly the responses shorter than the batch's longest ({longest} tokens)"
    if layout:
        text += f", under the {layout.get('trainer')} trainer's batch (response_mask {layout.get('response_mask')})"
    lengths = [rows[i][0] for i in sorted(rows)]
    return RowsDiagnosis(
        wrong=wrong,
        of=len(rows),
        shorter_than_longest=exact,
        wrong_max_abs=wrong_max,
        right_max_abs=right_max,
        lengths=lengths,
        text=text,
    )


def skipped_rows_diagnosis(outputs: list[OutputComparisons]) -> str | None:
    """Rows the head skipped: verl's log-prob and entropy exactly 0 where the oracle's log-prob is not, summed over
    every rank's micro-batches: how many, where they sit, and whether the loss's rows are among them. None: none."""
    found = [o.skipped_rows for o in outputs if o.skipped_rows is not None]
    count = sum(s.count for s in found)
    if not count:
        return None
    of = sum(s.of for s in found)
    by_role: dict[str, int] = {}
    for s in found:
        for role, n in s.by_role.items():
            by_role[role] = by_role.get(role, 0) + n
    where = ", ".join(f"{n} {role}" for role, n in sorted(by_role.items(), key=lambda kv: -kv[1]))
    in_loss = sum(s.in_loss for s in found)
    among = "the loss's rows among them" if in_loss else "none of them a row of the loss"
    return (
        f"rows the head skipped (log-prob and entropy exactly zero where the oracle's are not), {among}: "
        f"{count} of {of} rows; where: {where}; {in_loss} of them the loss's rows"
    )


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s+(.*)')


# Frames an op passes through on its way to the kernel while the step's head-memory dispatch mode
# (rank/measures/around_step.py LargestTensors) is on: they say nothing about where the code under test raised.
_DISPATCH_FRAMES = (
    "/torch/_ops.py",
    "/torch/_compile.py",
    "/torch/_dynamo/eval_frame.py",
    "/harness/rank/measures/around_step.py",
    "/torch/utils/_python_dispatch.py",
)


def _frames(error: RankError) -> list[tuple[str, str, str, str]]:
    frames = _FRAME.findall(error.traceback_tail or "")
    return [f for f in frames if not f[0].endswith(_DISPATCH_FRAMES)] or frames


# Frames that place an error in the step's backward or optimizer phase, matched innermost first: (file suffix,
# function or None for any). FSDP2's post-backward runs as autograd's final callback of loss.backward().
_PHASE_FRAMES = (
    ("optimizer", "/torch/optim/optimizer.py", None),
    ("optimizer", "/torch/nn/utils/clip_grad.py", None),
    ("optimizer", "/verl/workers/engine/fsdp/transformer_impl.py", "optimizer_step"),
    ("optimizer", "/verl/utils/fsdp_utils.py", "fsdp2_clip_grad_norm_"),
    ("backward", "/torch/distributed/fsdp/_fully_shard/_fsdp_state.py", "_root_post_backward_final_callback"),
    ("backward", "/torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py", "post_backward"),
    ("backward", "/torch/autograd/graph.py", "_engine_run_backward"),
    ("backward", "/torch/autograd/__init__.py", "backward"),
    ("backward", "/torch/_tensor.py", "backward"),
)
# The phases a rank reports for the whole training step (verl's engine runs forward, backward and the optimizer
# step in one call): only these are refined from the traceback.
_STEP_PHASES = ("forward", "backward")


def step_phase(error: RankError) -> str | None:
    """The phase an error of the training step happened in, from its traceback: backward or optimizer where a
    frame of theirs is on the stack (the innermost decides), else the phase the rank reported."""
    reported = error.phase
    if reported not in _STEP_PHASES:
        return reported
    for path, _, func, _ in reversed(_FRAME.findall(error.traceback_tail or "")):
        for phase, suffix, name in _PHASE_FRAMES:
            if path.endswith(suffix) and (name is None or func == name):
                return phase
    return reported


def _fused_head_param(text: str) -> str | None:
    """verl's fused heads call the kernel with the lm_head weight as vocab_weights."""
    if "vocab_weights" in text or "fused_linear_for_ppo" in text:
        return "lm_head.weight"
    found = re.findall(r"self\.([\w.]+\.weight)", text)
    return found[-1] if found else None


def error_diagnosis(error: RankError, record: Record) -> ErrorDiagnosis:
    """A short class of the root cause and the object it concerns; for a known failure (records/known_failures.py)
    its public reference, the cause and what avoids it, at the end of the text."""
    message, text = _error_texts(error)
    diagnosis = _error_class(error, record, message, text)
    known = known_failure(text)
    if known:
        text = known.why if diagnosis.text.startswith(NO_PATTERN) else f"{diagnosis.text}; {known.why}"
        update = {"error_class": diagnosis.error_class or known.name, "reference": known.reference, "text": text}
        diagnosis = diagnosis.model_copy(update=update)
    return diagnosis


def _error_texts(error: RankError) -> tuple[str, str]:
    """(the messages, the messages and the traceback) an error is classed from."""
    root = error.root_cause.message if error.root_cause else None
    message = " ".join(str(x) for x in (error.message, error.full_message, root) if x)
    return message, message + "\n" + (error.traceback_tail or "")


def _error_class(error: RankError, record: Record, message: str, text: str) -> ErrorDiagnosis:
    """The failure class seen in verl's fused head under FSDP2 that the root cause matches, in the table's order
    (records/error_classes.py): each class's signature, and for some what the error's frames or the record say."""
    frames = _frames(error)
    where = ""
    if frames:
        path, line, func, _ = frames[-1]
        where = f" (in {func}, {path.rsplit('/', 1)[-1]}:{line})"
    if classes.DTENSOR_OUTSIDE_FORWARD.found_in(message):
        op = re.search(r"(aten\.\w+)(?:\.\w+)? got mixed", message)
        # a known failure names the parameter it reads (GLM-4V's vision embedding), not the fused head's guess
        param = getattr(known_failure(text), "object", None) or _fused_head_param(text)
        return ErrorDiagnosis(
            error_class=classes.DTENSOR_OUTSIDE_FORWARD.name,
            object=param,
            text=f"{classes.DTENSOR_OUTSIDE_FORWARD.said(param)}{f' by {op.group(1)}' if op else ''}{where}",
        )
    if classes.FP32_MASTER_MEETS_BF16.found_in(message):
        param = _fused_head_param(text)
        return ErrorDiagnosis(
            error_class=classes.FP32_MASTER_MEETS_BF16.name,
            object=param,
            text=f"{classes.FP32_MASTER_MEETS_BF16.said(param)}: gathered outside FSDP's mixed-precision cast{where}",
        )
    known = known_failure(text)
    if known:  # the class and its words are the table's
        return ErrorDiagnosis(error_class=known.name, object=None, text=f"{known.said()}{where}")
    misfit = _misfit_placements(text)
    if misfit:
        return misfit
    packed_mask = [f for f in frames if f[0].endswith("masking_utils.py") and "packed_sequence_mask" in f[3]]
    if classes.PACKED_POSITION_IDS.found_in(message) and packed_mask:
        path, line, func, _ = packed_mask[-1]
        return ErrorDiagnosis(
            error_class=classes.PACKED_POSITION_IDS.name,
            object="position_ids",
            text=f"transformers' packed-sequence mask, built from the position ids, indexed past its end (in "
            f"{func}, masking_utils.py:{line}): the packed position ids do not describe the packed "
            "sequence, as with verl 0.9.1's known layout defect when every sample has one length "
            "(torch's as_nested_tensor makes the 4 position-id rows the ragged dimension; "
            "docs/FINDINGS.md)",
        )
    out_of_range = re.search(classes.SHARD_AS_WHOLE_WEIGHT.signature[0], message)
    shape = record.measures.lm_head_shape or []
    world = record.world_size or 1
    if out_of_range and shape and world > 1 and int(out_of_range.group(2)) * world == shape[0]:
        size, found = int(out_of_range.group(2)), classes.SHARD_AS_WHOLE_WEIGHT
        return ErrorDiagnosis(
            error_class=found.name,
            object="lm_head.weight",
            text=f"logits over {size} of {shape[0]} vocabulary entries: {found.said()} "
            f"(token id {out_of_range.group(1)} out of range){where}",
        )
    return _unmatched(error, message, frames)


# What a rank does in the phases where only the harness's own code runs on the arm's results.
_READING_PHASES = {"compare": "comparing the arm's results with the oracle's", "bench": "timing the arm's step"}


def _misfit_placements(message: str) -> ErrorDiagnosis | None:
    """torch's "Sharding propagation failed for aten.OP(...)" where one DTensor's placements are fewer or more than
    its mesh's dimensions: a tensor the arm left (a gradient gathered with a one-entry grad_placements on HSDP's
    2-D mesh) meeting the others in OP. _NormPartial placements: the operands are gradient norms, as torch's
    clip_grad_norm_ stacks them before the clip."""
    head = re.search(classes.PLACEMENTS_MISFIT_MESH.signature[0], message)
    if not head:
        return None
    specs = []
    for chunk in message.split("DTensorSpec(mesh=DeviceMesh((")[1:]:
        dims = chunk.split(")", 1)[0]
        if "placements=(" not in chunk or "), tensor_meta" not in chunk:
            continue  # a spec the message's cut left partial
        placements = chunk.split("placements=(", 1)[1].split("), tensor_meta", 1)[0]
        specs.append((dims, dims.count("=") or dims.count(",") + 1, re.findall(r"\w+\(", placements), placements))
    misfit = [s for s in specs if len(s[2]) != s[1]]
    if not specs or not misfit:
        return None
    dims, ndim, names, shown = misfit[0]
    verb = "has" if len(misfit) == 1 else "have"
    norms = " (gradient norms, as clip_grad_norm_ stacks them before the clip)" if "_NormPartial" in message else ""
    return ErrorDiagnosis(
        error_class=classes.PLACEMENTS_MISFIT_MESH.name,
        object=None,
        text=f"{len(misfit)} of the {len(specs)} DTensors shown meeting in {head.group(1)}{norms} {verb} {len(names)} "
        f"placement(s) ({shown.rstrip(', ')}) on the {ndim}-D mesh ({dims}): the arm left a gradient whose "
        "placements do not fit the mesh (as a one-entry grad_placements on HSDP's 2-D mesh gives)",
    )


def _unmatched(error: RankError, message: str, frames: list) -> ErrorDiagnosis:
    """An error of no known class, said with where it was raised: in the harness's own code reading what the arm
    produced (rank/measures/parity.py ArmOutputUnreadable: the arm's output, named), elsewhere in the harness
    (a harness defect, or an output of the arm it does not expect), or in verl/torch (no known pattern: the
    error and its innermost frame, never the bare words)."""
    first = (message.split("\n")[0] or error.type or "").strip()
    root = error.root_cause.type if error.root_cause else None
    if any(classes.ARM_OUTPUT_UNREADABLE.found_in(t) for t in (error.type, root) if t):
        text = (error.message or first).strip()
        param = text.split("'s ", 1)[0] if "'s " in text else None
        return ErrorDiagnosis(
            error_class=classes.ARM_OUTPUT_UNREADABLE.name,
            object=param,
            text=f"{classes.ARM_OUTPUT_UNREADABLE.bare()} (phase {error.phase}): "
            f"{text}; about the arm's output, not a harness defect",
        )
    shown = f"{error.type}: {(error.message or '').strip()}"[:200]
    harness_frames = [f for f in frames if _is_harness(f[0])]
    # The innermost frame of the harness's own code: where the harness was when the error reached it.
    if harness_frames and (error.phase in _READING_PHASES or _innermost_is_harness(frames)):
        path, line, func, _ = harness_frames[-1]
        doing = _READING_PHASES.get(error.phase, f"in phase {error.phase}")
        return ErrorDiagnosis(
            error_class=classes.HARNESS_SIDE.name,
            object=None,
            text=f"raised in the harness's own code while {doing} (in {func}, "
            f"{path.split('/harness/', 1)[-1]}:{line}): {shown}; a harness defect, or something the arm "
            "produced that the harness does not expect (the traceback: report --full)",
        )
    where = ""
    if frames:
        path, line, func, _ = frames[-1]
        where = f" (in {func}, {path.rsplit('/', 1)[-1]}:{line})"
    return ErrorDiagnosis(error_class=None, object=None, text=f"{NO_PATTERN}: {shown}{where}")


def _is_harness(path: str) -> bool:
    """A frame of the harness's own package (not of an installed library, not of a patched verl copy)."""
    return classes.HARNESS_SIDE.found_in(path)


def _innermost_is_harness(frames: list) -> bool:
    """Whether the innermost frame outside torch's own library is the harness's."""
    own = [f for f in frames if "/torch/" not in f[0]]
    return bool(own) and _is_harness(own[-1][0])


def residency_diagnosis(residency: Residency, lm_head_shape: list | None) -> str | None:
    units = residency.unsharded_units
    if units:
        unit, nbytes = sorted(units.items())[0]
        whole = ""
        if lm_head_shape and unit == "lm_head" and nbytes == 4 * math.prod(lm_head_shape):
            whole = ": the whole fp32 weight"
        return (
            f"FSDP unit {unit} still unsharded after the step ({nbytes} bytes per rank{whole}): it was "
            "unsharded and never resharded"
        )
    if residency.lm_head_copies:
        return (
            f"{residency.lm_head_copies} full lm_head weight copy(ies) kept alive after the step "
            f"({residency.lm_head_copy_bytes} bytes per rank)"
        )
    return None


def diagnose(record: Record, results: list[RankResult], tol, failing_params: list[str]) -> tuple[Diagnosis, str]:
    """(diagnosis, why) of a judged record: per failing gradient, the log-probs, the error, the residency."""
    diagnosis = Diagnosis()
    if record.outcome == "error" and record.verdict.error:
        diagnosis.error = error_diagnosis(record.verdict.error, record)
        return diagnosis, diagnosis.error.text
    if record.outcome == "hang":
        return diagnosis, f"{NO_PATTERN} (hang)"
    if record.outcome != "mismatch":
        return diagnosis, ""
    per_rank = [r.parity["oracle"] for r in results]
    outputs = [o for p in per_rank for o in p.outputs.values()]
    whys = []
    if max(o.log_probs.max_abs for o in outputs) > tol.logprob_abs:
        diagnosis.log_probs = output_diagnosis(outputs, tol.logprob_abs)
        sp = sp_position_diagnosis(outputs, tol.logprob_abs)
        rows = row_diagnosis(outputs, tol.logprob_abs, record.measures.batch_layout)
        diagnosis.skipped_rows = skipped_rows_diagnosis(outputs)
        if diagnosis.skipped_rows and diagnosis.log_probs.pattern is None:
            # Exact zeros where the oracle scored a row say more than any whole-sequence alternative's distance; which
            # samples hold them (some right, some wrong) says where in the batch.
            diagnosis.rows = rows
            samples = f"; {rows.text}" if rows else ""
            whys.append(f"log-probs: {diagnosis.skipped_rows}{samples}")
        elif sp and diagnosis.log_probs.pattern is None:
            # Under sequence parallelism where the errors sit says more than the closest whole-sequence alternative.
            diagnosis.sp_positions = sp
            whys.append(sp.text)
        elif rows and diagnosis.log_probs.pattern is None:
            # Some samples right and others wrong: which ones says more than the closest whole-batch alternative.
            diagnosis.rows = rows
            whys.append(rows.text)
        else:
            whys.append(f"log-probs: {diagnosis.log_probs.text}")
    if failing_params and all(p.grads is not None for p in per_rank):
        merged = merge_ranks([p.grads for p in per_rank])
        world, precision = record.world_size or 1, (record.settings.precision if record.settings else None) or "fp32"
        diagnosis.grads = {n: grad_diagnosis(merged, n, world, precision) for n in failing_params}
        if not whys:  # wrong log-probs explain wrong gradients; otherwise the gradients are the finding
            whys.append(_grads_why(diagnosis.grads) + _entropy_free_backward(record, diagnosis.grads))
    residency = residency_diagnosis(record.measures.residency or Residency(), record.measures.lm_head_shape)
    if residency:
        diagnosis.residency = residency
        whys.append(residency)
    if not whys:
        whys.append(NO_PATTERN)
    return diagnosis, "; ".join(whys)


def _entropy_free_backward(record: Record, by_param: dict[str, GradDiagnosis]) -> str:
    """Where most failing gradients are none at all in a step that asked verl for no entropy: the cause's place,
    the fused head's backward, which gets dentropy=None then (FusedLinearForPPOFunction materialises no zero
    gradient) and runs its entropy-free branch."""
    loss = (record.measures.verl_config or {}).get("loss") or {}
    zero = [n for n, d in by_param.items() if d.pattern == "zero"]
    if loss.get("entropy_asked") is False and len(zero) * 2 > len(by_param):
        return (
            "; the step asked verl for no entropy (entropy_coeff 0, calculate_entropy false): the fused head's "
            "backward got dentropy=None (its entropy-free branch) and propagated no gradient"
        )
    return ""


def _grads_why(by_param: dict[str, GradDiagnosis]) -> str:
    texts = {}
    for name, d in by_param.items():
        texts.setdefault(d.text, []).append(name)
    # The explanation shared by most parameters first; lm_head.weight named when it is the only one.
    text, names = max(texts.items(), key=lambda kv: (len(kv[1]), "lm_head.weight" in kv[1]))
    residuals = [by_param[n].residual for n in names if by_param[n].residual is not None]
    shows_residual = residuals and by_param[names[0]].pattern not in (None, "zero")
    # The residual ||g - k B|| / ||g|| said in words where it is shown: how much of the gradient it leaves out.
    res = (
        f" (residual {max(residuals):.1g}: the part of the gradient's norm this leaves unexplained)"
        if shows_residual
        else ""
    )
    who = f"grad {names[0]}" if len(names) == 1 else f"grads of all {len(names)} failing parameters"
    if len(names) < len(by_param):
        who = f"grads of {len(names)} of {len(by_param)} failing parameters ({', '.join(names[:2])}…)"
        if len(names) == 1:
            who = f"grad {names[0]} (and {len(by_param) - 1} other(s) otherwise)"
    return f"{who}: {text}{res}"
