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

from harness.records.measures import NoiseFloor, ToleranceUsed
from harness.records.results import FAILING_OUTCOMES, Record
from harness.render.tables import short_param
from harness.render.untrusted import terminal_text

OUTCOME_COLOURS = {
    "pass": "#4caf50",
    "mismatch": "#ff9800",
    "error": "#e53935",
    "hang": "#8e24aa",
    "skipped": "#bdbdbd",
}
ZERO_AT = 1e-10  # where an error of exactly 0 is drawn on the log axis (labelled as 0)
ARM_ORDER = ("none", "upstream")  # before the patch(es): the order a reviewer reads a verdict in
MAX_GRAD_PANELS = 6  # failing runs drawn in the gradient picture


def import_in_background() -> None:
    """matplotlib imported on a thread of its own while the command's cells run (the driver only waits on them): its
    0.7 s import is then not part of a verify's closing lines, where the picture is drawn. A picture drawn before it
    is done waits for it (the import lock); without matplotlib (the dev group) the thread ends quietly, and the
    picture says why it was not drawn."""
    import threading

    def load():
        from harness.python_ast import PARSE_LOCK

        try:
            with PARSE_LOCK:  # matplotlib's import parses rcParams strings with ast (harness/python_ast.py)
                pyplot()
        except ImportError:
            pass

    threading.Thread(target=load, name="import matplotlib", daemon=True).start()


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small files, searchable, selectable
    # A rank's message may hold '$': text is drawn as written, never parsed as mathtext (which can raise on it).
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


MAX_INCHES = 13.0  # every picture at most this tall: 1,950 px at the PNG's 150 dpi (issue 49: readable as is)
CAUSE_CHARS, CAUSE_LINES = 120, 2  # a cause in the legend under the grid, wrapped
MAX_CAUSES = 14  # causes listed under the grid; the rest counted


def cell_label(record: Record, cause: int | None = None) -> str:
    """The outcome and, for a failure, the number of its cause in the legend under the grid."""
    if record.outcome in FAILING_OUTCOMES and cause is not None:
        return f"{record.outcome} [{cause}]"
    return record.outcome


def causes_of(records: list[Record]) -> list[tuple[str, list[Record]]]:
    """The failing cells grouped by cause (records/record_cause.py cause_of: its kind and subject), each group with its
    words (render/cause_words.py), the patch's causes first (arms other than none and upstream), then by how many cells
    each explains."""
    from harness.records.record_cause import cause_of
    from harness.render.cause_words import grouped

    groups = grouped([r for r in records if r.outcome in FAILING_OUTCOMES], cause_of)

    def order(item):
        cause, rs = item
        return (not any(r.arm not in ARM_ORDER for r in rs), -len(rs), cause)

    return sorted(groups, key=order)


def _cause_legend(causes: list[tuple[str, list[Record]]]) -> list[str]:
    """A line (or two) per cause: its number, the words, and which cells of which arm it explains."""
    import textwrap

    lines = []
    for i, (cause, rs) in enumerate(causes[:MAX_CAUSES], 1):
        by_arm: dict[str, list[str]] = {}
        for r in rs:
            by_arm.setdefault(r.arm, []).append(r.scenario)
        cells = "; ".join(
            f"{arm}: {names[0]}" if len(names) == 1 else f"{arm}: {len(names)} scenarios"
            for arm, names in by_arm.items()
        )
        # A rank's words: its control characters and lone surrogates escaped (the font cannot draw a surrogate).
        legend = terminal_text(f"[{i}] {cause} ({cells})", keep="")
        wrapped = textwrap.wrap(legend, CAUSE_CHARS, subsequent_indent="     ")
        if len(wrapped) > CAUSE_LINES:
            wrapped = wrapped[: CAUSE_LINES - 1] + [wrapped[CAUSE_LINES - 1][: CAUSE_CHARS - 1] + "…"]
        lines += wrapped
    if len(causes) > MAX_CAUSES:
        lines.append(f"+{len(causes) - MAX_CAUSES} more causes: the verify's table and records")
    return lines


def arm_order(records: list[Record]) -> list[str]:
    """The arms of the records: none, upstream, then the others in the order they ran."""
    arms = list(dict.fromkeys(r.arm for r in records))
    return [a for a in ARM_ORDER if a in arms] + [a for a in arms if a not in ARM_ORDER]


