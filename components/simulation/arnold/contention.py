"""A shared cluster: the background jobs' own collective traffic contends with ours on shared uplinks.

Background jobs (``cluster.fragment_jobs``) are hybrid-parallel training jobs like ours: a job of n
nodes with n >= 2 * ``bg_pp`` runs ``bg_pp`` pipeline stages x ``n // bg_pp`` replicas in Megatron's
default rank order over its nodes in id order (DP innermost; the remainder nodes idle), a smaller
one runs pure DP over all its nodes. Its flows are the same messages our job's cost model sends:
one ring all-reduce per stage (ring in node-id order) and the stage-boundary P2P transfers.

Each background flow is active a fraction ``duty`` of the time (its job's communication share of a
step), independently of ours, so on every directed link it counts as ``duty`` of a flow. During one
of our phases, a link's bandwidth is shared fairly among the flows active on it: each of our flows
on link l gets ``C_l / (n_ours_l + duty * n_bg_l)`` and runs at the smallest such share along its
route, capped by the per-flow ECMP cap of the highest tier it climbs (``Tree.flow_bps``). The phase
lasts until its slowest flow is done, plus the longest path latency.

With ``duty = 0`` (or no background flow on the route) and equal bytes per flow, which our phases
have, this is exactly ``engine.phase_time``: a link's fair share times its flow count is its
bandwidth, so the slowest flow is the busiest link or the tightest cap.
"""
from __future__ import annotations

import numpy as np

from components.simulation.arnold.costmodel import dp_ring_messages, pp_messages


def background_flows(owner: np.ndarray, bg_pp: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of every background job's flows (DP rings + PP boundaries), see module docstring."""
    srcs, dsts = [], []
    for job in np.unique(owner[owner >= 0]):
        nodes = np.nonzero(owner == job)[0]                    # id order
        n = nodes.size
        if n < 2:
            continue
        P = bg_pp if n >= 2 * bg_pp else 1
        D = n // P
        grid = nodes[: D * P].reshape(P, D).T                  # Megatron: rank r = d + D * p
        s, d, _ = dp_ring_messages(grid, 1.0)
        srcs.append(s)
        dsts.append(d)
        if P > 1:
            s, d, _ = pp_messages(grid, 1.0)
            srcs.append(s)
            dsts.append(d)
    if not srcs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(srcs).astype(np.int64), np.concatenate(dsts).astype(np.int64)


def link_flow_counts(topo, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Number of flows routed over each directed link."""
    if len(src) == 0:
        return np.zeros(topo.n_links)
    _, lid = topo.route_pairs(src, dst)
    return np.bincount(lid, minlength=topo.n_links).astype(np.float64)


class SharedNet:
    """``run_phase`` for :func:`costmodel.iteration_time` on a shared cluster.

    ``bg_weight[l]`` = duty * number of background flows on link l. Every call records, per flow kind
    (collective / p2p), the contention figures of the phase in ``self.stats[flow]``:
    ``factor`` = mean over (our flow, uplink above the node tier) pairs of (n_ours + duty * n_bg) / n_ours
    (how many more active flows share the uplinks our flows cross than our own), ``bg_share`` = the
    mean background share duty * n_bg / (n_ours + duty * n_bg) over the same pairs, ``slowed`` = the
    fraction of our flows that run slower than they would without background traffic, ``slowdown`` =
    this phase's time / its time without background traffic.
    """

    def __init__(self, topo, bg_weight: np.ndarray):
        self.topo, self.bg = topo, np.asarray(bg_weight, dtype=np.float64)
        self.stats: dict[str, dict] = {}

    def rates(self, src, dst, flow: str = "collective", bg: np.ndarray | None = None):
        """(rate of each flow in bit/s, message index per route hop, link per route hop, our flows per link)."""
        topo = self.topo
        bg = self.bg if bg is None else bg
        m, lid = topo.route_pairs(src, dst)
        n_ours = np.bincount(lid, minlength=topo.n_links).astype(np.float64)
        share = np.full(topo.n_links, np.inf)
        used = n_ours > 0
        share[used] = topo.link_bw[used] / (n_ours[used] + bg[used])
        flow_share = np.full(len(src), np.inf)
        np.minimum.at(flow_share, m, share[lid])
        return np.minimum(flow_share, topo.flow_bps(src, dst, flow)), m, lid, n_ours

    def __call__(self, src, dst, nbytes, flow: str = "collective") -> float:
        src = np.asarray(src, dtype=np.int64).ravel()
        dst = np.asarray(dst, dtype=np.int64).ravel()
        nb = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), src.shape)
        live = nb > 0
        src, dst, nb = src[live], dst[live], nb[live]
        if src.size == 0:
            return 0.0
        lat = float(self.topo.path_latency(src, dst).max())
        rate, m, lid, n_ours = self.rates(src, dst, flow)
        rate0, *_ = self.rates(src, dst, flow, np.zeros_like(self.bg))
        t = float(np.max(8.0 * nb / rate)) + lat
        t0 = float(np.max(8.0 * nb / rate0)) + lat
        up = lid >= self.topo.up_off[1] if len(self.topo.up_off) > 1 else np.zeros(lid.size, bool)
        n = n_ours[lid[up]]
        w = self.bg[lid[up]]
        self.stats[flow] = {"factor": float(np.mean((n + w) / n)) if n.size else 1.0,
                            "bg_share": float(np.mean(w / (n + w))) if n.size else 0.0,
                            "slowed": float(np.mean(rate < rate0 * (1 - 1e-12))),
                            "slowdown": t / t0 if t0 > 0 else 1.0,
                            "pairs": int(n.size)}
        return t
