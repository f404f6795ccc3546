"""TP-``tp`` against the single-process model on one batch: logits, loss and every gradient.

The ranks' gradients are reassembled into the full model's (:func:`model.gather_grads`); the
replicated ones must also agree across ranks. Counts and bytes are what the ranks' Comms logged.
Thread ranks run on the model's device; rank actors on cpu (their node actors hold no GPU), against the
single-process model on cpu too, so an actor check compares one device's arithmetic with itself.
"""
from __future__ import annotations

import copy

import torch

from components.models.gpt import GPT
from components.training.on_device import device_of
from components.training.tensor_parallel.model import gather_grads, is_sharded
from components.training.tensor_parallel.ranks import reference, run_actors, run_threads


def compare(ref: dict, ranks: list[dict], model: GPT, tp: int) -> dict:
    """Max absolute errors of TP vs single process, and the rank-0 all-reduce log."""
    full = gather_grads([r["grads"] for r in ranks], model.cfg, tp)
    grad_err = max(float((full[n] - g).abs().max()) for n, g in ref["grads"].items())
    fwd_err = max(float((r["logits"] - ref["logits"]).abs().max()) for r in ranks)
    loss_err = max(abs(r["loss"] - ref["loss"]) for r in ranks)
    spread = max(float((ranks[0]["grads"][n] - r["grads"][n]).abs().max())
                 for r in ranks[1:] for n in ranks[0]["grads"] if not is_sharded(n, model.cfg, tp)) \
        if tp > 1 else 0.0
    c, f = ranks[0]["counts"], ranks[0]["fwd_counts"]
    return {"tp_fwd_abs_err": max(fwd_err, loss_err), "tp_grad_abs_err": grad_err, "tp_replica_spread": spread,
            "max_tp_abs_err": max(fwd_err, loss_err, grad_err, spread),
            "allreduces_per_forward": float(f["fwd_allreduces"]), "allreduces_per_backward": float(c["bwd_allreduces"]),
            "param_allreduces_per_step": float(c["param_allreduces"]),
            "allreduces_per_step": float(c["fwd_allreduces"] + c["bwd_allreduces"] + c["param_allreduces"]),
            "allreduce_bytes_per_step": float(c["fwd_bytes"] + c["bwd_bytes"] + c["param_bytes"]),
            "counts_equal_across_ranks": float(all(r["counts"] == c for r in ranks))}


def tp_exactness(model: GPT, x: torch.Tensor, y: torch.Tensor, tp: int, use_actors: bool = True,
                 timeout_s: float = 120.0, fail_rank: int = -1) -> dict:
    """One step on ``tp`` rank actors (gloo, cpu) or threads (the model's device) against the
    single-process model; ``x``, ``y`` on any device."""
    if use_actors and device_of(model).type != "cpu":
        model = copy.deepcopy(model).to("cpu")
    dev = device_of(model)
    x, y = x.to(dev), y.to(dev)
    ref = reference(model, x, y)
    ranks = run_actors(model, x, y, tp, timeout_s, fail_rank) if use_actors else run_threads(model, x, y, tp)
    out = compare(ref, ranks, model, tp)
    out["tp_check_wall_s"] = max(r["wall_s"] for r in ranks)
    out["tp_check_comm_s"] = max(r["comm_s"] for r in ranks)
    return out
