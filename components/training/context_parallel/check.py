"""Exactness of the ring, on a trained model's first attention layer: the vectorised ring (the
training path) and the actor ring against each other, and, when nothing is compressed, against
full causal attention on one process (``F.scaled_dot_product_attention``), forward and backward.
The vectorised ring and full attention run on the model's device; the actor ring on cpu (its node
actors hold no GPU), against the vectorised ring and full attention run on cpu on the same inputs.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

from components.core import devices
from components.training.context_parallel.actors import run_actor_ring
from components.training.context_parallel.ring import index_records, make_expand, ring_attention
from components.training.context_parallel.wire import make_codec
from components.training.on_device import device_of


def layer0_inputs(model, x: torch.Tensor) -> dict:
    """q, k, v, wire variables, bases and index of layer 0 for tokens ``x`` (detached)."""
    with torch.no_grad():
        h = model.tok(x) + model.pos(torch.arange(x.shape[1], device=x.device))
        attn = model.blocks[0].attn
        q, k, v, wk, wv, Bk, Bv, idx = attn.qkv_wire(model.blocks[0].ln1(h))
    return {"q": q, "k": k, "v": v, "wk": wk, "wv": wv, "basis_k": Bk, "basis_v": Bv, "idx": idx,
            "spec": attn.spec}


def _leaves(t: dict, dense: bool):
    q, k, v = (t[n].clone().requires_grad_(True) for n in ("q", "k", "v"))
    wk, wv = (None, None) if dense else (t["wk"].clone().requires_grad_(True), t["wv"].clone().requires_grad_(True))
    return q, k, v, wk, wv


def vectorised(t: dict, dout: torch.Tensor) -> dict:
    """The training path's ring: output and gradients w.r.t. q, k, v (and the wire variables)."""
    spec = t["spec"]
    dense = spec.kv == "dense"
    q, k, v, wk, wv = _leaves(t, dense)
    sink: list = []
    T = q.shape[2]
    out = ring_attention(q, k, v, spec.chunks, wk, wv, make_expand(spec.kv, t["basis_k"], t["basis_v"], t["idx"],
                                                                    T // spec.chunks),
                         make_codec(spec.codec, spec.bucket), sink)
    sink += index_records(t["idx"], spec.M, spec.chunks)
    leaves = [q, k, v] + ([] if dense else [wk, wv])
    grads = torch.autograd.grad(out, leaves, dout)
    res = {"out": out.detach(), "dq": grads[0], "dk": grads[1], "dv": grads[2], "sink": sink}
    if not dense:
        res["dwk"], res["dwv"] = grads[3], grads[4]
    return res


def full_attention(t: dict, dout: torch.Tensor) -> dict:
    q, k, v = (t[n].clone().requires_grad_(True) for n in ("q", "k", "v"))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    return {"out": out.detach(), "dq": dq, "dk": dk, "dv": dv}


def actors(t: dict, dout: torch.Tensor, nodes=None, key: str = "cp", fail_rank: int = -1,
           timeout_s: float = 300.0) -> dict:
    """The same layer on rank actors, gathered back into (B, H, T, .) tensors."""
    spec = t["spec"]
    P = spec.chunks
    Tc = t["q"].shape[2] // P
    cut = lambda x, i: None if x is None else x[:, :, i * Tc:(i + 1) * Tc].contiguous()  # noqa: E731
    chunks = [{n: cut(t[n], i) for n in ("q", "k", "v", "wk", "wv", "idx")} for i in range(P)]
    r = run_actor_ring(chunks, spec.kv, spec.codec, spec.bucket, spec.M, t["basis_k"], t["basis_v"],
                       [cut(dout, i) for i in range(P)], nodes=nodes, key=key, fail_rank=fail_rank,
                       timeout_s=timeout_s)
    cat = lambda name: torch.cat([g[name] for g in r["grads"]], dim=2)  # noqa: E731
    res = {"out": torch.cat(r["out"], dim=2), "dq": cat("dq"), "dk": cat("dk"), "dv": cat("dv"),
           "fwd_bytes": r["fwd_bytes"], "bwd_bytes": r["bwd_bytes"], "wall_s": r["wall_s"]}
    if spec.kv == "dense":                       # the wire variable is k itself: one gradient
        res["dk"], res["dv"] = res["dk"] + cat("dwk"), res["dv"] + cat("dwv")
    else:
        res["dwk"], res["dwv"] = cat("dwk"), cat("dwv")
    return res


def max_err(a: dict, b: dict, names) -> float:
    return max(float((a[n] - b[n]).abs().max()) for n in names if n in a and n in b)


def exactness(model, x: torch.Tensor, seed: int, nodes=None, key: str = "cp", fail_rank: int = -1,
              use_actors: bool = True, timeout_s: float = 300.0) -> dict:
    """Metrics: actor vs vectorised (every codec); vs full attention where nothing is compressed.
    ``x`` on any device; ``dout`` drawn on cpu (the same on every device) and moved to the model's."""
    dev = device_of(model)
    t = layer0_inputs(model, x.to(dev))
    dout = torch.randn(t["q"].shape, generator=torch.Generator().manual_seed(seed)).to(dev)
    vec = vectorised(t, dout)
    out = {"vec_fwd_bytes": sum(n * h for kind, n, h in vec["sink"] if kind in ("fwd", "idx")),
           "vec_bwd_bytes": sum(n * h for kind, n, h in vec["sink"] if kind == "bwd")}
    grads = ("dq", "dk", "dv", "dwk", "dwv")
    exact = t["spec"].kv == "dense" and t["spec"].codec == "fp32"
    if exact:
        full = full_attention(t, dout)
        out["vec_vs_full_fwd_err"] = max_err(vec, full, ["out"])
        out["vec_vs_full_grad_err"] = max_err(vec, full, grads)
    if use_actors:
        if dev.type != "cpu":       # the actors' cpu arithmetic against the same paths on cpu
            t, dout = devices.to_cpu(t), dout.cpu()
            vec = vectorised(t, dout)
            if exact:
                full = full_attention(t, dout)
        act = actors(t, dout, nodes, key, fail_rank, timeout_s)
        out["actor_vs_vec_err"] = max(max_err(act, vec, ["out"]), max_err(act, vec, grads))
        out["actor_fwd_bytes"], out["actor_bwd_bytes"] = act["fwd_bytes"], act["bwd_bytes"]
        out["actor_bytes_match"] = float(act["fwd_bytes"] == out["vec_fwd_bytes"]
                                         and act["bwd_bytes"] == out["vec_bwd_bytes"])
        out["actor_wall_s"] = act["wall_s"]
        if exact:
            out["actor_vs_full_fwd_err"] = max_err(act, full, ["out"])
            out["actor_vs_full_grad_err"] = max_err(act, full, grads)
    if exact:
        out["max_ring_abs_err"] = max(v for k, v in out.items() if k.endswith("_fwd_err"))
        out["max_ring_grad_abs_err"] = max(v for k, v in out.items() if k.endswith("_grad_err"))
    return out
