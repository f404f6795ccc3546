"""Mozart figures: per-chunk streaming timelines and layer time against the number of chunks."""
from __future__ import annotations

from components.simulation.plotting import figure, png

COLORS = {"dispatch": "tab:blue", "weights": "tab:grey", "compute": "tab:green", "combine": "tab:orange"}


def timelines(runs: dict[str, list[dict]]) -> bytes:
    """``runs[label] = events`` of one forward pass; one row per op, one bar per chunk."""
    fig, axes = figure(10, 1.2 + 1.6 * len(runs), nrows=len(runs))
    t_max = max(e["end"] for ev in runs.values() for e in ev) * 1e6
    for ax, (label, ev) in zip([a[0] for a in axes], runs.items()):
        ops = ["dispatch", "weights", "compute", "combine"]
        for e in ev:
            y = ops.index(e["op"])
            ax.barh(y, (e["end"] - e["start"]) * 1e6, left=e["start"] * 1e6, color=COLORS[e["op"]], edgecolor="k", lw=0.3)
            if e["op"] != "weights" and len(ev) <= 80:
                ax.text((e["start"] + e["end"]) / 2 * 1e6, y, str(e["chunk"]), ha="center", va="center", fontsize=6)
        ax.set_yticks(range(len(ops)), ops)
        ax.set_xlim(0, t_max * 1.02)
        ax.set(title=label, xlabel="time (us), one MoE layer forward, one micro-batch")
    return png(fig)


def chunk_sweep(chunks: list[int], times: dict[str, list[float]]) -> bytes:
    fig, axes = figure(5.5, 3.8)
    ax = axes[0][0]
    for label, ts in times.items():
        ax.plot(chunks, [t * 1e6 for t in ts], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="chunks s", ylabel="MoE layer fwd+bwd (us)", title="streaming: layer time vs chunks")
    ax.legend(fontsize=7)
    return png(fig)
