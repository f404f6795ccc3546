"""Modelled iteration time of a placed DP x PP job: the simulated messages of one step.

- DP: per stage a ring all-reduce over the replicas (ring ordered by node id, as NCCL orders rings
  along the topology): 2(D-1) steps, each a phase where every member sends G/D bytes to its ring
  successor; all P rings run at once and contend on shared uplinks.
- PP: per micro-batch every stage boundary sends A bytes (p -> p+1) for all replicas at once; the
  pipeline fill/drain (2(P-1) transfers) plus a fraction ``pp_exposed`` of the 2 * n_micro steady
  state transfers sit on the critical path.
- iteration = compute_s + DP all-reduce + exposed PP transfers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from components.core.errors import require


@dataclass
class StepCost:
    grad_bytes: float = 4.4e10      # per node per stage: bf16 grads of its 8 TP ranks (175B / (P=8 x TP=8) params)
    act_bytes: float = 1.0e8        # per micro-batch stage boundary per node (seq 4096 x hidden 12288 x bf16)
    n_micro: int = 16
    pp_exposed: float = 0.25
    compute_s: float = 6.0

    @classmethod
    def from_config(cls, cfg: dict, key: str = "cost") -> "StepCost":
        allowed = set(cls.__dataclass_fields__)
        for k in cfg:
            require(k in allowed, f"{key}.{k}", cfg[k], "unknown key; allowed: " + ", ".join(sorted(allowed)))
        c = cls(**cfg)
        require(c.grad_bytes >= 0 and c.act_bytes >= 0, f"{key}.grad_bytes", c.grad_bytes, "non-negative byte counts")
        require(isinstance(c.n_micro, int) and c.n_micro >= 1, f"{key}.n_micro", c.n_micro, "a positive integer")
        require(0 <= c.pp_exposed <= 1, f"{key}.pp_exposed", c.pp_exposed, "a fraction in [0, 1]")
        require(c.compute_s >= 0, f"{key}.compute_s", c.compute_s, "non-negative seconds")
        return c


def dp_ring_messages(node_of: np.ndarray, grad_bytes: float):
    """One ring step of all P DP all-reduces: (src, dst, bytes)."""
    D, P = node_of.shape
    ring = np.sort(node_of, axis=0)                     # ring order = node id order, per stage
    src = ring.ravel()
    dst = np.roll(ring, -1, axis=0).ravel()
    keep = src != dst
    return src[keep], dst[keep], np.full(keep.sum(), grad_bytes / D)


def pp_messages(node_of: np.ndarray, act_bytes: float):
    """One micro-batch boundary transfer for every replica and stage: (src, dst, bytes)."""
    src = node_of[:, :-1].ravel()
    dst = node_of[:, 1:].ravel()
    return src, dst, np.full(src.size, act_bytes)


def iteration_time(node_of: np.ndarray, cost: StepCost, run_phase: Callable) -> dict:
    """``run_phase(src, dst, bytes, flow=...) -> seconds`` is the engine (vectorised) or the actor cluster."""
    D, P = node_of.shape
    ring_step = run_phase(*dp_ring_messages(node_of, cost.grad_bytes)) if D > 1 else 0.0
    pp_step = run_phase(*pp_messages(node_of, cost.act_bytes), flow="p2p") if P > 1 else 0.0
    dp_s = 2 * (D - 1) * ring_step
    pp_s = (2 * (P - 1) + cost.pp_exposed * 2 * cost.n_micro) * pp_step if P > 1 else 0.0
    return {"iter_time_s": cost.compute_s + dp_s + pp_s, "dp_allreduce_s": dp_s, "pp_exposed_s": pp_s,
            "dp_ring_step_s": ring_step, "pp_step_s": pp_step}
