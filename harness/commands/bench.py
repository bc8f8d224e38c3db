"""bench (`make bench`): what each arm costs in lm_head collectives, measured on the tiny model and projected onto
real Qwen3-VL sizes by the formula of plan/lm_head_cost.py; with --real-size, the lm_head unit alone measured at
those sizes (commands/bench_head.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.errors import EXIT_OK
from harness.plan.lm_head_cost import BF16, FP32, RealModel, lm_head_bytes, real_models
from harness.render.untrusted import report_text

if TYPE_CHECKING:  # the CLI imports this module for its default bandwidth: the record models load when a table is made
    from harness.records.results import CommSummary, Record

DEFAULT_BANDWIDTH_GBPS = 300.0  # GB/s per GPU, a typical NVLink (H100 SXM ~450 GB/s per direction); a flag

# How each arm gets the lm_head weight. Arms not listed are measured but not projected.
ARM_PATHS = {
    "upstream": "full_tensor",
    "cast-full-tensor": "full_tensor",
    "fsdp2-lmhead-forward": "fsdp",
    "baseline": "fsdp",
}


def measured_lm_head_bytes(comm: CommSummary) -> dict:
    """lm_head's share of a record's collectives (CommSummary.lm_head_bytes), per kind and in total."""
    out = {kind: comm.lm_head_bytes(kind) for kind in ("all_gather", "reduce_scatter")}
    out["total"] = out["all_gather"] + out["reduce_scatter"]
    return out


def projection_rows(
    models: list[RealModel], worlds=(8, 64), bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS, param_bytes: int = BF16
) -> list[dict]:
    rows = []
    for model in models:
        if model.tie_word_embeddings:
            # lm_head is not a unit of its own: neither path applies, at any world size.
            rows.append(
                {
                    "model": model.name,
                    "params_b": model.params_b,
                    "tied": True,
                    "world": "any",
                    "step": "any",
                    "full_tensor (upstream, fp32 gather)": None,
                    "FSDP path (candidate, param-dtype gather)": None,
                }
            )
            continue
        for world in worlds:
            for forward_only in (False, True):
                row = {
                    "model": model.name,
                    "params_b": model.params_b,
                    "tied": model.tie_word_embeddings,
                    "lm_head_melems": model.vocab_size * model.hidden_size / 1e6,
                    "world": world,
                    "step": "forward-only" if forward_only else "train",
                }
                for label, path, pbytes in (
                    ("full_tensor (upstream, fp32 gather)", "full_tensor", param_bytes),
                    ("FSDP path (candidate, param-dtype gather)", "fsdp", param_bytes),
                ):
                    b = lm_head_bytes(
                        path, model.vocab_size, model.hidden_size, world, param_bytes=pbytes, forward_only=forward_only
                    )
                    row[label] = {**b, "time_ms": b["total"] / (bandwidth_gbps * 1e9) * 1e3}
                rows.append(row)
    return rows


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f}"


def projection_table(rows: list[dict], bandwidth_gbps: float) -> str:
    from harness.render.chart import PATH_COLUMNS as labels
    from harness.render.tables import markdown_table

    head = ["model", "W", "step"] + [
        f"{label}: MiB/rank (AG+RS), ms @ {bandwidth_gbps:g} GB/s, MiB held fwd->bwd" for label in labels
    ]
    lines = []
    for r in rows:
        cells = [r["model"] + (" (tied: unaffected)" if r["tied"] else ""), str(r["world"]), r["step"]]
        for label in labels:
            v = r[label]
            cells.append(
                "n/a"
                if v is None
                else f"{_mib(v['total'])} ({_mib(v['all_gather'])}+{_mib(v['reduce_scatter'])}), "
                f"{v['time_ms']:.2f} ms, {_mib(v['held_fwd_to_bwd'])}"
            )
        lines.append(cells)
    return markdown_table(head, lines)


def measured_table(records: list[Record]) -> str:
    from harness.records.measures import Settings
    from harness.render.tables import RUN_COLUMNS, markdown_table

    head = [
        *RUN_COLUMNS,
        "lm_head AG+RS bytes/rank",
        "formula",
        "vs FSDP baseline",
        "gather dtype",
        "held fwd->bwd",
        "step ms median [min-max]",
        "baseline ms",
    ]
    lines = []
    for r in records:
        measures = r.measures
        comm = measures.comm
        settings = r.settings or Settings()
        base_comm = measures.baseline.comm if measures.baseline else None
        cell = [r.scenario, str(r.world_size), settings.precision or "?", r.arm, r.outcome]
        if not comm:
            lines.append(
                cell + [r.verdict.error.type if r.verdict.error else "-"] + ["-"] * (len(head) - len(cell) - 1)
            )
            continue
        mine = measured_lm_head_bytes(comm)
        base_bytes = measured_lm_head_bytes(base_comm)["total"] if base_comm else None
        formula = "-"
        path = ARM_PATHS.get(r.arm)
        dims = measures.lm_head_shape
        if path and dims:
            pbytes = BF16 if settings.precision == "bf16-mixed" else FP32
            expect = lm_head_bytes(
                path,
                dims[0],
                dims[1],
                r.world_size,
                param_bytes=pbytes,
                forward_only=settings.forward_only or False,
            )["total"]
            formula = "=" if expect == mine["total"] else f"expected {expect}"
        other_dtypes = comm.lm_head_dtypes()
        st, bt = measures.step_time, measures.baseline.step_time if measures.baseline else None
        lines.append(
            cell
            + [
                f"{mine['total']:,}",
                formula,
                "-" if not base_bytes else f"{mine['total'] / base_bytes:.2f}x",
                ",".join(other_dtypes) or "-",
                "-" if measures.saved_lm_head_bytes is None else f"{measures.saved_lm_head_bytes:,}",
                "-" if not st else f"{st.median_s * 1e3:.1f} [{st.min_s * 1e3:.1f}-{st.max_s * 1e3:.1f}]",
                "-" if not bt else f"{bt.median_s * 1e3:.1f}",
            ]
        )
    return markdown_table(head, lines)


# Arms by name or diff path. cast-full-tensor (a wrong-patch fixture) stands in for "upstream under bf16":
# upstream crashes there, this variant gathers the same fp32 weight and then casts it.
BENCH_PLAN = [  # (scenario, arms): what `make bench` measures
    ("direct-multigpu", ("upstream", "fsdp2-lmhead-forward")),
    ("fsdp2-multigpu-4", ("upstream", "fsdp2-lmhead-forward")),
    ("fsdp2-bf16", ("tests/fixtures/wrong_patches/cast-full-tensor.diff", "fsdp2-lmhead-forward")),
    ("ref-forward-only", ("upstream", "fsdp2-lmhead-forward")),
]


def cmd_bench(args) -> int:
    """Measured lm_head collective cost per arm (tiny model, repeated steps) and its projection to real sizes; with
    --real-size (or --head-size), the lm_head unit alone measured at those sizes (commands/bench_head.py)."""
    from harness.commands.bench_head import DEFAULT_TOKENS, PRECISIONS, REAL_HEAD_WORLDS, head_cells, run_head_bench
    from harness.errors import UsageError
    from harness.paths import results_dir, shown_path
    from harness.render.head_table import head_table

    worlds = getattr(args, "head_world", None) or list(REAL_HEAD_WORLDS)
    tokens = getattr(args, "head_tokens", None) or DEFAULT_TOKENS
    cells = head_cells(
        getattr(args, "real_size", False),
        getattr(args, "head_size", None) or [],
        worlds,
        tokens,
        getattr(args, "head_precision", None) or list(PRECISIONS),
    )
    head_only = getattr(args, "head_only", False)
    if head_only and not cells:
        raise UsageError("--head-only: no head cells asked for (add --real-size or --head-size HIDDENxVOCAB)")
    text = "" if head_only else _scenario_bench(args)
    if cells:
        rows, result = run_head_bench(cells, args.head_timeout_s)
        text += (
            f"## The lm_head unit alone (each path a cell of its own, one step after a warm-up; formula: "
            f"lm_head_bytes, the projection's formula, for the same size, W and precision)\n\n{head_table(rows)}\n"
            f"records: {shown_path(result.path)}\n"
        )
    (results_dir() / ("bench-head.md" if head_only else "bench.md")).write_text(report_text(text), encoding="utf-8")
    print(text)
    return EXIT_OK


def _scenario_bench(args) -> str:
    """The tiny model's cells of BENCH_PLAN and the projection: the text of results/bench.md."""
    from harness.inputs.scenario import load_all
    from harness.paths import ROOT, results_dir, shown_path
    from harness.plan.arms import resolve_arm
    from harness.records.store import host_description
    from harness.render.chart import chart
    from harness.run.runner import run_plan

    scenarios = {s.name: s for s in load_all()}
    cells = []
    for name, arm_refs in BENCH_PLAN:
        scenario = scenarios[name].model_copy(update={"repeat": args.repeat, "warmup": 1})
        cells += [(scenario, resolve_arm(str(ROOT / ref) if ref.endswith(".diff") else ref)) for ref in arm_refs]
    result = run_plan("bench", cells, jobs=args.jobs)
    records = result.records
    rows = projection_rows(real_models(), worlds=tuple(args.world), bandwidth_gbps=args.bandwidth)
    png = chart(rows, results_dir() / "bench-lm-head.png", args.bandwidth, world=max(args.world))
    return (
        f"## Measured (tiny Qwen3-VL, {records[0].stamp.host or host_description()}; "
        f"{args.repeat} timed steps after 1 warm-up)\n\n{measured_table(records)}\n\n"
        f"## Projected per rank and step (bf16 params, fp32 reduce; {args.bandwidth:g} GB/s)\n\n"
        f"{projection_table(rows, args.bandwidth)}\n\n"
        f"chart: {shown_path(png)}; records: {shown_path(result.path)}\n\n"
    )
