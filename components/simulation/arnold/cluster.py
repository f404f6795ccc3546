"""A fragmented cluster: background jobs occupy part of a fat tree before our job arrives."""
from __future__ import annotations

import numpy as np


def fragment(n_nodes: int, busy: float, rng: np.random.Generator, job_min: int = 8, job_max: int = 256) -> np.ndarray:
    """Free-node mask after background jobs fill ``round(busy * n)`` nodes.

    Each background job has a log-uniform size in [job_min, job_max] and takes the next free nodes
    from a random start (wrapping), the way a packing scheduler fills a cluster over time; the
    last job is cut to hit the exact busy count, so free capacity is known from the config alone.
    """
    return fragment_jobs(n_nodes, busy, rng, job_min, job_max) < 0


def fragment_jobs(n_nodes: int, busy: float, rng: np.random.Generator, job_min: int = 8, job_max: int = 256) -> np.ndarray:
    """The background job of every node (-1 = free), drawn exactly as :func:`fragment` draws its mask
    (same random numbers, same nodes), so ``fragment_jobs(...) < 0 == fragment(...)``."""
    owner = np.full(n_nodes, -1, dtype=np.int64)
    target = int(round(busy * n_nodes))
    used, job = 0, 0
    while used < target:
        size = int(round(np.exp(rng.uniform(np.log(job_min), np.log(job_max)))))
        size = min(size, target - used)
        start = int(rng.integers(n_nodes))
        order = np.roll(np.arange(n_nodes), -start)
        take = order[owner[order] < 0][:size]
        owner[take] = job
        used += take.size
        job += 1
    return owner


def free_per_unit(topo, free: np.ndarray, level: int) -> np.ndarray:
    """Free nodes in each unit of tier ``level`` (level 2 = minipods in node/leaf/minipod trees)."""
    return np.bincount(np.nonzero(free)[0] // topo.span[level], minlength=topo.units[level])


def free_nodes_leaf_order(topo, free: np.ndarray, unit: int, level: int) -> np.ndarray:
    """Free nodes of one unit, leafs with most free nodes first, then node id (packs leafs)."""
    lo, hi = unit * topo.span[level], (unit + 1) * topo.span[level]
    nodes = lo + np.nonzero(free[lo:hi])[0]
    if level <= 1 or nodes.size == 0:
        return nodes
    leaf = nodes // topo.span[1]
    counts = np.bincount(leaf - leaf.min(), minlength=1)[leaf - leaf.min()]
    return nodes[np.lexsort((nodes, -counts))]