def outcome_grid(records: list[Record], path: Path, title: str = "") -> Path:
    """Scenario x arm (none, upstream, then the patch), coloured by outcome, each failing cell numbered by its
    cause, the causes listed under the grid (the last record of a cell wins: a rerun replaces its run). At most
    MAX_INCHES tall whatever the number of scenarios: the rows get thinner, never the picture taller."""
    plt = pyplot()
    cells = {(r.scenario, r.arm): r for r in records}
    scenarios = list(dict.fromkeys(r.scenario for r in records))
    arms = arm_order(records)
    causes = causes_of(list(cells.values()))
    number = {id(r): i for i, (_, rs) in enumerate(causes[:MAX_CAUSES], 1) for r in rs}
    legend = _cause_legend(causes)
    legend_inches = 0.16 * len(legend) + 0.1
    key_inches, top_inches = 0.45, 0.9  # the outcome colours' key under the grid; the title and arm names above
    row = min(0.3, max(0.08, (MAX_INCHES - top_inches - key_inches - legend_inches) / max(len(scenarios), 1)))
    font = max(3.5, min(7.0, row * 72 * 0.5))
    height = top_inches + row * len(scenarios) + key_inches + legend_inches
    fig = plt.figure(figsize=(2.8 + 1.9 * len(arms), height))
    bottom = (key_inches + legend_inches) / height
    ax = fig.add_axes((0.3, bottom, 0.68, row * len(scenarios) / height))
    for y, scenario in enumerate(scenarios):
        for x, arm in enumerate(arms):
            record = cells.get((scenario, arm))
            colour = OUTCOME_COLOURS.get(record.outcome, "white") if record else "white"
            ax.add_patch(plt.Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="white", linewidth=1))
            label = cell_label(record, number.get(id(record))) if record else "not run"
            ax.text(x + 0.5, y + 0.5, label, ha="center", va="center", fontsize=font, color="black")
    ax.set_xlim(0, len(arms))
    ax.set_ylim(len(scenarios), 0)
    ax.set_xticks([x + 0.5 for x in range(len(arms))], arms, fontsize=7)
    ax.xaxis.tick_top()
    ax.set_yticks(
        [y + 0.5 for y in range(len(scenarios))], [f"{s} (W={cells_w(cells, s)})" for s in scenarios], fontsize=font
    )
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=c) for c in OUTCOME_COLOURS.values()]
    fig.legend(
        handles,
        OUTCOME_COLOURS,
        loc="upper center",
        bbox_to_anchor=(0.5, (key_inches + legend_inches - 0.05) / height),
        ncol=len(OUTCOME_COLOURS),
        fontsize=7,
        frameon=False,
    )
    if title:
        ax.set_title(title, fontsize=9, pad=14)
    if legend:
        fig.text(0.02, legend_inches / height, "\n".join(legend), fontsize=6.5, va="top", family="monospace")
    return save_figure(fig, plt, path)


def verify_picture(records: list[Record], arm: str) -> str:
    """The picture of a verify a reviewer pastes under a PR: per scenario none / upstream / the patch, the patch's
    failures grouped by cause (outcome_grid), SVG and PNG in the results directory, named by the arm and the UTC time
    of the run (a later verify never overwrites it), with verify-<arm>.png/.svg the latest one's copy; the line that
    says where."""
    import shutil
    from datetime import datetime, timezone

    from harness.paths import results_dir, shown_path

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path, n = results_dir() / f"verify-{arm}-{stamp}.svg", 1
    while path.exists() or path.with_suffix(".png").exists():  # two verifies in one second: each its own picture
        n += 1
        path = results_dir() / f"verify-{arm}-{stamp}-{n}.svg"
    try:
        path = outcome_grid(records, path, title=f"verify {arm} ({stamp})")
    except ImportError as exc:  # matplotlib is in the dev group; imported only to draw
        return f"picture: not drawn ({exc})"
    latest = results_dir() / f"verify-{arm}.svg"
    for suffix in (".svg", ".png"):
        shutil.copyfile(path.with_suffix(suffix), latest.with_suffix(suffix))
    return (
        f"picture: {shown_path(path.with_suffix('.png'))} (and .svg; latest: {shown_path(latest.with_suffix('.png'))})"
    )


def cells_w(cells: dict, scenario: str):
    return next((r.world_size for (s, _), r in cells.items() if s == scenario), "?")


MAX_PARAMS = 28  # parameters drawn per gradient panel: the worst ones (the others below them, counted)


def pick_runs(records: list[Record]) -> list[Record]:
    """The runs worth a gradient picture: the failing ones that have every parameter's error (mismatches; an
    error has no gradients), one per cause (causes_of), the patch's before none's and upstream's, the last record
    of a cell winning; only where none fails, the first that has them."""
    from harness.records.record_cause import cause_of

    cells = {(r.scenario, r.arm): r for r in records if r.measures.parity and r.measures.parity.grad_rel}
    with_grads = list(cells.values())
    failing = sorted((r for r in with_grads if r.outcome == "mismatch"), key=lambda r: r.arm in ARM_ORDER)
    one_per_cause = list({cause_of(r).key(): r for r in reversed(failing)}.values())[::-1]
    return one_per_cause[:MAX_GRAD_PANELS] if failing else with_grads[:1]


