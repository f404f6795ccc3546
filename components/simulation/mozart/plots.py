"""Mozart figures: per-chunk streaming timelines and layer time against the number of chunks."""
from __future__ import annotations

from components.simulation.plotting import figure, png

COLORS = {"dispatch": "tab:blue", "weights": "tab:grey", "compute": "tab:green", "combine": "tab:orange"}


def timelines(runs: dict[str, list[dict]]) -> bytes:
    """``runs[label] = events`` of one forward pass; one row per op, one bar per chunk (numbered where
    the bar is wide enough to hold its number), a legend for the op colours."""
    from matplotlib.patches import Patch

    fig, axes = figure(10, 1.6 + 2.0 * len(runs), nrows=len(runs))
    t_max = max(e["end"] for ev in runs.values() for e in ev) * 1e6
    ops = ["dispatch", "weights", "compute", "combine"]
    for ax, (label, ev) in zip([a[0] for a in axes], runs.items()):
        for e in ev:
            y = ops.index(e["op"])
            width = (e["end"] - e["start"]) * 1e6
            ax.barh(y, width, left=e["start"] * 1e6, color=COLORS[e["op"]], edgecolor="k", lw=0.3)
            if e["op"] != "weights" and width >= 0.018 * t_max:      # room for a 2-digit chunk number at 9 pt
                ax.text(e["start"] * 1e6 + width / 2, y, str(e["chunk"]), ha="center", va="center", fontsize=9)
        ax.set_yticks(range(len(ops)), ops, fontsize=10)
        ax.tick_params(axis="x", labelsize=10)
        ax.set_xlim(0, t_max * 1.02)
        ax.set_title(label, fontsize=12)
        ax.set_xlabel("time (us), one MoE layer forward, one micro-batch", fontsize=10)
    axes[0][0].legend(handles=[Patch(color=COLORS[o], label=o) for o in ops], ncol=4, fontsize=9,
                      loc="lower center", bbox_to_anchor=(0.5, 1.12), frameon=False)
    return png(fig)


def chunk_sweep(chunks: list[int], times: dict[str, list[float]]) -> bytes:
    fig, axes = figure(5.5, 3.8)
    ax = axes[0][0]
    for label, ts in times.items():
        ax.plot(chunks, [t * 1e6 for t in ts], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("chunks s", fontsize=10)
    ax.set_ylabel("MoE layer fwd+bwd (us)", fontsize=10)
    ax.set_title("streaming: layer time vs chunks", fontsize=12)
    ax.legend(fontsize=9)
    return png(fig)
