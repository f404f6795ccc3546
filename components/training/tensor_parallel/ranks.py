"""TP ranks that run: as threads of one process (tests) or as Ray actors over gloo (the real check).

A :class:`TPRank` holds one rank's shard and runs a training step's forward and backward (and the
``param`` all-reduce), returning logits, loss, named gradients and what its Comm logged. Actors are
the project's generic NodeActors, started here with ``num_cpus=0`` and killed after: each rank
actor process holds one gloo group of its own (file store in a temp dir, loopback sockets). A rank
actor that dies or goes silent raises :class:`TPActorDied` with Ray's reason, never a hang.

Devices: thread ranks and the :class:`RankTimer` run where the model they are given is (``ctx.device``);
rank actors run on cpu (the node actors hold no GPU, and gloo sums cpu tensors).
"""
from __future__ import annotations

import os
import tempfile
import threading
import time

import torch

from components.core import devices
from components.core.raytools import failure_reason
from components.core.timing import timed
from components.models.gpt import GPT, GPTConfig
from components.training.on_device import device_of
from components.training.tensor_parallel.comm import Comm, CountingComm, GlooComm, ThreadComm
from components.training.tensor_parallel.model import TPRankGPT, shard_state


class TPActorDied(RuntimeError):
    pass


class TPRank:
    """Rank ``rank`` of ``tp`` over ``comm`` (or a gloo group on ``store_path`` when comm is None), its
    shard on ``device`` (where ``step``'s batches must be)."""

    def __init__(self, cfg: dict, rank: int, tp: int, comm: Comm | None = None, store_path: str | None = None,
                 timeout_s: float = 120.0, threads: int = 1, fail: bool = False, device: str = "cpu"):
        torch.set_num_threads(threads)
        self.fail = fail                  # fault injection: the process exits at its step
        self.device = device
        self.comm = comm if comm is not None else GlooComm(store_path, rank, tp, timeout_s)
        self.model = TPRankGPT(GPTConfig(**cfg), rank, tp, self.comm).to(device)

    def load(self, state: dict) -> int:
        self.model.load_state_dict(state)
        return self.model.rank

    def step(self, x: torch.Tensor, y: torch.Tensor) -> dict:
        """Forward, backward, partial-gradient sync; what a training step computes before the update."""
        if self.fail:
            os._exit(17)
        self.comm.reset()
        self.model.zero_grad(set_to_none=True)
        with timed(devices.clock(self.device, "wall")) as wall:
            logits, loss = self.model(x, y)
            fwd = self.comm.counts()
            loss.backward()
            self.model.sync_partial_grads()
            devices.synchronize(self.device)
        return {"logits": logits.detach(), "loss": loss.item(), "counts": self.comm.counts(),
                "fwd_counts": fwd, "wall_s": wall.s, "comm_s": self.comm.comm_s,
                "grads": {n: p.grad.detach().clone() for n, p in self.model.named_parameters()}}


def reference(model: GPT, x: torch.Tensor, y: torch.Tensor) -> dict:
    """The single-process model's logits, loss and gradients on one batch (model left untouched)."""
    model.zero_grad(set_to_none=True)
    logits, loss = model(x, y)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return {"logits": logits.detach(), "loss": loss.item(), "grads": grads}


def run_threads(model: GPT, x, y, tp: int) -> list[dict]:
    """Every rank as a thread of this process (ThreadComm) on the model's device: the TP math without
    Ray or sockets."""
    tc, cfg, sd, dev = ThreadComm(tp), model.cfg.to_dict(), model.state_dict(), str(device_of(model))
    ranks = [TPRank(cfg, r, tp, comm=tc.handle(r), threads=torch.get_num_threads(), device=dev) for r in range(tp)]
    x, y = x.to(dev), y.to(dev)
    for r, rank in enumerate(ranks):
        rank.load(shard_state(sd, model.cfg, r, tp))
    out: list = [None] * tp
    errs: list = []

    def go(r):
        try:
            out[r] = ranks[r].step(x, y)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            errs.append(e)
            tc._barrier.abort()
    ts = [threading.Thread(target=go, args=(r,)) for r in range(tp)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]
    return out


def run_actors(model: GPT, x, y, tp: int, timeout_s: float = 120.0, fail_rank: int = -1) -> list[dict]:
    """Every rank on its own Ray actor (num_cpus=0, cpu) with a gloo group between them; ``model``,
    ``x`` and ``y`` on cpu.

    ``fail_rank``: that rank's process exits at the step (fault injection).
    """
    import ray
    from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

    from components.core.raytools import start_nodes

    cfg, sd = model.cfg.to_dict(), model.state_dict()
    nodes = start_nodes(tp, 0.0, "tp-rank")
    key = f"tp-{os.getpid()}-{time.time_ns()}"

    def get(refs, what):
        try:
            return ray.get(refs, timeout=timeout_s)
        except (RayActorError, ActorDiedError, ActorUnavailableError) as e:
            raise TPActorDied(f"TP rank actor died during {what}: {failure_reason(e)}") from e
        except RayTaskError as e:         # the surviving rank's collective saw its peer go
            raise TPActorDied(f"TP rank failed during {what}: {failure_reason(e)}") from e
        except GetTimeoutError as e:
            raise TPActorDied(f"TP rank actors gave no answer within {timeout_s:g} s during {what}") from e

    with tempfile.TemporaryDirectory(prefix="dtlab-tp-") as d:
        store = os.path.join(d, "store")
        try:
            get([n.host.remote(key, TPRank, cfg, r, tp, None, store, timeout_s, 1, r == fail_rank)
                 for r, n in enumerate(nodes)],
                "the gloo group set-up")
            get([n.call.remote(key, "load", shard_state(sd, model.cfg, r, tp)) for r, n in enumerate(nodes)], "load")
            return get([n.call.remote(key, "step", x, y) for n in nodes], "the TP step")
        finally:
            for n in nodes:
                ray.kill(n)


class RankTimer:
    """Measured compute of one rank's training step (forward, backward, AdamW on its shard) with the
    communication taken out (:class:`CountingComm`). ``sample`` loads the model's current weights and
    times ``repeats`` steps; ``compute_s`` is the best over every sample, so samples spread over a
    run make one busy moment of a shared machine count less. ``log`` is one step's all-reduces.
    The rank runs on the model's device (``sample``'s batches there too); a step is timed on the wall
    clock to the device's sync."""

    def __init__(self, model: GPT, tp: int, threads: int = 1):
        self.model, self.tp, self.device = model, tp, str(device_of(model))
        self.rank = TPRank(model.cfg.to_dict(), 0, tp, comm=CountingComm(0, tp), threads=threads, device=self.device)
        self.opt = torch.optim.AdamW(self.rank.model.parameters(), lr=1e-9)
        self.compute_s, self.last = float("inf"), None

    def sample(self, x, y, repeats: int = 1) -> float:
        self.rank.load(shard_state(self.model.state_dict(), self.model.cfg, 0, self.tp))
        for _ in range(repeats):
            with timed(devices.clock(self.device, "wall")) as t:
                self.last = self.rank.step(x, y)
                self.opt.step()
                devices.synchronize(self.device)
            self.compute_s = min(self.compute_s, t.s)
        return self.compute_s

    def result(self) -> dict:
        return {"compute_s": self.compute_s, "counts": self.last["counts"], "fwd_counts": self.last["fwd_counts"],
                "sizes": [n for _, n in self.rank.comm.log]}
