"""Pictures of a verdict, for people who would rather look than read: the scenario x arm outcome grid (none,
upstream, then the patch: each failing cell with its why, the picture a reviewer pastes under a PR), and the
failing runs' per-parameter gradient errors against the noise floor and the tolerance. SVG (text: diffable, sharp
at any size) and a PNG beside it (what a PR comment or a chat takes), drawn with matplotlib's Agg backend,
imported only when a picture is drawn or is about to be (import_in_background). Saved to their drawn extent: no
legend or label is cut off.
"""

from __future__ import annotations

import math
from pathlib import Path

from harness.records.measures import NoiseFloor, Parity, ToleranceUsed
from harness.records.results import Record
from harness.render.tables import short_param

OUTCOME_COLOURS = {
    "pass": "#4caf50",
    "mismatch": "#ff9800",
    "error": "#e53935",
    "hang": "#8e24aa",
    "skipped": "#bdbdbd",
}
ZERO_AT = 1e-10  # where an error of exactly 0 is drawn on the log axis (labelled as 0)
WHY_CHARS, WHY_LINES = 44, 9  # a failing cell's why, wrapped in the grid (a known failure's reference included)
ARM_ORDER = ("none", "upstream")  # before the patch(es): the order a reviewer reads a verdict in
MAX_GRAD_PANELS = 6  # failing runs drawn in the gradient picture


def import_in_background() -> None:
    """matplotlib imported on a thread of its own while the command's cells run (the driver only waits on them): its
    0.7 s import is then not part of a verify's closing lines, where the picture is drawn. A picture drawn before it
    is done waits for it (the import lock); without matplotlib (the dev group) the thread ends quietly, and the
    picture says why it was not drawn."""
    import threading

    def load():
        try:
            pyplot()
        except ImportError:
            pass

    threading.Thread(target=load, name="import matplotlib", daemon=True).start()


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small files, searchable, selectable
    import matplotlib.pyplot as plt

    return plt


def cell_label(record: Record) -> str:
    """The outcome and, for a failure, what failed (the worst parameter, or the error's type) and why."""
    outcome = record.outcome
    if outcome == "mismatch":
        parity = record.parity or Parity()
        failing = parity.failing_params()
        what = short_param(parity.grad_worst_param) if failing else (record.failures or [""])[0]
        return f"mismatch\n{what[:28]}" + _why_lines(record)
    if outcome == "error":
        return f"error\n{((record.error.type if record.error else None) or '')[:28]}" + _why_lines(record)
    return outcome


def _why_lines(record: Record) -> str:
    """The record's why, wrapped for a grid cell ("" without one)."""
    import textwrap

    if not record.why:
        return ""
    lines = textwrap.wrap(record.why, WHY_CHARS, break_on_hyphens=False)
    if len(lines) > WHY_LINES:
        lines = lines[: WHY_LINES - 1] + [lines[WHY_LINES - 1][: WHY_CHARS - 1] + "…"]
    return "\n" + "\n".join(lines)


def arm_order(records: list[Record]) -> list[str]:
    """The arms of the records: none, upstream, then the others in the order they ran."""
    arms = list(dict.fromkeys(r.arm for r in records))
    return [a for a in ARM_ORDER if a in arms] + [a for a in arms if a not in ARM_ORDER]


def outcome_grid(records: list[Record], path: Path, title: str = "") -> Path:
    """Scenario x arm (none, upstream, then the patch), coloured by outcome, each failing cell with its why (the
    last record of a cell wins: a rerun replaces its run)."""
    plt = pyplot()
    cells = {(r.scenario, r.arm): r for r in records}
    scenarios = list(dict.fromkeys(r.scenario for r in records))
    arms = arm_order(records)
    lines = max((cell_label(r).count("\n") + 1 for r in cells.values()), default=1)
    # Inches: room for the scenario labels, then a column wide enough for WHY_CHARS at 7 pt per arm.
    fig, ax = plt.subplots(figsize=(2.8 + 3.0 * len(arms), 0.9 + (0.2 + 0.13 * lines) * len(scenarios)))
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
    return save_figure(fig, plt, path)


def cells_w(cells: dict, scenario: str):
    return next((r.world_size for (s, _), r in cells.items() if s == scenario), "?")


def pick_runs(records: list[Record]) -> list[Record]:
    """The runs worth a gradient picture: the failing ones that have every parameter's error (mismatches; an
    error has no gradients), the last record of a cell winning; only where none fails, the first that has them."""
    cells = {(r.scenario, r.arm): r for r in records if r.parity and r.parity.grad_rel}
    with_grads = list(cells.values())
    failing = [r for r in with_grads if r.outcome == "mismatch"]
    return failing[:MAX_GRAD_PANELS] if failing else with_grads[:1]


def grad_errors(runs: list[Record], path: Path) -> Path:
    """Every parameter's relative gradient error (log scale), with the noise floor and the tolerance: one panel
    per run, stacked."""
    plt = pyplot()
    heights = [1.2 + 0.16 * len(r.parity.grad_rel if r.parity else {}) for r in runs]
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(8, sum(heights)), gridspec_kw={"height_ratios": heights}, squeeze=False
    )
    for record, ax in zip(runs, axes[:, 0]):
        _grad_panel(ax, record)
    return save_figure(fig, plt, path)


def _grad_panel(ax, record: Record) -> None:
    errors = record.parity.grad_rel if record.parity else {}
    tol = record.tolerance or ToleranceUsed()
    tolerance, floor = tol.grad_rel, (tol.noise_floor or NoiseFloor()).grad_rel
    names = sorted(errors, key=lambda n: as_float(errors[n]))
    values = [drawn(as_float(errors[n])) for n in names]
    over = [tolerance is not None and as_float(errors[n]) > tolerance for n in names]
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
    if any(as_float(errors[n]) == 0 for n in names):
        ax.axvline(ZERO_AT, color="#9e9e9e", linewidth=0.5, label="0 (exactly equal), drawn here")
    ax.set_xlabel("relative gradient error ||g - g_oracle|| / ||g_oracle|| (whole, unsharded gradient)")
    ax.set_title(
        f"{record.scenario} x {record.arm} (W={record.world_size}, {precision_shown(record)}): {record.outcome}",
        fontsize=9,
    )
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


def precision_shown(record: Record) -> str:
    """The precision a picture's title names: "?" for a record without settings."""
    return (record.settings.precision if record.settings else None) or "?"


def drawn(x: float) -> float:
    """Where an error sits on a log axis: 0 at ZERO_AT, a non-finite one (inf) at 1e6."""
    return min(max(x, ZERO_AT), 1e6)


def as_float(x) -> float:
    return math.inf if x == "inf" else float(x)


def save_figure(fig, plt, path: Path) -> Path:
    """The SVG at `path` and the PNG beside it, each cut to everything drawn (bbox_inches="tight": a legend
    placed outside the axes is kept whole)."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # No timestamp: the same records give the same file.
    fig.savefig(path, metadata={"Date": None}, bbox_inches="tight", pad_inches=0.1)
    fig.savefig(path.with_suffix(".png"), dpi=150, bbox_inches="tight", pad_inches=0.1)
    plt.close(fig)
    return path
