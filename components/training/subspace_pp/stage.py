"""One pipeline stage: its module, its optimizer and the codecs of its two boundaries.

Hosted in a Ray actor (:func:`start_stages`) or in this process behind the same call interface
(:func:`local_stages`: ``stage.forward.remote(...)`` runs the call at once), so one driver loop runs both.
Per micro-batch the stage keeps what autograd needs for the backward: the tensor it sent and the
leaf it received. It records, per step, the compute time of every forward and backward (on the clock of
its device, ``components.core.devices.clock``: thread CPU time on cpu, wall time to the device's sync on
cuda), the bytes of every message it produced, and the relative error of what the next stage rebuilds.

A stage runs on its ``device``: its module, optimizer state and codec constants live there, and the
token ids and targets the driver draws on cpu are moved there. Stage actors run on cpu (Ray gives them
no GPU); :func:`local_stages` runs the pipeline on the technique's device.
"""
from __future__ import annotations

import os
import resource

import torch
from torch.nn import functional as F

from components.core import devices
from components.core.timing import timed
from components.training.subspace_pp.codecs import BoundaryCodec
from components.training.subspace_pp.model import Stage


class StageWorker:
    """Stage ``index`` of ``n_stages``; ``recv``/``send`` are the codecs of its input/output boundary."""

    def __init__(self, index: int, n_stages: int, module: Stage, recv: BoundaryCodec | None,
                 send: BoundaryCodec | None, lr: float, weight_decay: float, micro_batches: int,
                 die_at_step: int = -1, threads: int = 1, device: str = "cpu"):
        torch.set_num_threads(threads)
        self.device, self.clock = device, devices.clock(device)
        self.index, self.n_stages, self.module = index, n_stages, module.to(device)
        self.recv = recv.to(device) if recv is not None else None
        self.send = send.to(device) if send is not None else None
        self.M = micro_batches
        self.die_at_step = die_at_step
        self.opt = torch.optim.AdamW(self.module.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
        self.stash: dict[int, tuple] = {}
        self.max_rel_err = 0.0
        self._reset()

    def _reset(self) -> None:
        self.fwd_s = [0.0] * self.M
        self.bwd_s = [0.0] * self.M
        self.fwd_bytes = [0] * self.M
        self.bwd_bytes = [0] * self.M

    @property
    def last(self) -> bool:
        return self.index == self.n_stages - 1

    def _input(self, inp):
        """(stream or token ids, leaf to take the gradient of, token ids) from the previous stage."""
        if self.index == 0:
            inp = inp.to(self.device)
            return inp, None, inp
        payload, shape, tok = inp
        t_hat, tok_rx = self.recv.decode(payload, shape)
        tok = tok_rx if tok_rx is not None else tok
        leaf = t_hat.requires_grad_(True)
        return self.recv.post(leaf, tok), leaf, tok

    def forward(self, step: int, m: int, inp, targets: torch.Tensor | None = None, train: bool = True):
        """Forward of micro-batch ``m``. Returns the message for the next stage ``(payload, (B, T),
        tok)`` (``tok`` only where the codec itself does not carry the ids and the next stage
        needs them: never, as only SSN needs them and carries them), or the loss on the last stage."""
        if train and step == self.die_at_step:
            os._exit(17)                           # fault injection: the stage process dies mid-run
        with timed(self.clock) as span, torch.set_grad_enabled(train):
            x, leaf, tok = self._input(inp)
            y = self.module(x)
            if self.last:
                loss = F.cross_entropy(y.reshape(-1, y.size(-1)), targets.to(self.device).reshape(-1))
                out = float(loss.detach())
                if train:
                    self.stash[m] = (loss / self.M, leaf)
            else:
                t = self.send.pre(y, tok)
                payload = self.send.encode(t, tok)
                shape = tuple(y.shape[:2])
                if train:
                    self.stash[m] = (t, leaf, shape)
                    self.fwd_bytes[m] = int(payload.numel())
                    with torch.no_grad():
                        t_hat, tok_rx = self.send.decode(payload, shape)
                        x_rec = self.send.post(t_hat, tok_rx if tok_rx is not None else tok)
                        err = float((x_rec - y).norm() / y.norm().clamp_min(1e-30))
                    self.max_rel_err = max(self.max_rel_err, err)
                out = (payload, shape, None)
            devices.synchronize(self.device)
        if train:
            self.fwd_s[m] = span.s
        return out

    def backward(self, m: int, gmsg=None):
        """Backward of micro-batch ``m``; returns the gradient message for the previous stage."""
        with timed(self.clock) as span:
            if self.last:
                loss, leaf = self.stash.pop(m)
                loss.backward()
            else:
                t, leaf, shape = self.stash.pop(m)
                t.backward(self.send.decode_grad(gmsg, shape))
            out = None
            if leaf is not None:
                out = self.recv.encode_grad(leaf.grad)
                self.bwd_bytes[m] = int(out.numel())
            devices.synchronize(self.device)
        self.bwd_s[m] = span.s
        return out

    def grads(self) -> dict[str, torch.Tensor]:
        return {n: p.grad.detach().clone() for n, p in self.module.named_parameters() if p.grad is not None}

    def weights(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.module.named_parameters()}

    def step(self, lr: float) -> dict:
        """Optimizer step at ``lr``; returns this step's timings and bytes, then resets them."""
        with timed(self.clock) as span:
            for g in self.opt.param_groups:
                g["lr"] = lr
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            devices.synchronize(self.device)
        out = {"fwd_s": self.fwd_s, "bwd_s": self.bwd_s, "fwd_bytes": self.fwd_bytes, "bwd_bytes": self.bwd_bytes,
               "opt_s": span.s}
        self._reset()
        return out

    def stats(self) -> dict:
        return {"max_rel_err": self.max_rel_err,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                "pid": os.getpid()}

    def ping(self) -> int:
        return self.index


def start_stages(workers_args: list[dict]):
    """One Ray actor per stage (``num_cpus=0``: the variant's task already holds the CPU budget), on cpu."""
    import ray

    cls = ray.remote(num_cpus=0, max_restarts=0)(StageWorker)
    return [cls.options(name=None).remote(**a) for a in workers_args]


class Done:
    """The value of a call that already ran in this process: what an ObjectRef is to a Ray actor."""

    def __init__(self, value):
        self.value = value


def _received(x):
    """An argument as the callee receives it: a finished call's value, tensors copied as Ray would."""
    if isinstance(x, Done):
        x = x.value
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, tuple):
        return tuple(_received(v) for v in x)
    return x


class _LocalMethod:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return Done(self.fn(*(_received(a) for a in args)))


class LocalStage:
    """A :class:`StageWorker` in this process with the actor call interface (``stage.method.remote``)."""

    def __init__(self, worker: StageWorker):
        self.worker = worker

    def __getattr__(self, name):
        return _LocalMethod(getattr(self.worker, name))


def local_stages(workers_args: list[dict], device: str = "cpu") -> list[LocalStage]:
    """The stages of :func:`start_stages` in this process (same code, no Ray calls or object transfers), on
    ``device`` (their modules and codecs are moved there in place)."""
    return [LocalStage(StageWorker(**a, device=device)) for a in workers_args]
