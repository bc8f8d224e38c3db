"""The table of `bench --real-size`: one row per way of computing the lm_head unit alone (commands/bench_head.py's
rows: the record's figures beside the formula and the memory estimate for the same size)."""

from __future__ import annotations

from harness.render.tables import markdown_table

HEAD = [
    "head (H x V)",
    "W",
    "precision",
    "tokens/rank",
    "path",
    "outcome",
    "grad rel err (fp32 ref)",
    "AG+RS MiB/rank",
    "formula MiB",
    "gather dtype",
    "held fwd->bwd MiB: weight-sized / all",
    "formula held MiB",
    "peak RSS MiB/rank: over step / process (VmHWM)",
    "estimate MiB/rank (head_memory_model.MEASURED_PEAK_MIB)",
    "step s",
    "collective ms",
]


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f}"


def _measured(r: dict) -> list[str]:
    f = r["formula"]
    return [
        r["outcome"],
        f"{r['grad_rel']:.2g}",
        f"{_mib(r['moved'])} ({_mib(r['all_gather'])}+{_mib(r['reduce_scatter'])})",
        "=" if f["total"] == r["moved"] else _mib(f["total"]),
        ",".join(r["dtypes"]) or "-",
        f"{_mib(r['held_weight_sized'])} / {_mib(r['held_all'])}",
        _mib(f["held_fwd_to_bwd"]),
        f"{_mib(r['peak_over_step'])} / {_mib(r['peak_rss_process'])}",
        _mib(r["estimate_per_rank"]),
        f"{r['step_s']:.2f}",
        f"{r['collective_ms']:.0f}",
    ]


def head_table(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        c = r["cell"]
        cells = [f"{c.name} ({c.hidden} x {c.vocab})", str(c.world), c.precision, str(c.tokens), r["path"]]
        if "skipped" in r or "error" in r:
            why = r.get("skipped") or r.get("error", "")
            cells += ["skipped" if "skipped" in r else r["outcome"], why] + ["-"] * (len(HEAD) - len(cells) - 2)
        else:
            cells += _measured(r)
        lines.append(cells)
    return markdown_table(HEAD, lines)
