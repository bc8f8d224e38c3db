"""The bench chart: lm_head collective time per train step against the lm_head's size, one line per path."""
from __future__ import annotations

from pathlib import Path

PATH_COLUMNS = ("full_tensor (upstream, fp32 gather)", "FSDP path (candidate, param-dtype gather)")


def chart(rows: list[dict], path: Path, bandwidth_gbps: float, world: int = 64):
    """Extra time per train step vs model size, per lm_head path, at one world size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels = PATH_COLUMNS
    for label, marker in zip(labels, ("o", "s")):
        # The cost follows the lm_head weight's size (vocab x hidden), not the parameter count.
        pts = sorted((r["lm_head_melems"], r[label]["time_ms"], r["model"]) for r in rows
                     if r["world"] == world and r["step"] == "train" and r[label] is not None)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=label)
        for x, y, name in pts:
            ax.annotate(name.replace("Qwen3-VL-", ""), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("lm_head weight (million elements = vocab x hidden; untied Qwen3-VL checkpoints)")
    ax.set_ylabel("lm_head collective time per train step (ms)")
    ax.set_title(f"lm_head collectives per rank, W={world}, {bandwidth_gbps:g} GB/s, bf16 params")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
