"""The bench chart: lm_head collective time per train step against the lm_head's size, one line per path."""

from __future__ import annotations

from pathlib import Path

PATH_COLUMNS = ("full_tensor (upstream, fp32 gather)", "FSDP path (candidate, param-dtype gather)")


def chart(rows: list[dict], path: Path, bandwidth_gbps: float, world: int = 64):
    """Extra time per train step vs model size, per lm_head path, at one world size."""
    import matplotlib.pyplot as plt

    fig = draw(rows, bandwidth_gbps, world)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # cut to everything drawn: no label or legend clipped
    plt.close(fig)
    return path


def draw(rows: list[dict], bandwidth_gbps: float, world: int = 64):
    """The chart's figure (not saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    labels = PATH_COLUMNS
    lines = {}
    for label, marker in zip(labels, ("o", "s")):
        # The cost follows the lm_head weight's size (vocab x hidden), not the parameter count.
        pts = sorted(
            (r["lm_head_melems"], r[label]["time_ms"], r["model"])
            for r in rows
            if r["world"] == world and r["step"] == "train" and r[label] is not None
        )
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=label)
        lines[label] = pts
    # One label per lm_head size, above the higher of the two points: checkpoints that share a size (8B and
    # 235B-A22B both have 151,936 x 4,096) share one label instead of printing over each other, and no label sits
    # between the lines. Neighbouring sizes alternate above and further above.
    by_size = {}
    for pts in lines.values():
        for x, y, name in pts:
            top, names = by_size.setdefault(x, [y, []])
            by_size[x][0] = max(top, y)
            short = name.replace("Qwen3-VL-", "")
            if short not in names:
                names.append(short)
    for i, (x, (y, names)) in enumerate(sorted(by_size.items())):
        ax.annotate(
            ", ".join(names), (x, y), textcoords="offset points", xytext=(0, 8 + 11 * (i % 2)), ha="center", fontsize=7
        )
    ax.margins(x=0.08, y=0.18)
    ax.set_xlabel("lm_head weight (million elements = vocab x hidden; untied Qwen3-VL checkpoints)")
    ax.set_ylabel("lm_head collective time per train step (ms)")
    ax.set_title(f"lm_head collectives per rank, W={world}, {bandwidth_gbps:g} GB/s, bf16 params")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
