"""Expert allocation policies: which package (group) holds each expert, E/G experts per package.

``clustered`` is Mozart's balanced co-activation clustering (our reading of the paper's Algorithm 1):
farthest-point seeds in normalised co-activation, greedy assignment of the remaining experts in
decreasing frequency to the feasible group of highest affinity, then Kernighan-Lin pair swaps while
the intra-group co-activation grows and every group's load stays <= (1 + eps) x the mean.
"""
from __future__ import annotations

import numpy as np

from components.core.registry import register


@register("allocation_policy", "contiguous")
def contiguous(freq: np.ndarray, C: np.ndarray, groups: int, eps: float, rng) -> np.ndarray:
    """Megatron/DeepSpeed expert parallelism: experts [0, E/G) on package 0, and so on."""
    return np.arange(len(freq)) // (len(freq) // groups)


@register("allocation_policy", "random")
def random_alloc(freq: np.ndarray, C: np.ndarray, groups: int, eps: float, rng) -> np.ndarray:
    """Control: a random permutation of the experts, E/G per package."""
    return rng.permutation(len(freq)) // (len(freq) // groups)


def intra_affinity(group_of: np.ndarray, C: np.ndarray) -> float:
    same = group_of[:, None] == group_of[None, :]
    return float((C * same).sum() / 2)


@register("allocation_policy", "clustered")
def clustered(freq: np.ndarray, C: np.ndarray, groups: int, eps: float, rng, max_swaps: int = 1000) -> np.ndarray:
    """Mozart: balanced co-activation clustering (seeds, greedy fill, pair swaps; see the module docstring)."""
    E = len(freq)
    size = E // groups
    cap = (1 + eps) * freq.sum() / groups
    norm = C / np.sqrt(np.outer(freq, freq) + 1e-12)
    seeds = [int(np.argmax(freq))]
    while len(seeds) < groups:                         # farthest point: least affinity to the seeds so far
        aff = norm[:, seeds].max(1)
        aff[seeds] = np.inf
        seeds.append(int(np.argmin(aff - 1e-9 * freq)))
    g = np.full(E, -1)
    g[seeds] = np.arange(groups)
    load = freq[seeds].astype(float).copy()
    count = np.ones(groups, dtype=int)
    for e in np.argsort(-freq, kind="stable"):
        if g[e] >= 0:
            continue
        room = count < size
        aff = np.array([C[e, g == k].sum() for k in range(groups)])
        ok = room & (load + freq[e] <= cap)
        k = int(np.argmax(np.where(ok, aff, -np.inf))) if ok.any() else int(np.argmin(np.where(room, load, np.inf)))
        g[e] = k
        load[k] += freq[e]
        count[k] += 1
    for _ in range(max_swaps):                         # Kernighan-Lin style pair swaps
        A = C @ np.eye(groups)[g]                      # A[e, k] = affinity of e to group k
        ge = g[:, None]
        gf = g[None, :]
        # gain[e, f] = (A[e, g_f] - A[e, g_e]) + (A[f, g_e] - A[f, g_f]) - 2 C[e, f]
        gain = A[np.arange(E)[:, None], gf] - A[np.arange(E), g][:, None] + A[np.arange(E)[None, :], ge] \
            - A[np.arange(E), g][None, :] - 2 * C
        new_a = load[g][:, None] - freq[:, None] + freq[None, :]
        new_b = load[g][None, :] - freq[None, :] + freq[:, None]
        ok = (ge != gf) & (new_a <= cap + 1e-9) & (new_b <= cap + 1e-9)
        gain = np.where(ok, gain, -np.inf)
        e, f = np.unravel_index(int(np.argmax(gain)), gain.shape)
        if not gain[e, f] > 1e-9:
            break
        a, b = g[e], g[f]
        load[a] += freq[f] - freq[e]
        load[b] += freq[e] - freq[f]
        g[e], g[f] = b, a
    return g