def _panel_inches(record: Record) -> float:
    return 1.2 + 0.16 * min(len(record.measures.parity.grad_rel if record.measures.parity else {}), MAX_PARAMS)


def grad_errors(runs: list[Record], path: Path) -> Path:
    """Every parameter's relative gradient error (log scale; the MAX_PARAMS worst), with the noise floor and the
    tolerance: one panel per run, stacked, as many as fit in MAX_INCHES."""
    plt = pyplot()
    kept, total = [], 0.0
    for r in runs:
        if kept and total + _panel_inches(r) > MAX_INCHES:
            break
        kept.append(r)
        total += _panel_inches(r)
    heights = [_panel_inches(r) for r in kept]
    fig, axes = plt.subplots(
        len(kept), 1, figsize=(8, sum(heights)), gridspec_kw={"height_ratios": heights}, squeeze=False
    )
    for record, ax in zip(kept, axes[:, 0]):
        _grad_panel(ax, record)
    return save_figure(fig, plt, path)


def _grad_panel(ax, record: Record) -> None:
    errors = record.measures.parity.grad_rel if record.measures.parity else {}
    tol = record.tolerance or ToleranceUsed()
    tolerance, floor = tol.grad_rel, (tol.noise_floor or NoiseFloor()).grad_rel
    names = sorted(errors, key=lambda n: as_float(errors[n]))
    below = len(names) - MAX_PARAMS
    names = names[-MAX_PARAMS:]  # the worst: the failing ones are among them
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
    plain_log_labels(ax.xaxis)
    ax.set_yticks(range(len(names)), [short_param(n) for n in names], fontsize=6)
    ax.set_ylim(-0.8, len(names) - 0.2)
    if floor:
        ax.axvline(floor, color="#607d8b", linestyle=":", label=f"noise floor {floor:.2g}")
    if tolerance:
        ax.axvline(tolerance, color="#e53935", linestyle="--", label=f"tolerance {tolerance:.2g}")
    if any(as_float(errors[n]) == 0 for n in names):
        ax.axvline(ZERO_AT, color="#9e9e9e", linewidth=0.5, label="0 (exactly equal), drawn here")
    more = f"; {below} smaller ones not drawn" if below > 0 else ""
    ax.set_xlabel(f"relative gradient error ||g - g_oracle|| / ||g_oracle|| (whole, unsharded gradient){more}")
    ax.set_title(
        f"{record.scenario} x {record.arm} (W={record.world_size}, {precision_shown(record)}): {record.outcome}",
        fontsize=9,
    )
    ax.grid(True, axis="x", which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a record without its tolerance draws no line to name
        ax.legend(fontsize=7, loc="lower right")


def plain_log_labels(axis) -> None:
    """A log axis labelled in plain text (1e-06): its default labels are mathtext ($\\mathdefault{10^{-6}}$), which
    pyplot() turns off for every text (a rank's '$'), so they were drawn as that source, run together."""
    from matplotlib.ticker import LogFormatter, NullFormatter

    axis.set_major_formatter(LogFormatter(labelOnlyBase=True))
    axis.set_minor_formatter(NullFormatter())


def precision_shown(record: Record) -> str:
    """The precision a picture's title names: "?" for a record without settings."""
    return (record.settings.precision if record.settings else None) or "?"


def drawn(x: float) -> float:
    """Where an error sits on a log axis: 0 at ZERO_AT, a non-finite one (inf) at 1e6."""
    return min(max(x, ZERO_AT), 1e6)


def as_float(x) -> float:
    return math.inf if x == "inf" else float(x)


def save_figure(fig, plt, path: Path) -> Path:
    """The SVG at `path` and the PNG beside it, each cut to everything drawn (the tight box: a legend placed outside
    the axes is kept whole)."""
    if not fig.axes or fig.axes[0].get_subplotspec() is not None:  # a grid placed by hand keeps its places
        fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # The tight box found once, for both files: savefig's bbox_inches="tight" finds it by drawing the figure once more
    # in each save, and so does any layout engine left on the figure (tight_layout leaves a placeholder one, its
    # layout done). Found as savefig finds it: the figure drawn without rendering, everything's extent, 0.1 in around.
    fig.set_layout_engine(None)
    fig.draw_without_rendering()
    tight = fig.get_tightbbox(fig.canvas.get_renderer()).padded(0.1)
    # No timestamp: the same records give the same file.
    fig.savefig(path, metadata={"Date": None}, bbox_inches=tight)
    fig.savefig(path.with_suffix(".png"), dpi=150, bbox_inches=tight)
    plt.close(fig)
    return path
