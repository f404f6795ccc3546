"""Actor mode for Mozart: each package is an object on the Ray NodeActor pool holding its experts
as small FFNs. The router sends every token once to each remote package among its top-k experts
(the deduplicated dispatch), packages compute their experts' outputs, and the router combines.
Checks: outputs equal a single-process MoE forward, received copies equal the vectorised count,
and the dispatch phase time equals the vectorised engine's."""
from __future__ import annotations

import numpy as np

from components.simulation.actors import ActorCluster, SimNode


class PackageNode(SimNode):
    """A package: routes what it sends, keeps the tokens it receives, runs its experts on them."""

    def __init__(self, index: int, topo, experts: dict | None = None):
        super().__init__(index, topo)
        self.experts = experts or {}                # expert id -> (w1, w2)
        self.remote_copies = 0

    def compute(self, home_of: np.ndarray) -> dict:
        out = {}
        for _src, (t, x, picks) in self.inbox:
            if home_of[t] != self.index:
                self.remote_copies += 1
            y = np.zeros_like(x)
            for e, w in picks:
                if e in self.experts:
                    w1, w2 = self.experts[e]
                    y += w * (np.maximum(x @ w1, 0.0) @ w2)
            out[int(t)] = y
        self.inbox = []
        return out

    def copies(self) -> int:
        return self.remote_copies


def expert_weights(n_experts: int, d: int, ffn: int, rng) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(rng.standard_normal((d, ffn)) / np.sqrt(d), rng.standard_normal((ffn, d)) / np.sqrt(ffn)) for _ in range(n_experts)]


def reference_forward(x: np.ndarray, experts: np.ndarray, gates: np.ndarray, weights) -> np.ndarray:
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for e, w in zip(experts[t], gates[t]):
            w1, w2 = weights[e]
            out[t] += w * (np.maximum(x[t] @ w1, 0.0) @ w2)
    return out


def run_actor_check(key: str, net, pool, experts: np.ndarray, home: np.ndarray, group_of: np.ndarray,
                    token_bytes: float, rng, d: int = 16, ffn: int = 32) -> dict:
    """One micro-batch through package actors. Returns measured copies, phase time and numeric error."""
    G = net.n
    E = int(group_of.size)
    T = experts.shape[0]
    weights = expert_weights(E, d, ffn, rng)
    x = rng.standard_normal((T, d))
    gates = rng.random(experts.shape)
    gates /= gates.sum(1, keepdims=True)
    per_pkg = [{e: weights[e] for e in np.nonzero(group_of == g)[0].tolist()} for g in range(G)]
    cluster = ActorCluster(key, net, pool, PackageNode, ())
    try:
        if cluster.local is not None:
            for g in range(G):
                cluster.local[g].experts = per_pkg[g]
        else:
            import ray

            ray.get([pool[g % len(pool)].call.remote(cluster._k(g), "__setattr__", "experts", per_pkg[g]) for g in range(G)])
        src, dst, nb, pay = [], [], [], []
        for t in range(T):
            pk = group_of[experts[t]]
            for g in np.unique(pk).tolist():
                picks = [(int(e), float(w)) for e, w, p in zip(experts[t], gates[t], pk) if p == g]
                src.append(int(home[t]))
                dst.append(g)
                nb.append(0.0 if g == home[t] else float(token_bytes))      # local fan-out does not cross packages
                pay.append((t, x[t], picks))
        dispatch_s, recv = cluster.phase(np.array(src), np.array(dst), np.array(nb), pay)
        parts = cluster.call("compute", {g: (home,) for g in range(G)})
        copies = sum(cluster.call("copies", {g: () for g in range(G)}).values())
        y = np.zeros_like(x)
        for part in parts.values():
            for t, v in part.items():
                y[t] += v
        err = float(np.abs(y - reference_forward(x, experts, gates, weights)).max())
        return {"actor_remote_copies": float(copies), "actor_dispatch_s": dispatch_s, "actor_received_bytes": float(recv.sum()),
                "actor_max_abs_err": err}
    finally:
        cluster.close()
