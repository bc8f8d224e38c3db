"""Pictures of a verdict, for people who would rather look than read: the scenario x arm outcome grid, and one
run's per-parameter gradient errors against the noise floor and the tolerance. SVG (text: diffable, sharp at any
size), drawn with matplotlib's Agg backend, imported only when a picture is drawn.
"""

from __future__ import annotations

import math
from pathlib import Path

from harness.render.tables import short_param
from harness.spec.results import Record

OUTCOME_COLOURS = {
    "pass": "#4caf50",
    "mismatch": "#ff9800",
    "error": "#e53935",
    "hang": "#8e24aa",
    "skipped": "#bdbdbd",
}
ZERO_AT = 1e-10  # where an error of exactly 0 is drawn on the log axis (labelled as 0)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small files, searchable, selectable
    import matplotlib.pyplot as plt

    return plt


def cell_label(record: Record) -> str:
    """The outcome and, for a failure, what failed: the worst parameter, or the error's type."""
    outcome = record.outcome
    if outcome == "mismatch":
        parity = record.parity or {}
        failing = list(parity.get("grads_over_tolerance") or {}) + list(parity.get("missing_grads") or [])
        what = short_param(parity.get("grad_worst_param")) if failing else (record.failures or [""])[0]
        return f"mismatch\n{what[:28]}"
    if outcome == "error":
        return f"error\n{((record.error.type if record.error else None) or '')[:28]}"
    return outcome


def outcome_grid(records: list[Record], path: Path, title: str = "") -> Path:
    """Scenario x arm, coloured by outcome (the last record of a cell wins: a rerun replaces its run)."""
    plt = _pyplot()
    cells = {(r.scenario, r.arm): r for r in records}
    scenarios = list(dict.fromkeys(r.scenario for r in records))
    arms = list(dict.fromkeys(r.arm for r in records))
    fig, ax = plt.subplots(figsize=(1.2 + 2.3 * len(arms), 0.9 + 0.48 * len(scenarios)))
    for y, scenario in enumerate(scenarios):
        for x, arm in enumerate(arms):
            record = cells.get((scenario, arm))
            colour = OUTCOME_COLOURS.get(record.outcome, "white") if record else "white"
            ax.add_patch(plt.Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="white", linewidth=2))
            ax.text(
                x + 0.5,
                y + 0.5,
                cell_label(record) if record else "not run",
                ha="center",
                va="center",
                fontsize=7,
                color="black",
            )
    ax.set_xlim(0, len(arms))
    ax.set_ylim(len(scenarios), 0)
    ax.set_xticks([x + 0.5 for x in range(len(arms))], arms, fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(
        [y + 0.5 for y in range(len(scenarios))], [f"{s} (W={cells_w(cells, s)})" for s in scenarios], fontsize=8
    )
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=c) for c in OUTCOME_COLOURS.values()]
    ax.legend(
        handles,
        OUTCOME_COLOURS,
        loc="upper center",
        bbox_to_anchor=(0.5, 0),
        ncol=len(OUTCOME_COLOURS),
        fontsize=7,
        frameon=False,
    )
    if title:
        ax.set_title(title, fontsize=9, pad=22)
    return _save(fig, plt, path)


def cells_w(cells: dict, scenario: str):
    return next((r.world_size for (s, _), r in cells.items() if s == scenario), "?")


def pick_run(records: list[Record]) -> Record | None:
    """The run worth a picture: the first mismatch (it has a gradient out of tolerance), else the first with
    every parameter's error recorded."""
    with_grads = [r for r in records if (r.parity or {}).get("grad_rel")]
    return next((r for r in with_grads if r.outcome == "mismatch"), with_grads[0] if with_grads else None)


def grad_errors(record: Record, path: Path) -> Path:
    """Every parameter's relative gradient error (log scale), with the noise floor and the tolerance."""
    plt = _pyplot()
    errors = (record.parity or {}).get("grad_rel") or {}
    tol = record.tolerance or {}
    tolerance, floor = tol.get("grad_rel"), (tol.get("noise_floor") or {}).get("grad_rel")
    names = sorted(errors, key=lambda n: _value(errors[n]))
    values = [min(max(_value(errors[n]), ZERO_AT), 1e6) for n in names]  # inf (non-finite) drawn at 1e6
    over = [tolerance is not None and _value(errors[n]) > tolerance for n in names]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.16 * len(names)))
    ax.scatter(
        values,
        range(len(names)),
        s=14,
        zorder=3,
        c=[OUTCOME_COLOURS["mismatch"] if o else OUTCOME_COLOURS["pass"] for o in over],
    )
    ax.set_xscale("log")
    ax.set_yticks(range(len(names)), [short_param(n) for n in names], fontsize=6)
    ax.set_ylim(-0.8, len(names) - 0.2)
    if floor:
        ax.axvline(floor, color="#607d8b", linestyle=":", label=f"noise floor {floor:.2g}")
    if tolerance:
        ax.axvline(tolerance, color="#e53935", linestyle="--", label=f"tolerance {tolerance:.2g}")
    if any(_value(errors[n]) == 0 for n in names):
        ax.axvline(ZERO_AT, color="#9e9e9e", linewidth=0.5, label="0 (exactly equal), drawn here")
    ax.set_xlabel("relative gradient error ||g - g_oracle|| / ||g_oracle|| (whole, unsharded gradient)")
    ax.set_title(
        f"{record.scenario} x {record.arm} (W={record.world_size}, "
        f"{(record.settings or {}).get('precision', '?')}): {record.outcome}",
        fontsize=9,
    )
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, plt, path)


def _value(x) -> float:
    return math.inf if x == "inf" else float(x)


def _save(fig, plt, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Date": None})  # no timestamp: the same records give the same file
    plt.close(fig)
    return path
