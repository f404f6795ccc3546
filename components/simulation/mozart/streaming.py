"""The pipelined time model of one MoE layer pass: token chunks stream through dispatch, expert
compute and combine, and expert weights are prefetched from package DRAM (double buffering).

With ``s`` chunks each chunk's dispatch/combine costs its share of the bytes plus the full path
latency (``comm_chunk(s)``), and each chunk's compute its share of the FLOPs plus one kernel launch.
Resources: the network (dispatch and combine share the inter-package links when ``shared_link``),
and the expert chiplets. An op starts when its input is ready and its resource is free; the
network serves the op that can start first (a combine on a tie). ``s = 1`` is the bulk schedule:
dispatch, weights, compute, combine one after the other (weights load while tokens arrive only when
``prefetch_weights``).
"""
from __future__ import annotations

from typing import Callable


def pipeline(s: int, dispatch_s: Callable[[int], float], compute_s: float, combine_s: Callable[[int], float],
             weights_s: float = 0.0, launch_s: float = 0.0, shared_link: bool = True,
             prefetch_weights: bool = True) -> tuple[float, list[dict]]:
    """Returns (layer pass seconds, per-chunk events [{chunk, op, start, end}])."""
    d, c = dispatch_s(s), combine_s(s)
    b = compute_s / s + launch_s
    events = []
    net = {"dispatch": 0.0, "combine": 0.0}       # next free time of each network resource
    net_key = (lambda op: "dispatch") if shared_link else (lambda op: op)
    comp_free = weights_ready = 0.0
    k_end = [None] * s
    nd = nc = 0
    while nc < s:
        start_d = net[net_key("dispatch")] if nd < s else float("inf")
        start_c = max(net[net_key("combine")], k_end[nc]) if nc < nd else float("inf")
        if start_c <= start_d:
            end = start_c + c
            net[net_key("combine")] = end
            events.append({"chunk": nc, "op": "combine", "start": start_c, "end": end})
            nc += 1
            continue
        end = start_d + d
        net[net_key("dispatch")] = end
        events.append({"chunk": nd, "op": "dispatch", "start": start_d, "end": end})
        if nd == 0 and weights_s > 0:            # prefetched from t = 0, or loaded once the tokens are in
            w0 = 0.0 if prefetch_weights else end
            weights_ready = w0 + weights_s
            events.append({"chunk": 0, "op": "weights", "start": w0, "end": weights_ready})
        ks = max(end, comp_free, weights_ready)
        k_end[nd] = comp_free = ks + b
        events.append({"chunk": nd, "op": "compute", "start": ks, "end": k_end[nd]})
        nd += 1
    return max(e["end"] for e in events), events
