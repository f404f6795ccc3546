"""Arnold figures: spread per communication group for each policy, and a placement map."""
from __future__ import annotations

import numpy as np

from components.simulation.plotting import figure, png


def spread_per_group(spreads: dict[str, tuple[np.ndarray, np.ndarray]], level_name: str) -> bytes:
    """``spreads[policy] = (DP spread per stage, PP spread per replica)`` on one cluster."""
    fig, axes = figure(11, 3.8, ncols=2)
    for name, (dp, pp) in spreads.items():
        axes[0][0].step(np.arange(len(dp)), dp, where="mid", label=name)
        axes[0][1].step(np.arange(len(pp)), pp, where="mid", label=name)
    axes[0][0].set(xlabel="DP group (stage p)", ylabel=f"spread ({level_name}s)", title="DP groups")
    axes[0][1].set(xlabel="PP group (replica d)", ylabel=f"spread ({level_name}s)", title="PP groups")
    axes[0][1].legend(fontsize=7)
    return png(fig)


def placement_map(topo, free: np.ndarray, placements: dict[str, np.ndarray], level: int) -> bytes:
    """One panel per policy: rows = units of the spread tier, columns = their nodes (leaf by leaf);
    black = background job, white = free, colour = pipeline stage of our job's cell."""
    k = len(placements)
    fig, axes = figure(10, 1.6 + 1.7 * k, nrows=k)
    span, units = int(topo.span[level]), topo.units[level]
    for ax, (name, node_of) in zip([a[0] for a in axes], placements.items()):
        grid = np.where(free, np.nan, -1.0)
        D, P = node_of.shape
        grid[node_of.ravel()] = np.tile(np.arange(P), D)
        img = np.ma.masked_invalid(grid.reshape(units, span))
        cmap = __import__("matplotlib").colormaps["tab20"].with_extremes(bad="white", under="black")
        ax.imshow(img, aspect="auto", cmap=cmap, vmin=0, vmax=max(P - 1, 1), interpolation="nearest")
        for x in range(0, span, int(topo.span[1])):
            ax.axvline(x - 0.5, color="grey", lw=0.3)
        ax.set(title=f"{name}: colour = stage, black = busy", ylabel=topo.levels[level].name, xlabel="node in unit (leaf by leaf)")
    return png(fig)
