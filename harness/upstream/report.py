"""#6659's REPORT.md: issue-ready text whose every number is read from this invocation's
records (the harness's cells) and from the generated test's own runs; nothing here states a finding by itself.
The prose says how the mechanism works; a number that is missing from the records renders as "not measured"."""

from __future__ import annotations

from harness.records.measures import Parity
from harness.records.results import Record, other_all_gather_bytes
from harness.render.tables import RUN_COLUMNS, bytes_cell, error_cell, grad_cell, markdown_table, num, versions_line
from harness.upstream.regression_test import TEST_FILE_NAME

NOT_MEASURED = "not measured"
# The W=2 run under verl's default bf16 policy, through verl's engine (harness/commands/upstream.py REPORT_CELLS).
BF16_SCENARIO = "fsdp2-bf16"


def find(records: list[Record], scenario: str, arm: str) -> Record | None:
    return next((r for r in records if r.scenario == scenario and r.arm == arm), None)


def lm_head_grad_error(record: Record | None):
    """The lm_head gradient's relative error, from the record's per-parameter failures or its worst parameter."""
    if not record:
        return None
    parity = record.measures.parity or Parity()
    if parity.grad_worst_param == "lm_head.weight":
        return parity.grad_worst_rel
    return parity.grads_over_tolerance.get("lm_head.weight")


def _cell_row(record: Record) -> list[str]:
    parity = record.measures.parity or Parity()
    precision = (record.settings.precision if record.settings else None) or "?"
    return [
        record.scenario,
        str(record.world_size or "?"),
        precision,
        record.arm,
        record.outcome,
        error_cell(record, 64),
        num(parity.logprob_max_abs),
        grad_cell(parity),
        bytes_cell(other_all_gather_bytes(record)),
    ]


def cells_table(records: list[Record]) -> str:
    head = [
        *RUN_COLUMNS,
        "error / worst failure",
        "log-prob err",
        "worst grad rel err (param)",
        "extra all-gather bytes/rank",
    ]
    return markdown_table(head, [_cell_row(r) for r in records])


def generated_table(runs: list) -> str:
    """Per arm, each test of the generated file: passed / failed (first line of why)."""
    names = list(dict.fromkeys(n for run in runs for n in run.outcomes))
    head = ["test"] + [f"{run.arm} ({run.wall_s:.0f} s)" for run in runs]
    rows = []
    for name in names:
        cells = [name]
        for run in runs:
            outcome = run.outcomes.get(name, "not run")
            message = run.messages.get(name, "").replace("|", "/")
            cells.append(outcome if not message else f"{outcome}: {message[:70]}")
        rows.append(cells)
    return markdown_table(head, rows)


def _bf16_crash(records: list[Record]) -> str:
    record = find(records, BF16_SCENARIO, "upstream")
    if not record or not record.verdict.error:
        return NOT_MEASURED
    err = record.verdict.error
    return f"{err.type}: {err.message}"


def _generated_number(runs, arm: str, case: str, key: str):
    run = next((r for r in runs if r.arm == arm), None)
    ranks = ((run.numbers or {}).get(case) if run else None) or []
    if not ranks or "error" in ranks[0]:
        return None
    value = ranks[0].get(key)
    return value if key != "grad_rel" else (value or {}).get("lm_head.weight")


def findings(records: list[Record], runs: list, candidate: str) -> list[str]:
    """One bullet per finding the records support; a finding they do not support is not stated."""
    out = []
    before = [r for r in records if r.arm == "none" and r.verdict.error]
    if before:
        ranks = sorted({r.world_size for r in before})
        out.append(
            f"- Before #6659 (arm `none`) the FSDP2 runs crash, at W={', '.join(map(str, ranks))}: "
            f"`{error_cell(before[0], 120)}`."
        )
    up = find(records, "fsdp2-multigpu", "upstream")
    grad_err = lm_head_grad_error(up)
    if up and up.outcome == "mismatch" and grad_err is not None:
        out.append(
            f"- With #6659, at W={up.world_size} the lm_head gradient has a relative error of "
            f"{num(grad_err, '{:.3g}')} against a plain fp32 model (it is never reduced across ranks), and "
            f"each rank all-gathers {other_all_gather_bytes(up)} bytes outside FSDP's hooks."
        )
    bf16 = find(records, BF16_SCENARIO, "upstream")
    if bf16 and bf16.verdict.error:
        out.append(
            f"- With #6659, under verl's default bf16 mixed precision the step crashes: `{_bf16_crash(records)}`."
        )
    mine = [r for r in records if r.arm == candidate]
    if mine:
        passed = [r for r in mine if r.outcome == "pass"]
        out.append(
            f"- With `fix.diff` ({candidate}): {len(passed)} of {len(mine)} runs pass"
            + (
                "."
                if len(passed) == len(mine)
                else f"; not: {', '.join(r.scenario + ' ' + r.outcome for r in mine if r not in passed)}."
            )
        )
    for run in runs:
        failed = [n for n, o in run.outcomes.items() if o != "passed"]
        out.append(
            f"- The attached test under `{run.arm}`: "
            + (f"fails {', '.join(failed)}." if failed else f"passes all {len(run.outcomes)} tests.")
        )
    return out or [f"- {NOT_MEASURED}"]


