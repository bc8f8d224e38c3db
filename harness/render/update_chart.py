"""The training update as a picture (records of scenarios with `steps`): per optimizer step, the relative update
error of the parameters that were worst anywhere, and the error of each of verl's metrics, with the tolerances
drawn in. Drift over steps reads faster from a curve than from a table."""

from __future__ import annotations

from pathlib import Path

from harness.records.measures import UpdateStepNumbers, UpdateToleranceUsed
from harness.records.results import Record
from harness.render.pictures import (
    as_float,
    drawn,
    plain_log_labels,
    precision_shown,
    pyplot,
    save_figure,
    short_param,
)

WORST_SHOWN = 5


def pick_update_run(records: list[Record]) -> Record | None:
    """The update run worth a picture: the first that fails on its numbers, else the first with an update."""
    updates = [r for r in records if r.measures.update and r.measures.update.steps]
    return next((r for r in updates if r.outcome == "mismatch"), updates[0] if updates else None)


def _metric_error(step: UpdateStepNumbers, name: str):
    """A metric's error at one optimizer step; a step without the metric draws at 0."""
    metric = step.metrics.get(name)
    return metric.error if metric is not None and metric.error is not None else 0.0


def update_errors(record: Record, path: Path) -> Path:
    """Two panels over the optimizer steps: the worst parameters' update errors, and verl's metrics' errors."""
    plt = pyplot()
    steps = record.measures.update.steps
    tol = (record.tolerance.update if record.tolerance else None) or UpdateToleranceUsed()
    labels = [f"{s.step + 1}.{s.mini_batch + 1}" + ("c" if s.clip_active else "") for s in steps]
    worst = sorted(
        {n for s in steps for n in s.update_rel},
        key=lambda n: -max(as_float(s.update_rel.get(n, 0.0)) for s in steps),
    )[:WORST_SHOWN]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    x = range(len(steps))
    for name in worst:
        left.plot(x, [drawn(as_float(s.update_rel.get(name, 0.0))) for s in steps], marker="o", label=short_param(name))
    if tol.update_rel:
        left.axhline(tol.update_rel, color="#e53935", linestyle="--", label=f"tolerance {tol.update_rel:g}")
    left.set_title("update error of the worst parameters", fontsize=9)
    left.set_ylabel("||d - d_oracle|| / ||d_oracle||, d = weights after - before")
    for name in sorted({m for s in steps for m in s.metrics}):
        right.plot(x, [drawn(as_float(_metric_error(s, name))) for s in steps], marker="s", label=name)
    for bound, style, kind in (
        (tol.metric_rel, "--", "relative (grad_norm, lr)"),
        (tol.metric_abs, ":", "absolute (losses, clipfrac, kl)"),
    ):
        if bound:
            right.axhline(bound, color="#e53935", linestyle=style, label=f"tolerance {kind} {bound:g}")
    right.set_title("verl's metrics against the oracle's", fontsize=9)
    right.set_ylabel("error (relative or absolute, as the tolerance)")
    for ax in (left, right):
        ax.set_yscale("log")
        plain_log_labels(ax.yaxis)
        ax.set_xticks(list(x), labels, fontsize=7)
        ax.set_xlabel("optimizer step (RL step.mini-batch; c: the clip engaged)")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a record with no metric and no bound has nothing to name
            ax.legend(fontsize=6, loc="best")
    fig.suptitle(
        f"{record.scenario} x {record.arm} (W={record.world_size}, {precision_shown(record)}): {record.outcome}",
        fontsize=10,
    )
    return save_figure(fig, plt, path)
