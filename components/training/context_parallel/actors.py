"""The ring on Ray actors: one actor per rank holding its chunk; payloads travel as object refs.

Forward: every rank encodes its own block; at hop s rank i receives (the ref rank i-1 returned at
hop s-1), decodes, keeps the decoded block as a leaf and returns the same bytes for rank i+1
(causal: block j stops at rank P-1). Each rank attends over its own block and the received ones, in
arrival order, in one fused call (:func:`ring.rank_attention_fused`, as the training ring).
Backward: ``dO`` per rank; the dK/dV accumulator of block j starts at rank P-1 and moves down the
ring to j, each rank adding its partial and re-encoding (the math of :class:`ring.HopChain`).
The driver only passes refs along; bytes are counted by the actors on what they received.

Ranks live on the experiment's NodeActor pool (``ctx.nodes``) or on actors started here with
``num_cpus=0``. A rank actor that dies raises :class:`RingActorDied` naming the rank and Ray's error.
"""
from __future__ import annotations

import os
import time

import torch

from components.core.raytools import failure_reason
from components.training.context_parallel.ring import expand_block, rank_attention_fused
from components.training.context_parallel.wire import decode_index, encode_index, make_codec


class RingActorDied(RuntimeError):
    pass


class RingRank:
    """Rank ``rank`` of a ring: its chunk's q, own k/v, wire variables, bases and indices."""

    def __init__(self, rank: int, chunks: int, kv: str, codec: str, bucket: int, M: int,
                 basis_k=None, basis_v=None, fail_hop: int = 0):
        self.rank, self.P, self.kv, self.M = rank, chunks, kv, M
        self.codec = make_codec(codec, bucket)
        self.basis = {"k": basis_k, "v": basis_v}
        self.fail_hop = fail_hop                  # fault injection: die on receiving hop ``fail_hop``
        self.received: dict[int, dict] = {}
        self.bytes_in = {"fwd": 0, "bwd": 0}
        self.hops_in = {"fwd": 0, "bwd": 0}

    def load(self, q, k, v, wk, wv, idx):
        self.q, self.k, self.v = (t.clone().requires_grad_(True) for t in (q, k, v))
        self.wk, self.wv, self.idx = wk.clone(), wv.clone(), idx
        self.received.clear()
        return self.rank

    def own_payload(self) -> dict:
        """Block ``rank`` as bytes: K and V wire variables (codec) and the index (subspace, M > 1)."""
        out = {"j": self.rank, "k": self.codec.encode(self.wk), "v": self.codec.encode(self.wv),
               "shape": tuple(self.wk.shape), "idx": torch.empty(0, dtype=torch.uint8)}
        if self.kv == "subspace" and self.M > 1:
            out["idx"] = encode_index(self.idx, self.M)
        return out

    def receive(self, payload: dict, hop: int) -> dict:
        """Decode block ``payload['j']``, keep it for the merge, pass the same bytes on."""
        if self.fail_hop and hop == self.fail_hop:
            os._exit(17)
        self.bytes_in["fwd"] += sum(int(payload[n].numel()) for n in ("k", "v", "idx"))
        self.hops_in["fwd"] += 1
        shape = payload["shape"]
        idx = decode_index(payload["idx"], self.M, shape[:3]) if self.kv == "subspace" else None
        leaves = {n: self.codec.decode(payload[n], shape).requires_grad_(True) for n in ("k", "v")}
        self.received[payload["j"]] = {"w": leaves, "idx": idx}
        return payload

    def attend(self) -> torch.Tensor:
        blocks = []
        for j in sorted(self.received, reverse=True):               # arrival order: i-1, ..., 0
            r = self.received[j]
            blocks.append(tuple(expand_block(self.kv, self.basis[n], r["idx"], r["w"][n]) for n in ("k", "v")))
        self.out = rank_attention_fused(self.q, self.k, self.v, blocks)
        return self.out.detach()

    def backward(self, dout: torch.Tensor) -> int:
        self.out.backward(dout)
        return self.rank

    def grad_step(self, j: int, payload: dict | None) -> dict:
        """Add this rank's partial dK/dV of block j to the accumulator (None: start it), re-encode."""
        if payload is not None:
            self.bytes_in["bwd"] += sum(int(payload[n].numel()) for n in ("k", "v"))
            self.hops_in["bwd"] += 1
        shape = self.received[j]["w"]["k"].shape
        out = {}
        for n in ("k", "v"):
            g = self.received[j]["w"][n].grad
            part = g if payload is None else self.codec.decode(payload[n], shape) + g
            out[n] = self.codec.encode(part)
        return out

    def grad_finish(self, *payloads: dict) -> dict:
        """The owner: decoded accumulators of its block, and its local gradients."""
        dwk = torch.zeros_like(self.wk)
        dwv = torch.zeros_like(self.wv)
        for p in payloads:
            self.bytes_in["bwd"] += sum(int(p[n].numel()) for n in ("k", "v"))
            self.hops_in["bwd"] += 1
            dwk = self.codec.decode(p["k"], self.wk.shape)
            dwv = self.codec.decode(p["v"], self.wv.shape)
        return {"dq": self.q.grad, "dk": self.k.grad, "dv": self.v.grad, "dwk": dwk, "dwv": dwv,
                "bytes_in": dict(self.bytes_in), "hops_in": dict(self.hops_in)}


