"""Tables: the one markdown-table renderer, the verdict table built on it, and the summary lines.

The renderer is `markdown_table`; the verdict table's cells are `grad_cell`, `bytes_cell` and `error_cell`."""

from __future__ import annotations

import math
import re
import textwrap

from harness.records.measures import Parity, UpdateNumbers
from harness.records.results import Record, VerlTree, measured_head_memory, other_all_gather_bytes

COLUMNS = [
    "scenario",
    "path",
    "W",
    "device",
    "arm",
    "outcome",
    "error / worst failure",
    "why",
    "logprob err",
    "entropy err",
    "worst grad rel err (param)",
    "all-gathers fsdp+other",
    "other AG bytes",
    "largest logits",
    "wall s",
]


# The first columns of a table of runs measured per world size and precision (the report's cells, bench's).
RUN_COLUMNS = ["scenario", "W", "precision", "arm", "outcome"]


def num(x, fmt="{:.2g}"):
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if math.isinf(x):
        return "inf"
    return "0" if x == 0 else fmt.format(x)


def short_param(name: str | None) -> str:
    if not name:
        return "-"
    return name.removeprefix("model.").removeprefix("language_model.")


def error_cell(record: Record, width: int = 70) -> str:
    err = record.verdict.error
    if record.outcome == "skipped":
        text = f"skipped: {record.verdict.skipped_reason}"
    elif err:
        text = f"{err.type}: {err.message}"
        root = err.root_cause
        if root and root.type and root.type != err.type and root.message not in text:
            text += f" <- {root.type}: {root.message}"
    elif record.verdict.failures:
        more = len(record.verdict.failures) - 1
        text = record.verdict.failures[0].words + (f" (+{more} more)" if more else "")
    else:
        text = ""
    text = text.replace("|", "/").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def why_cell(record: Record, width: int = 90) -> str:
    """The record's diagnosis in one line (judge_cell/diagnosis.py): empty for a pass."""
    text = (record.verdict.why or "").replace("|", "/").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


NOT_JUDGED = "not judged"


def grad_cell(parity: Parity | None, update: UpdateNumbers | None = None, update_judged: bool = True) -> str:
    """The worst gradient's relative error and its parameter, and how many gradients are missing: one cell of every
    table that shows a run's gradients. A training update's record (scenarios with `steps`) shows its worst update
    error over every optimizer step instead (judge_cell/update_verdict.py); where its precision has no bound on the
    update (bf16: inputs/tolerances.py update_rel None) the number decides nothing, so the cell says "not judged"."""
    if update and update.update_worst_param:
        if not update_judged:
            return f"update {NOT_JUDGED}"
        return f"update {num(update.update_worst_rel)} ({short_param(update.update_worst_param)})"
    parity = parity or Parity()
    worst = parity.grad_worst_rel
    cell = "-" if worst is None else f"{num(worst)} ({short_param(parity.grad_worst_param)})"
    if parity.missing_grads:
        cell += f", {len(parity.missing_grads)} missing"
    return cell


def update_judged(record: Record) -> bool:
    """Whether the record's update numbers were judged: its tolerance bounds the update (a record without the
    tolerance it was judged with is taken as judged, as it was shown before)."""
    tol = record.tolerance.update if record.tolerance else None
    return tol is None or tol.update_rel is not None


