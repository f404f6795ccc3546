"""Actor mode: every simulated endpoint (a data-center node, a chiplet package) is an object hosted
on a Ray actor process; the simulated messages really travel between them.

A phase runs in two rounds of actor calls: each sender routes its own messages with the topology's
scalar router and reports the bytes it puts on each link; the driver then delivers the messages
(with their payloads) to the receivers, which count what they got. The phase time comes from the
summed link loads with the same cost model as :mod:`components.simulation.engine`, so the two modes
must agree on the same instance. Many endpoints share few processes (round-robin over the pool):
each Ray process costs about a second and 150 MB.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from components.simulation.topology import route_flow_bps, route_latency


class SimNode:
    """One simulated endpoint: routes what it sends, counts what it receives."""

    def __init__(self, index: int, topo):
        self.index, self.topo = index, topo
        self.received_bytes = 0.0
        self.received_msgs = 0
        self.inbox: list = []

    def send(self, messages: list[tuple[int, float, object]], flow: str = "collective"):
        """messages: (dst, nbytes, payload). Returns (link -> bytes, (max latency, slowest capped flow), messages)."""
        loads: dict[int, float] = defaultdict(float)
        lat = flow_s = 0.0
        out = []
        for dst, nbytes, payload in messages:
            for lid in self.topo.route(self.index, int(dst)):
                loads[lid] += float(nbytes)
            if nbytes > 0:
                lat = max(lat, route_latency(self.topo, self.index, int(dst)))
                flow_s = max(flow_s, 8.0 * nbytes / route_flow_bps(self.topo, self.index, int(dst), flow))
            out.append((self.index, int(dst), float(nbytes), payload))
        return dict(loads), (lat, flow_s), out

    def receive(self, messages: list) -> float:
        got = 0.0
        for src, _dst, nbytes, payload in messages:
            got += nbytes
            self.received_msgs += 1
            if payload is not None:
                self.inbox.append((src, payload))
        self.received_bytes += got
        return got

    def stats(self) -> dict:
        return {"index": self.index, "received_bytes": self.received_bytes, "received_msgs": self.received_msgs}


class ActorCluster:
    """Endpoints ``0..n-1`` of ``topo`` hosted on ``pool`` (NodeActors) or locally (``pool=None``)."""

    def __init__(self, key: str, topo, pool: list | None, factory=None, extra_args: tuple = ()):
        self.key, self.topo, self.pool = key, topo, pool
        factory = factory or SimNode
        if pool is None:
            self.local = [factory(i, topo, *extra_args) for i in range(topo.n)]
            return
        import ray

        self.local = None
        ray.get([pool[i % len(pool)].host.remote(self._k(i), factory, i, topo, *extra_args) for i in range(topo.n)])

    def _k(self, i: int) -> str:
        return f"{self.key}/{i}"

    def call(self, method: str, per_node_args: dict[int, tuple]) -> dict[int, object]:
        """Call ``method`` on the given endpoints (concurrently on the actors)."""
        if self.local is not None:
            return {i: getattr(self.local[i], method)(*a) for i, a in per_node_args.items()}
        import ray

        refs = {i: self.pool[i % len(self.pool)].call.remote(self._k(i), method, *a) for i, a in per_node_args.items()}
        vals = ray.get(list(refs.values()))
        return dict(zip(refs, vals))

    def phase(self, src, dst, nbytes, payloads=None, flow: str = "collective") -> tuple[float, np.ndarray]:
        """Run one phase; returns (seconds, bytes received per endpoint)."""
        src = np.asarray(src, dtype=np.int64).ravel()
        dst = np.asarray(dst, dtype=np.int64).ravel()
        nb = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), src.shape)
        outbox: dict[int, list] = defaultdict(list)
        for i, (s, d, b) in enumerate(zip(src.tolist(), dst.tolist(), nb.tolist())):
            outbox[s].append((d, b, None if payloads is None else payloads[i]))
        sent = self.call("send", {s: (msgs, flow) for s, msgs in outbox.items()})
        loads = np.zeros(self.topo.n_links)
        lat = flow_s = 0.0
        inbox: dict[int, list] = defaultdict(list)
        for _s, (ld, (l_s, f_s), out) in sent.items():
            for lid, b in ld.items():
                loads[lid] += b
            lat, flow_s = max(lat, l_s), max(flow_s, f_s)
            for m in out:
                inbox[m[1]].append(m)
        got = self.call("receive", {d: (msgs,) for d, msgs in inbox.items()})
        recv = np.zeros(self.topo.n)
        for d, b in got.items():
            recv[d] = b
        from components.simulation.engine import time_from_loads

        return time_from_loads(self.topo, loads, lat, flow_s), recv

    def close(self) -> None:
        if self.local is None:
            import ray

            ray.get([self.pool[i % len(self.pool)].drop.remote(self._k(i)) for i in range(self.topo.n)])


def pool_for(ctx, n: int, prefix: str):
    """The experiment's NodeActor pool if it has one, else ``n`` fresh zero-CPU NodeActors (caller kills)."""
    if getattr(ctx, "nodes", None):
        return list(ctx.nodes), False
    from components.core.raytools import start_nodes

    return start_nodes(n, 0.0, prefix), True
