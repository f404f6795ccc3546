"""Placement policies for a D x P job on a fragmented fat tree: the baselines a scheduler would use
and Arnold's scalable tile heuristic. Each returns ``node_of[d, p]`` (one node per cell).

Baselines: random; best-fit (GPU-locality only: fullest-free minipods first, best-fit for the last
chunk, nodes in id order) with Megatron's default rank order (TP inside the node, then DP, PP
outermost: DP groups compact, PP strided) or with PP-innermost order; lowest common switch first
(Slurm topology/tree: the smallest switch that holds the job, then leafs by best fit).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from components.simulation.arnold.cluster import free_nodes_leaf_order, free_per_unit
from components.simulation.arnold.spread import objective
from components.core.registry import register


@dataclass
class Instance:
    """One placement problem: topology, free-node mask, the job grid, the spread tier and alpha."""

    topo: object
    free: np.ndarray
    D: int
    P: int
    level: int = 2
    alpha: float = 0.5
    time_limit_s: float = 60.0

    @property
    def cells(self) -> int:
        return self.D * self.P

    def cap(self) -> np.ndarray:
        return free_per_unit(self.topo, self.free, self.level)

    def unit_nodes(self, u: int) -> np.ndarray:
        """Free nodes of unit ``u`` in leaf order (cached)."""
        cache = self.__dict__.setdefault("_unit_nodes", {})
        if u not in cache:
            cache[u] = free_nodes_leaf_order(self.topo, self.free, u, self.level)
        return cache[u]


def rank_order(nodes: np.ndarray, D: int, P: int, order: str) -> np.ndarray:
    """Map an ordered node list to the grid: rank r -> (d, p). 'dp_inner' = Megatron default."""
    nodes = np.asarray(nodes[: D * P])
    if order == "dp_inner":            # r = d + D * p
        return nodes.reshape(P, D).T.copy()
    if order == "pp_inner":            # r = p + P * d
        return nodes.reshape(D, P).copy()
    raise ValueError(order)


def bestfit_units(cap: np.ndarray, need: int) -> list[tuple[int, int]]:
    """(unit, nodes taken): fullest units whole while the rest needs them, best fit for the last chunk."""
    left = cap.astype(np.int64).copy()
    out = []
    while need > 0:
        fits = np.nonzero(left >= need)[0]
        if fits.size:                                   # best fit: the smallest unit that holds the rest
            u = int(fits[np.argmin(left[fits])])
            out.append((u, need))
            break
        u = int(np.argmax(left))
        if left[u] == 0:
            raise ValueError("job larger than free capacity")
        out.append((u, int(left[u])))
        need -= int(left[u])
        left[u] = 0
    return out


def _take_in_id_order(inst: Instance, picks: list[tuple[int, int]], level: int) -> np.ndarray:
    span = inst.topo.span[level]
    nodes = []
    for u, k in picks:
        lo = u * span
        nodes.append(lo + np.nonzero(inst.free[lo:lo + span])[0][:k])
    return np.sort(np.concatenate(nodes))


def bestfit_nodes(inst: Instance) -> np.ndarray:
    return _take_in_id_order(inst, bestfit_units(inst.cap(), inst.cells), inst.level)


@register("placement_policy", "random")
def place_random(inst: Instance, rng: np.random.Generator) -> np.ndarray:
    """Random free nodes, in random order (no topology awareness)."""
    nodes = rng.choice(np.nonzero(inst.free)[0], inst.cells, replace=False)
    return nodes.reshape(inst.D, inst.P)


@register("placement_policy", "bestfit_dp")
def place_bestfit_dp(inst: Instance, rng=None) -> np.ndarray:
    """Best-fit nodes, Megatron default rank order (DP innermost)."""
    return rank_order(bestfit_nodes(inst), inst.D, inst.P, "dp_inner")


@register("placement_policy", "bestfit_pp")
def place_bestfit_pp(inst: Instance, rng=None) -> np.ndarray:
    """Best-fit nodes, PP-innermost rank order."""
    return rank_order(bestfit_nodes(inst), inst.D, inst.P, "pp_inner")


@register("placement_policy", "lowest_switch")
def place_lowest_switch(inst: Instance, rng=None) -> np.ndarray:
    """Slurm topology/tree: the lowest-tier switch whose subtree holds the job (best fit among those),
    then its leafs: best-fit leaf if one holds the rest, else the fullest leaf; Megatron rank order."""
    topo, need = inst.topo, inst.cells
    top_level, top_unit = len(topo.levels), 0
    for lv in range(1, len(topo.levels)):
        cap = free_per_unit(topo, inst.free, lv)
        ok = np.nonzero(cap >= need)[0]
        if ok.size:
            top_level, top_unit = lv, int(ok[np.argmin(cap[ok])])
            break
    leaf_cap = free_per_unit(topo, inst.free, 1)
    if top_level < len(topo.levels):
        per = topo.span[top_level] // topo.span[1]
        mask = np.zeros_like(leaf_cap)
        mask[top_unit * per:(top_unit + 1) * per] = 1
        leaf_cap = leaf_cap * mask
    return rank_order(_take_in_id_order(inst, bestfit_units(leaf_cap, need), 1), inst.D, inst.P, "dp_inner")


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


@functools.lru_cache(maxsize=512)
def _cell_order(D: int, P: int, a: int, b: int, tile_order: str) -> tuple[np.ndarray, np.ndarray]:
    """Cells (d, p) listed tile by tile; inside a tile DP-inner (stage-major) or PP-inner (replica-major)."""
    sp = P // b
    i, r, j, q = np.meshgrid(np.arange(D // a), np.arange(a), np.arange(b), np.arange(sp), indexing="ij")
    dd, pp = i * a + r, j * sp + q
    axes = (2, 0, 3, 1) if tile_order == "stage_major" else (0, 2, 1, 3)
    return dd.transpose(axes).ravel(), pp.transpose(axes).ravel()


def pack_tiles(inst: Instance, a: int, b: int, tile_order: str, unit_order: str) -> np.ndarray:
    """Cut the grid into tiles of a replicas x P/b consecutive stages and bin-pack them into units.

    All tiles have the same size, so first fit over the units (in ``unit_order``) fills each unit
    with as many whole tiles as it holds, in tile order; tiles that fit nowhere whole are split over
    the remaining room at the end. Inside a unit, cells take nodes leaf by leaf (fullest leaf first).
    """
    D, P = inst.D, inst.P
    t = a * (P // b)
    cap = inst.cap()
    if unit_order == "largest_free":
        units = [int(u) for u in np.argsort(-cap, kind="stable")]
    else:                                                   # the best-fit unit set, fullest first
        units = [u for u, _ in bestfit_units(cap, inst.cells)]
        units += [int(u) for u in np.argsort(-cap, kind="stable") if u not in units]
    n_tiles = (D * P) // t
    whole, rest, placed = [], [], 0
    for u in units:
        nodes = inst.unit_nodes(u)
        k = min(len(nodes) // t, n_tiles - placed)
        placed += k
        whole.append(nodes[: k * t])
        rest.append(nodes[k * t:])
    seq = np.concatenate(whole + rest)[: D * P]
    dd, pp = _cell_order(D, P, a, b, tile_order)
    node_of = np.empty((D, P), dtype=np.int64)
    node_of[dd, pp] = seq
    return node_of


def tile_candidates(D: int, P: int):
    for a in divisors(D):
        for b in divisors(P):
            for tile_order in ("stage_major", "replica_major"):
                for unit_order in ("largest_free", "bestfit"):
                    yield a, b, tile_order, unit_order


@register("placement_policy", "tiles")
def place_tiles(inst: Instance, rng=None, return_choice: bool = False):
    """Arnold's scalable heuristic: enumerate tile shapes (a | D, b | P) and packing orders, keep the
    placement with the lowest objective (ties: the lower leaf-level objective)."""
    cap, leaf_cap = inst.cap(), free_per_unit(inst.topo, inst.free, 1)
    best, best_key, choice = None, None, None
    for a, b, to, uo in tile_candidates(inst.D, inst.P):
        node_of = pack_tiles(inst, a, b, to, uo)
        obj = round(objective(node_of, inst.topo, inst.level, cap, inst.alpha), 9)
        if best_key is not None and obj > best_key[0]:
            continue
        key = (obj, objective(node_of, inst.topo, 1, leaf_cap, inst.alpha))
        if best_key is None or key < best_key:
            best, best_key, choice = node_of, key, {"a": a, "b": b, "tile_order": to, "unit_order": uo}
    return (best, choice) if return_choice else best