def bytes_cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def row(record: Record) -> list[str]:
    parity = record.measures.parity or Parity()
    counts = record.measures.comm.count_by_origin() if record.measures.comm else None
    return [
        record.scenario,
        (record.settings.path if record.settings else None) or "direct",
        str(record.world_size or "?"),
        f"{(record.device or '?')}/{(record.backend or '?')}",
        record.arm,
        record.outcome,
        error_cell(record),
        why_cell(record),
        num(parity.logprob_max_abs),
        num(parity.entropy_max_abs),
        grad_cell(parity, record.measures.update, update_judged(record)),
        "-" if counts is None else "+".join(map(str, counts)),
        bytes_cell(other_all_gather_bytes(record)),
        logits_cell(record),  # the largest tokens x vocab tensor of the step (judge_change/head_memory.py judges it)
        num(record.wall_s, "{:.1f}"),
    ]


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    """The one table renderer: columns padded to width, so it reads in a terminal and renders as markdown."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])


def verdict_table(records: list[Record]) -> str:
    return markdown_table(COLUMNS, [row(r) for r in records])


TERMINAL_WIDTH = 120
TERMINAL_COLUMNS = ["scenario", "W", "arm", "outcome", "why"]


def short_why(record: Record) -> str:
    """One line on why a cell is not a pass: where a hang's ranks wait, else the diagnosis (judge_cell/diagnosis.py),
    else the error or the first failure (all of it: `report --full`, the wide table)."""
    if record.outcome == "hang":
        waits = (record.verdict.error.waits_in if record.verdict.error else None) or {}
        if waits:
            return "; ".join(f"rank {r} waits in {where.split('/')[-1]}" for r, where in sorted(waits.items()))
    if record.outcome != "pass" and record.verdict.why:
        return record.verdict.why.replace("\n", " ")
    return error_cell(record, width=1000)


def terminal_table(records: list[Record], width: int = TERMINAL_WIDTH, whole_whys: set[str] | None = None) -> str:
    """The verdict in at most `width` columns: scenario, W, arm, outcome and the why, cut to fit in the table and
    then listed whole under it, wrapped (the why is the column people read); with whole_whys, only those arms'
    (verify: the patch's; none's and upstream's stay their one line). The wide table (every number) stays in
    results/latest.md and `report --format wide`."""
    rows = [
        [
            r.scenario,
            str(r.world_size or "?"),
            r.arm,
            r.outcome,
            short_why(r).replace("|", "/"),
        ]
        for r in records
    ]
    fixed = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(TERMINAL_COLUMNS[:-1])]
    # Each column costs its width plus 3 ("| " before, " " after); the line ends with "|".
    room = max(width - sum(w + 3 for w in fixed) - 4, len(TERMINAL_COLUMNS[-1]))
    whole = []
    for r in rows:
        if len(r[-1]) > room:
            if whole_whys is None or r[2] in whole_whys:
                whole.append(_wrapped(f"{r[0]} x {r[2]}: {r[-1]}", width))
            r[-1] = r[-1][: room - 1] + "…"
    table = markdown_table(TERMINAL_COLUMNS, rows)
    return table + ("\nwhy, whole (cut above):\n" + "\n".join(whole) if whole else "")


def _wrapped(text: str, width: int) -> str:
    """One listed why, wrapped to `width`: its first line indented 2, the rest 4."""
    import textwrap

    return textwrap.fill(
        text, width, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False, break_long_words=True
    )


def terminal_report(records: list[Record], wide_text: str, whole_whys: set[str] | None = None) -> str:
    """What a run prints: the 120-column table, then the closing lines of the wide text that latest.md keeps."""
    closing = wide_text[wide_text.index("\n\n") :] if "\n\n" in wide_text else "\n"
    return f"{terminal_table(records, whole_whys=whole_whys)}{closing}every number: results/latest.md\n"


def versions_line(records: list[Record]) -> str:
    if not records:
        return ""
    v = records[0].stamp.versions or {}
    parts = [f"{k} {v[k]}" for k in ("python", "torch", "transformers", "verl") if v.get(k)]
    tree = records[0].stamp.verl_tree
    if tree and parts and parts[-1].startswith("verl "):
        parts[-1] += f" from {tree_words(tree)}"
    host = records[0].stamp.host
    commit = records[0].stamp.harness_commit
    line = ", ".join(parts) + (f"; host: {host}" if host else "") + (f"; harness {commit}" if commit else "")
    # The terminal's 120 columns: a tree's path can make the line longer, so it breaks between its parts.
    return "\n".join(textwrap.wrap(line, TERMINAL_WIDTH, subsequent_indent="  ", break_on_hyphens=False))


def tree_words(tree: VerlTree) -> str:
    """A verl source tree as a line names it: PATH@REF (commit), the ref left out where it is the commit itself."""
    commit = tree.commit or ""
    at = f"@{tree.ref}" if tree.ref and not commit.startswith(tree.ref) else ""
    sha = commit[:12] + ("-dirty" if tree.dirty else "")
    return f"{tree.path}{at}" + (f" ({sha})" if sha else "")


def summary_counts(records: list[Record]) -> str:
    """The outcomes counted ("2 error, 1 mismatch, 3 pass"), and how many records an earlier run's are (reuse.py)."""
    counts = {}
    for r in records:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    line = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: str(kv[0])))
    reused = sum(1 for r in records if r.stamp.reused_from)
    if reused:
        line += f" ({reused} of them reused from an earlier run with the same inputs: each record's reused_from)"
    return line


def release_cell(record: Record | None) -> str:
    """One scenario on one release under one arm, in a few words: the outcome and what decided it."""
    if record is None:
        return "-"
    outcome = record.outcome
    if outcome == "skipped":
        reason = record.verdict.skipped_reason or ""
        hunk = re.search(r"hunk #\d+", reason)
        if reason.startswith("does not apply"):
            return f"does not apply ({hunk[0]})" if hunk else "does not apply"
        return f"skipped ({reason[:40]})"
    if outcome == "error":
        why = (record.verdict.why or "").replace("|", "/")
        return f"error: {why[:60] + ('…' if len(why) > 60 else '') if why else error_cell(record, 48)}"
    if outcome == "mismatch":
        parity = record.measures.parity or Parity()
        return f"mismatch: grad {short_param(parity.grad_worst_param)} {num(parity.grad_worst_rel)}"
    return outcome or "-"


def release_table(records: list[Record], scenarios: list[str], candidate: str) -> str:
    """Release x scenario: as released / with the candidate, and the two facts read from the release's code."""
    by_key = {(r.stamp.release, r.scenario, r.arm): r for r in records}
    releases = list(dict.fromkeys(r.stamp.release for r in records))
    head = ["verl", "lm_head FSDP unit", "fused forward reads lm_head.weight"] + [
        f"{s}: as released / {candidate}" for s in scenarios
    ]
    rows = []
    for release in releases:
        facts = next(r.stamp.release_facts for r in records if r.stamp.release == release)
        cells = [
            f"{release_cell(by_key.get((release, s, 'upstream')))} / "
            f"{release_cell(by_key.get((release, s, candidate)))}"
            for s in scenarios
        ]
        rows.append(
            [
                release,
                f"{facts['lm_head_unit']['value']} ({facts['lm_head_unit']['where']})",
                f"{facts['lm_head_weight_read']['value']} ({facts['lm_head_weight_read']['where']})",
            ]
            + cells
        )
    return markdown_table(head, rows)


def logits_cell(record: Record) -> str:
    """The largest logits-shaped tensor as rows x vocab and bytes, "-" where there is no figure."""
    memory = measured_head_memory(record)
    if not memory:
        return "-"
    shape = memory.largest_vocab_tensor_shape
    return f"{math.prod(shape[:-1])}x{shape[-1]} {_size(memory.largest_vocab_tensor_bytes)}"


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"
