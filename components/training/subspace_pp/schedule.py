"""Simulated step time of a GPipe schedule on the shared ``Link``, from measured compute and real bytes.

GPipe (fill-drain): every stage runs the forwards of micro-batches 0..M-1, then their backwards in
the same order, then its optimizer step. A forward of (s, m) starts when stage s is free and the
activation of m from stage s-1 has arrived; a backward of (s, m) when the gradient from stage s+1
has arrived. Each boundary is a full-duplex link: per direction, messages go out one after another
in the order they are produced (a message holds the wire for its serialisation time
``Link.transfer_s(n) - latency`` and arrives ``Link.transfer_s(n)`` after it starts). So a transfer
overlaps the compute of the other micro-batches, as the schedule allows.
"""
from __future__ import annotations

from components.core.netsim import Link


def gpipe_step_s(link: Link, fwd_s, bwd_s, fwd_bytes, bwd_bytes, opt_s=None) -> float:
    """Makespan of one GPipe step.

    ``fwd_s[s][m]`` / ``bwd_s[s][m]``: compute seconds of stage s on micro-batch m;
    ``fwd_bytes[s][m]``: bytes stage s sends to s+1 for m (s < S-1); ``bwd_bytes[s][m]``: bytes
    stage s+1 sends back to s for m; ``opt_s[s]``: the optimizer step of stage s.
    """
    S, M = len(fwd_s), len(fwd_s[0])
    free = [0.0] * S                       # when each stage's compute is next free
    wire_f = [0.0] * max(S - 1, 0)         # when each boundary's forward wire is next free
    wire_b = [0.0] * max(S - 1, 0)
    arrive = [[0.0] * M for _ in range(S)]  # forward input of (s, m) available
    for m in range(M):
        for s in range(S):
            start = max(free[s], arrive[s][m])
            free[s] = start + fwd_s[s][m]
            if s < S - 1:
                n = fwd_bytes[s][m]
                out = max(free[s], wire_f[s])
                wire_f[s] = out + link.transfer_s(n) - link.latency_s
                arrive[s + 1][m] = out + link.transfer_s(n)
    garrive = [[0.0] * M for _ in range(S)]  # gradient of (s, m) available (the last stage: its loss)
    for m in range(M):
        for s in range(S - 1, -1, -1):
            start = max(free[s], garrive[s][m] if s < S - 1 else 0.0)
            free[s] = start + bwd_s[s][m]
            if s > 0:
                n = bwd_bytes[s - 1][m]
                out = max(free[s], wire_b[s - 1])
                wire_b[s - 1] = out + link.transfer_s(n) - link.latency_s
                garrive[s - 1][m] = out + link.transfer_s(n)
    ends = [free[s] + (opt_s[s] if opt_s else 0.0) for s in range(S)]
    return max(ends)
