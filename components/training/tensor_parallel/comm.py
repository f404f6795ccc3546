"""The all-reduce under Megatron tensor parallelism, counted, and the two autograd operators on it.

``f`` (:func:`copy_to`) is the identity forward and an all-reduce of the gradient backward (where a
replicated tensor enters a sharded computation); ``g`` (:func:`reduce_from`) all-reduces the partial
sums forward and passes the gradient through backward. Every all-reduce is one entry of
``comm.log``: ``(phase, nbytes)`` with phase ``fwd``, ``bwd`` or ``param`` (the bucketed gradients of
replicated parameters that sit between an ``f`` and a sharded layer, summed once per step).

Backends: :class:`GlooComm` (a gloo process group between rank actors), :class:`ThreadComm` (ranks
as threads of one process: Ray-free tests), :class:`CountingComm` (one rank alone: counts and
returns its own partial, for timing a rank's compute with the communication taken out).
Tensors stay on the device they come from (gloo: cpu only).
"""
from __future__ import annotations

import threading

import torch

from components.core import devices
from components.core.timing import timed


class Comm:
    """``all_reduce(t, phase)`` -> the sum of ``t`` over the ranks (a new tensor), logged."""

    rank: int = 0
    world: int = 1

    def __init__(self):
        self.log: list[tuple[str, int]] = []
        self.comm_s = 0.0           # wall time inside all-reduces, to the device's sync (real backends)

    def _sum(self, t: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _logged(self, t: torch.Tensor, phase: str) -> torch.Tensor:
        """A private copy of ``t`` to sum into, its bytes logged under ``phase``."""
        t = t.detach().contiguous().clone()
        self.log.append((phase, t.numel() * t.element_size()))
        return t

    def all_reduce(self, t: torch.Tensor, phase: str) -> torch.Tensor:
        t = self._logged(t, phase)
        dev = str(t.device)
        with timed(devices.clock(dev, "wall")) as e:
            out = self._sum(t)
            devices.synchronize(dev)
        self.comm_s += e.s
        return out

    def counts(self) -> dict:
        """All-reduces and bytes per phase since the last ``reset``."""
        out = {}
        for ph in ("fwd", "bwd", "param"):
            sizes = [n for p, n in self.log if p == ph]
            out[f"{ph}_allreduces"], out[f"{ph}_bytes"] = len(sizes), sum(sizes)
        return out

    def reset(self) -> None:
        self.log.clear()
        self.comm_s = 0.0


class CountingComm(Comm):
    """One rank with nobody to talk to: logs every all-reduce and returns the local partial."""

    def __init__(self, rank: int = 0, world: int = 2):
        super().__init__()
        self.rank, self.world = rank, world

    def all_reduce(self, t: torch.Tensor, phase: str) -> torch.Tensor:
        """Logged, not timed: nothing travels, and on a GPU no sync may land inside the rank's timed compute."""
        return self._logged(t, phase)


class ThreadComm:
    """``world`` ranks as threads of one process; ``handle(rank)`` is rank ``rank``'s Comm."""

    def __init__(self, world: int):
        self.world, self._buf, self._barrier = world, [None] * world, threading.Barrier(world, timeout=120)

    def handle(self, rank: int) -> Comm:
        outer = self

        class _Rank(Comm):
            def _sum(self, t):
                outer._buf[rank] = t
                outer._barrier.wait()
                out = outer._buf[0].clone()
                for other in outer._buf[1:]:      # rank order on every rank: identical results
                    out += other
                outer._barrier.wait()
                return out

        h = _Rank()
        h.rank, h.world = rank, self.world
        return h


class GlooComm(Comm):
    """A gloo process group of its own (``ProcessGroupGloo`` on a file store, loopback only)."""

    def __init__(self, store_path: str, rank: int, world: int, timeout_s: float = 120.0):
        import datetime
        import os

        import torch.distributed as dist

        super().__init__()
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")         # gloo's pair sockets on 127.0.0.1
        self.rank, self.world = rank, world
        store = dist.FileStore(store_path, world)
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = datetime.timedelta(seconds=timeout_s)
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        self.pg = dist.ProcessGroupGloo(store, rank, world, opts)

    def _sum(self, t):
        self.pg.allreduce([t]).wait()
        return t


class _CopyTo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.all_reduce(grad, "bwd"), None


class _ReduceFrom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm):
        return comm.all_reduce(x, "fwd")

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    """Megatron's f: identity forward, all-reduce of the gradient backward."""
    return _CopyTo.apply(x, comm)


def reduce_from(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    """Megatron's g: all-reduce forward, identity backward."""
    return _ReduceFrom.apply(x, comm)
