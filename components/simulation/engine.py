"""The vectorised simulator: a phase of concurrent messages on a topology -> link loads -> seconds.

Cost model (one phase; all its messages start together): every directed link serialises the bytes
routed over it, so the phase lasts ``max over links (8 * bytes / bandwidth)`` plus the largest path
latency (alpha-beta per link, as ``components.core.netsim.Link.transfer_s``, with contention). It is
the same model for a fat tree of data-center nodes and for a chiplet network-on-package.
"""
from __future__ import annotations

import numpy as np


def link_loads(topo, src, dst, nbytes) -> np.ndarray:
    """Bytes carried by each link of ``topo`` when messages ``src[i] -> dst[i]`` of ``nbytes[i]`` run."""
    src = np.asarray(src, dtype=np.int64).ravel()
    dst = np.asarray(dst, dtype=np.int64).ravel()
    nb = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), src.shape)
    if src.size == 0:
        return np.zeros(topo.n_links)
    m, lid = topo.route_pairs(src, dst)
    return np.bincount(lid, weights=nb[m], minlength=topo.n_links)


def time_from_loads(topo, loads: np.ndarray, max_latency: float, max_flow_s: float = 0.0) -> float:
    """Seconds of a phase: the busiest link or the slowest capped flow, plus the longest path latency."""
    link_s = float(np.max(8.0 * loads / topo.link_bw)) if np.any(loads > 0) else 0.0
    return max(link_s, float(max_flow_s)) + float(max_latency)


def phase_time(topo, src, dst, nbytes, flow: str = "collective") -> float:
    """Seconds for one phase of concurrent messages (see module docstring)."""
    src = np.asarray(src, dtype=np.int64).ravel()
    dst = np.asarray(dst, dtype=np.int64).ravel()
    if src.size == 0:
        return 0.0
    nb = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), src.shape)
    live = nb > 0
    if not live.any():
        return 0.0
    lat = float(topo.path_latency(src[live], dst[live]).max())
    flow_s = float(np.max(8.0 * nb[live] / topo.flow_bps(src[live], dst[live], flow)))
    return time_from_loads(topo, link_loads(topo, src, dst, nb), lat, flow_s)


def matrix_phase_time(topo, traffic: np.ndarray) -> float:
    """Phase time of a dense endpoint x endpoint traffic matrix (bytes from row to column)."""
    s, d = np.nonzero(traffic)
    return phase_time(topo, s, d, traffic[s, d])