def run_actor_ring(chunks_in: list[dict], kv: str, codec: str, bucket: int, M: int, basis_k, basis_v,
                   douts: list[torch.Tensor], nodes=None, key: str = "cp", fail_rank: int = -1,
                   fail_hop: int = 1, timeout_s: float = 300.0) -> dict:
    """Forward and backward of one attention layer on ``len(chunks_in)`` rank actors.

    ``chunks_in[i]`` holds rank i's q, k, v, wk, wv, idx. Returns per-rank outputs and gradients
    and the bytes/hops the actors received. Own actors (``num_cpus=0``) when ``nodes`` is None.
    """
    import ray
    from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError

    P = len(chunks_in)
    own = nodes is None
    if own:
        from components.core.raytools import start_nodes

        nodes = start_nodes(P, 0.0, "cp-rank")
    nodes = list(nodes[:P])
    if len(nodes) < P:
        raise ValueError(f"{P} ring ranks need as many actors, got {len(nodes)}")

    def call(i, method, *args):
        return nodes[i].call.remote(key, method, *args)

    def get(refs, what):
        try:
            return ray.get(refs, timeout=timeout_s)
        except (RayActorError, ActorDiedError, ActorUnavailableError) as e:
            raise RingActorDied(f"ring actor died during {what}: {failure_reason(e)}") from e
        except GetTimeoutError as e:
            raise RingActorDied(f"ring actors gave no answer within {timeout_s:g} s during {what}") from e

    t0 = time.perf_counter()
    try:
        get([nodes[i].host.remote(key, RingRank, i, P, kv, codec, bucket, M, basis_k, basis_v,
                                  fail_hop if i == fail_rank else 0) for i in range(P)], "set-up")
        get([call(i, "load", *(chunks_in[i][n] for n in ("q", "k", "v", "wk", "wv", "idx"))) for i in range(P)],
            "load")
        # forward: at hop s rank i >= s receives block i-s from rank i-1
        moving = {i: call(i, "own_payload") for i in range(P - 1)}
        done = []
        for s in range(1, P):
            nxt = {}
            for i in range(s, P):
                ref = call(i, "receive", moving[i - 1], s)
                done.append(ref)
                if i < P - 1:
                    nxt[i] = ref
            moving = nxt
        get(done, "the forward hops")
        outs = get([call(i, "attend") for i in range(P)], "the forward merge")
        get([call(i, "backward", douts[i]) for i in range(P)], "the local backward")
        # backward: block j's accumulator from rank P-1 down to j+1, then home to j
        home: dict[int, list] = {j: [] for j in range(P)}
        for j in range(P - 1):
            acc = None
            for i in range(P - 1, j, -1):
                acc = call(i, "grad_step", j, acc)
            home[j].append(acc)
        grads = get([call(j, "grad_finish", *home[j]) for j in range(P)], "the backward hops")
    finally:
        try:
            ray.get([n.drop.remote(key) for n in nodes], timeout=30)
        except Exception:  # noqa: BLE001 - a dead actor has nothing to drop
            pass
        if own:
            for n in nodes:
                ray.kill(n)
    return {"out": outs, "grads": grads, "wall_s": time.perf_counter() - t0,
            "fwd_bytes": sum(g["bytes_in"]["fwd"] for g in grads), "bwd_bytes": sum(g["bytes_in"]["bwd"] for g in grads),
            "fwd_hops": sum(g["hops_in"]["fwd"] for g in grads), "bwd_hops": sum(g["hops_in"]["bwd"] for g in grads)}
