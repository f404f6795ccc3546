"""The simulated training step of a context-parallel ring on the shared ``Link``.

Compute is a FLOP count at ``gflops`` (one rate for every rank; the default is this CPU's
measured rate at these shapes, see benchmarks/bench_context_parallel_compression.py
--calibrate): per layer the token-wise work (Q/K/V and output projections, MLP, 2 B Tc (12 d^2)
forward) and one (Tc x Tc) attention block per hop (4 B H Tc^2 d_h forward); backward is twice
the forward. Encoding and decoding are not charged (tiny next to the block).

Communication (causal ring, no zig-zag): block j leaves rank j after the projections and reaches
rank j+s after s hops; each hop costs ``link.transfer_s(one block's payload)`` and overlaps the
block compute of the receiver. Rank i merges its own block, then block i-s when it has arrived
and the previous block is done; the layer's attention phase ends when the last rank is done.
The backward mirrors it with the dK/dV accumulators. Weight gradients are all-reduced once per
step over the ring (same bytes for every variant); that time is reported separately and not in
``sim_step_s``, since the claims are about the context-parallel traffic.
"""
from __future__ import annotations

from components.core.netsim import Link


def ring_phase_s(block_s: float, hop_s: float, chunks: int) -> float:
    """When the slowest rank has merged all its blocks: own block, then block i-s once arrived."""
    end = 0.0
    for i in range(chunks):
        t = block_s
        for s in range(1, i + 1):
            t = max(t, s * hop_s) + block_s
        end = max(end, t)
    return end


def flops(batch: int, chunk: int, d_model: int, n_head: int, n_layer: int, vocab: int) -> dict:
    """Forward FLOPs of one rank: token-wise work per layer, one attention block, the LM head."""
    dh = d_model // n_head
    return {"tokenwise": 2 * batch * chunk * 12 * d_model ** 2,
            "block": 4 * batch * n_head * chunk ** 2 * dh,
            "head": 2 * batch * chunk * d_model * vocab}


def sim_step(layers: list[dict], fl: dict, chunks: int, link: Link, gflops: float) -> dict:
    """Seconds of one step: compute, attention phases (with hops overlapped), exposed comm."""
    rate = gflops * 1e9
    tok, blk, head = fl["tokenwise"] / rate, fl["block"] / rate, fl["head"] / rate
    fwd = bwd = 0.0
    for st in layers:
        fwd += tok + ring_phase_s(blk, link.transfer_s(st["fwd_block"]), chunks)
        bwd += 2 * tok + ring_phase_s(2 * blk, link.transfer_s(st["bwd_block"]), chunks)
    compute = 3 * head + len(layers) * (3 * tok + 3 * blk * chunks)
    step = fwd + bwd + 3 * head
    return {"sim_step_s": step, "compute_s": compute, "exposed_comm_s": step - compute,
            "block_compute_s": blk, "hop_s": link.transfer_s(layers[0]["fwd_block"]) if layers else 0.0}


def allreduce_s(link: Link, n_params: int, chunks: int) -> float:
    """fp32 ring all-reduce of the weight gradients over the ring's ranks."""
    return link.ring_allreduce_s(4 * n_params, chunks)