def _numbers(records: list[Record], runs: list, candidate: str) -> list[str]:
    """The report's numbers section: the lm_head gradient error, the bytes gathered outside FSDP, the bf16 crash."""
    multi_up, multi_cand = find(records, "fsdp2-multigpu", "upstream"), find(records, "fsdp2-multigpu", candidate)
    grad_err = lm_head_grad_error(multi_up)
    extra = other_all_gather_bytes(multi_up)
    test_grad_err = _generated_number(runs, "upstream", "fp32", "grad_rel")
    over = ", ".join(
        sorted(multi_up.measures.parity.grads_over_tolerance if multi_up and multi_up.measures.parity else {})
    )
    return [
        f"- lm_head gradient relative error at W=2 with #6659: {num(grad_err, '{:.3g}')} (verl's engine, "
        f"fsdp2-multigpu; parameters over tolerance there: {over or '-'}); {num(test_grad_err, '{:.3g}')} in the "
        f"attached test.",
        f"- All-gather bytes per rank outside FSDP's own hooks at W=2: {bytes_cell(extra)}"
        f" with #6659 (the `full_tensor()` of the lm_head weight, half of it gathered from the other rank); "
        f"{bytes_cell(other_all_gather_bytes(multi_cand))} with the fix.",
        f"- bf16 (verl's default actor precision: MixedPrecisionPolicy param bf16, reduce fp32, bf16 autocast): "
        f"`{_bf16_crash(records)}`",
    ]


def _diagnosis(fix_check: str) -> list[str]:
    """How #6659's gather bypasses FSDP2's hooks, and what fix.diff does instead."""
    return [
        "`apply_fsdp2` (`_select_fsdp2_wrap_targets`) puts an untied `lm_head` in its own `fully_shard` unit. FSDP2 "
        "all-gathers a unit's parameters in that module's pre-forward hook and reduce-scatters their gradients in "
        "its post-backward hook, but the fused forward never calls `self.lm_head(...)`: it reads "
        "`self.lm_head.weight`, the sharded DTensor. #6659 gathers it with `full_tensor()`. The gradient of a "
        "`full_tensor()` flows back as if the full weight were replicated: each rank keeps its own shard of *its "
        "own* gradient, and FSDP's reduce-scatter, which only runs for gradients produced inside the unit's "
        "forward, never adds the other ranks' contributions. So at W>=2 `lm_head.weight.grad` holds one rank's "
        "share, not the average, and every step pays an all-gather outside FSDP's "
        "prefetching. Under mixed precision `full_tensor()` returns the fp32 sharded master weight, not FSDP's "
        "bf16 compute copy, and the fused backward multiplies it with bf16 activations: the dtype error above.",
        "",
        "`fix.diff` runs the fused head as an FSDP forward method of `lm_head` (`register_fsdp_forward_method`), "
        "so FSDP does for it what it does for `lm_head(...)`: all-gather in the param dtype, reshard after forward, "
        "reduce-scatter the gradient. " + fix_check,
        "",
        "The attached test judges a fix only by the model's outputs and gradients against a plain fp32 "
        "transformers model, never by how the fix works.",
    ]


def _ran_lines_section(ran_lines: list[str], candidate: str) -> list[str]:
    """Which of fix.diff's hunks ran in the harness's runs (commands/ran_lines.py): a hunk no run reached is one
    these runs say nothing about."""
    if not ran_lines:
        return []
    return [
        f"What of `fix.diff` ran in the `{candidate}` runs above, line by line and branch by branch:",
        "",
        "```",
        *ran_lines,
        "```",
        "",
    ]


def render_report(
    *,
    records: list[Record],
    runs: list,
    candidate: str,
    fix_check: str,
    releases_table: str,
    results_path: str,
    out_dir: str,
    ran_lines: list[str] = (),
) -> str:
    versions = versions_line(records) or NOT_MEASURED
    lines = [
        "# FSDP2 + fused kernels on an untied Qwen3-VL: what #6659's `full_tensor()` does to the lm_head",
        "",
        "verl PR #6659 gathers the sharded `lm_head.weight` with `full_tensor()` in the fused log-prob forward "
        "(`use_fused_kernels=True`, torch backend) of Qwen3-VL under FSDP2. Measured here (details below):",
        "",
        *findings(records, runs, candidate),
        "",
        "## Versions",
        "",
        versions,
        "",
        "## Reproduce",
        "",
        f"    pytest {TEST_FILE_NAME}",
        "",
        "(self-contained: torch, transformers and verl only, 2 processes on gloo, CPU; in verl's tree it would sit "
        f"as `tests/models/{TEST_FILE_NAME}`). With the fix: `git apply fix.diff` in the directory holding `verl/`.",
        "",
        "## What the attached test gives",
        "",
        generated_table(runs) if runs else NOT_MEASURED,
        "",
        "(Each column a verl, as `harness upstream` names it: `release` the installed one, with #6659; `arm:none` it "
        "without #6659; `release+fix` it with `fix.diff`; `git:REF` a commit of verl's repository, in an environment "
        "of its own. Wall time on this host in brackets.)",
        "",
        "## The harness's runs (verl's own engine, oracle: plain fp32 transformers)",
        "",
        cells_table(records) if records else NOT_MEASURED,
        "",
        f"Records: `{results_path}`.",
        "",
        *_ran_lines_section(ran_lines, candidate),
        "## The numbers",
        "",
        *_numbers(records, runs, candidate),
        "",
        "## Releases affected",
        "",
        "From the harness's `make releases` (each release in its own environment; the fix applies to 0.9.1):",
        "",
        releases_table or NOT_MEASURED,
        "",
        "## Diagnosis",
        "",
        *_diagnosis(fix_check),
        "",
        f"Generated by fsdp2-harness `make upstream` into `{out_dir}`.",
        "",
    ]
    return "\n".join(lines)
