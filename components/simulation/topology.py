"""Topologies with per-level bandwidth and latency: trees (fat tree, NoP-Tree) and 2D meshes.

Every topology names its endpoints 0..n-1 and its directed links 0..n_links-1, each with a
:class:`components.core.netsim.Link` (bandwidth, latency). A message from ``a`` to ``b`` uses the
links of its route; two routing functions are kept on purpose: a vectorised one (numpy, used by the
fast engine) and a scalar one (plain Python, used by the Ray actors), so that the actor mode is an
independent computation of the same model.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.core.errors import ConfigError, require
from components.core.netsim import Link, parse_bandwidth


@dataclass(frozen=True)
class Level:
    """One tier: ``fanout`` units of this tier under each parent; ``link`` = each unit's uplink."""

    name: str
    fanout: int
    link: Link
    flow_bps: float = float("inf")      # most one collective flow gets when its route climbs this tier (ECMP, hashing)
    p2p_flow_bps: float = float("inf")  # the same for point-to-point flows (fewer channels, so fewer paths)


class Tree:
    """A multi-tier tree (fat tree: node -> leaf -> minipod -> core; NoP-Tree: package -> wafer root).

    ``levels[0]`` are the endpoints; level l's unit of endpoint x is ``x // span[l]``. A message
    whose lowest common ancestor sits at tier ``h`` (``h = 0``: same endpoint) goes up through the
    uplinks of tiers 0..h-1 on the sender's side and down through the same tiers on the receiver's
    side; switches are non-blocking, so only these links contend.
    """

    kind = "tree"

    def __init__(self, levels: list[Level]):
        require(len(levels) >= 1, "topology.levels", levels, "at least one level")
        for i, lv in enumerate(levels):
            require(isinstance(lv.fanout, int) and lv.fanout >= 1, f"topology.levels[{i}].fanout", lv.fanout, "a positive integer")
        self.levels = list(levels)
        self.span = np.cumprod([1] + [lv.fanout for lv in levels[:-1]]).astype(np.int64)  # endpoints per unit
        self.n = int(np.prod([lv.fanout for lv in levels]))
        self.units = [self.n // int(s) for s in self.span]                                # units per tier
        off, self.up_off, self.down_off = 0, [], []
        for u in self.units:
            self.up_off.append(off)
            self.down_off.append(off + u)
            off += 2 * u
        self.n_links = off
        self.link_bw = np.concatenate([np.full(2 * u, lv.link.bandwidth_bps) for u, lv in zip(self.units, self.levels)])
        self.link_lat = np.concatenate([np.full(2 * u, lv.link.latency_s) for u, lv in zip(self.units, self.levels)])
        self.flow_cap = {"collective": np.array([np.inf] + [lv.flow_bps for lv in self.levels]),  # by tiers climbed
                         "p2p": np.array([np.inf] + [lv.p2p_flow_bps for lv in self.levels])}

    # ---- structure
    def unit(self, x, level: int):
        """Index of endpoint(s) ``x``'s unit at tier ``level`` (level 0 = the endpoint itself)."""
        return np.asarray(x) // self.span[level]

    def lca_level(self, a, b) -> np.ndarray:
        """Number of tiers a message climbs: 0 for a == b, len(levels) if only the root is shared."""
        a, b = np.asarray(a), np.asarray(b)
        h = np.zeros(np.broadcast(a, b).shape, dtype=np.int64)
        for lv in range(len(self.levels)):
            h += (a // self.span[lv]) != (b // self.span[lv])
        return h

    # ---- vectorised routing
    def route_pairs(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(message index, link id) for every link every message uses."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        h = self.lca_level(src, dst)
        msgs, links = [], []
        for lv in range(len(self.levels)):
            m = np.nonzero(h > lv)[0]
            msgs += [m, m]
            links += [self.up_off[lv] + src[m] // self.span[lv], self.down_off[lv] + dst[m] // self.span[lv]]
        return np.concatenate(msgs), np.concatenate(links)

    def flow_bps(self, src, dst, flow: str = "collective") -> np.ndarray:
        """Per-flow bandwidth cap of each message (set by the highest uplink tier it climbs)."""
        return self.flow_cap[flow][self.lca_level(src, dst)]

    def path_latency(self, src, dst) -> np.ndarray:
        h = self.lca_level(src, dst)
        lat = np.array([0.0] + [2 * lv.link.latency_s for lv in self.levels]).cumsum()
        return lat[h]

    # ---- scalar routing (actor mode)
    def route(self, a: int, b: int) -> list[int]:
        out = []
        for lv in range(len(self.levels)):
            sa, sb = a // int(self.span[lv]), b // int(self.span[lv])
            if sa == sb:
                break
            out += [self.up_off[lv] + sa, self.down_off[lv] + sb]
        return out

    def describe(self) -> dict:
        return {"kind": "tree", "levels": [{"name": lv.name, "fanout": lv.fanout, "bandwidth_bps": lv.link.bandwidth_bps,
                                            "latency_s": lv.link.latency_s} for lv in self.levels], "endpoints": self.n}


class Mesh2D:
    """A rows x cols 2D mesh of routers, one endpoint each, XY (dimension-ordered) routing.

    Links: one injection and one ejection link per router, and one directed link per neighbour
    pair and direction. A message crosses injection, |dx| + |dy| router-to-router links, ejection.
    """

    kind = "mesh"

    def __init__(self, rows: int, cols: int, link: Link, port_link: Link | None = None):
        require(isinstance(rows, int) and rows >= 1, "topology.rows", rows, "a positive integer")
        require(isinstance(cols, int) and cols >= 1, "topology.cols", cols, "a positive integer")
        self.rows, self.cols, self.link, self.port = rows, cols, link, port_link or link
        self.n = rows * cols
        # link ids: [0, n) inject, [n, 2n) eject, then 4 directions per router: E, W, S, N
        self.n_links = 2 * self.n + 4 * self.n
        self.link_bw = np.concatenate([np.full(2 * self.n, self.port.bandwidth_bps), np.full(4 * self.n, link.bandwidth_bps)])
        self.link_lat = np.concatenate([np.full(2 * self.n, self.port.latency_s), np.full(4 * self.n, link.latency_s)])

    def _dir_link(self, router, d):
        return 2 * self.n + 4 * np.asarray(router) + d

    def hops(self, a, b) -> np.ndarray:
        a, b = np.asarray(a), np.asarray(b)
        return np.abs(a % self.cols - b % self.cols) + np.abs(a // self.cols - b // self.cols)

    def route_pairs(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        remote = np.nonzero(src != dst)[0]
        msgs, links = [remote, remote], [src[remote], self.n + dst[remote]]
        x, y = src[remote] % self.cols, src[remote] // self.cols
        tx, ty = dst[remote] % self.cols, dst[remote] // self.cols
        for _ in range(self.cols - 1):                     # X first
            m = x != tx
            step = np.sign(tx - x)
            r = y * self.cols + x
            msgs.append(remote[m])
            links.append(self._dir_link(r[m], np.where(step[m] > 0, 0, 1)))
            x = x + np.where(m, step, 0)
        for _ in range(self.rows - 1):                     # then Y
            m = y != ty
            step = np.sign(ty - y)
            r = y * self.cols + x
            msgs.append(remote[m])
            links.append(self._dir_link(r[m], np.where(step[m] > 0, 2, 3)))
            y = y + np.where(m, step, 0)
        return np.concatenate(msgs), np.concatenate(links)

    def flow_bps(self, src, dst, flow: str = "collective") -> np.ndarray:
        return np.full(np.broadcast(np.asarray(src), np.asarray(dst)).shape, np.inf)

    def path_latency(self, src, dst) -> np.ndarray:
        h = self.hops(src, dst)
        return np.where(h > 0, 2 * self.port.latency_s + h * self.link.latency_s, 0.0)

    def route(self, a: int, b: int) -> list[int]:
        if a == b:
            return []
        out = [a, self.n + b]
        x, y, tx, ty = a % self.cols, a // self.cols, b % self.cols, b // self.cols
        while x != tx:
            out.append(2 * self.n + 4 * (y * self.cols + x) + (0 if tx > x else 1))
            x += 1 if tx > x else -1
        while y != ty:
            out.append(2 * self.n + 4 * (y * self.cols + x) + (2 if ty > y else 3))
            y += 1 if ty > y else -1
        return out

    def describe(self) -> dict:
        return {"kind": "mesh", "rows": self.rows, "cols": self.cols, "bandwidth_bps": self.link.bandwidth_bps,
                "latency_s": self.link.latency_s, "endpoints": self.n}


def route_latency(topo, a: int, b: int) -> float:
    """Scalar path latency: the sum of the latencies of the links on the route."""
    return float(sum(topo.link_lat[lid] for lid in topo.route(a, b)))


def route_flow_bps(topo, a: int, b: int, flow: str = "collective") -> float:
    """Scalar per-flow cap: the flow bandwidth of the highest uplink tier the route climbs."""
    if topo.kind != "tree":
        return float("inf")
    caps = [lv.flow_bps if flow == "collective" else lv.p2p_flow_bps for lv, _ in zip(topo.levels, topo.route(a, b)[::2])]
    return float(caps[-1]) if caps else float("inf")


def tree_from_config(cfg: dict, key: str = "topology") -> Tree:
    """``{levels: [{name, fanout, bandwidth, latency}, ...]}`` (bottom tier first) -> Tree."""
    levels = cfg.get("levels") if isinstance(cfg, dict) else None
    require(isinstance(levels, list) and levels, f"{key}.levels", levels, "a non-empty list of {name, fanout, bandwidth, latency}")
    out = []
    for i, lv in enumerate(levels):
        k = f"{key}.levels[{i}]"
        require(isinstance(lv, dict), k, lv, "a mapping {name, fanout, bandwidth, latency}")
        extra = sorted(set(lv) - {"name", "fanout", "bandwidth", "latency", "flow_bandwidth",
                              "p2p_flow_bandwidth"})
        if extra:
            raise ConfigError(f"{k}.{extra[0]}", lv[extra[0]], "unknown key; allowed: name, fanout, bandwidth, latency, flow_bandwidth, p2p_flow_bandwidth")
        fan = lv.get("fanout")
        require(isinstance(fan, int) and not isinstance(fan, bool) and fan >= 1, f"{k}.fanout", fan, "a positive integer")
        link = Link.from_config({"bandwidth": lv.get("bandwidth", "1Gbps"), "latency": lv.get("latency", 0.0)}, k)
        flow = parse_bandwidth(lv["flow_bandwidth"], f"{k}.flow_bandwidth") if lv.get("flow_bandwidth") is not None else float("inf")
        p2p = parse_bandwidth(lv["p2p_flow_bandwidth"], f"{k}.p2p_flow_bandwidth") if lv.get("p2p_flow_bandwidth") is not None else flow
        out.append(Level(str(lv.get("name", f"tier{i}")), fan, link, flow, p2p))
    return Tree(out)
