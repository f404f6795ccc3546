"""DUO's fast/slow update inside real DDP.

Step t on every worker (spec sheet, "our implementable reading"):

1. ``before_forward``: launch the slow path, an async fp32 all-reduce of the full-precision local
   gradient cached at step t-1 (``dist.all_reduce(async_op=True)`` on its own gloo group), so it runs
   while the forward computes.
2. backward: the DDP comm hook (:func:`components.training.ddp.hooks.codec_hook` with ``cache_full``)
   caches ``g_t`` and all-gathers its low-bit code -> ``qbar_t`` (0-bit: nothing sent, ``qbar_t = 0``).
3. ``after_backward``: wait for the slow path -> ``gbar_{t-1}``; commit
   ``c_t, S_t = Opt.step(c_{t-1}, S_{t-1}, gbar_{t-1})``; working weights
   ``w_{t+1} = Opt.preview(c_t, S_t, qbar_t)`` (same math, optimizer state not written).
4. ``finish``: reduce and commit the last cached gradient, then ``w = c``.

For SGD this is ``w_{t+1} = w_t - lr qbar_t - lr (gbar_{t-1} - qbar_{t-1})``: each quantization error
is replaced by the exact gradient one step later.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from components.compression.torch_codecs import make_torch_codec
from components.core.registry import register
from components.training.ddp import hooks
from components.training.ddp.strategies import Strategy


@register("ddp_strategy", "duo", summary="DUO: low-bit fast sync + tentative update; the cached exact gradient "
          "all-reduced behind the next forward and committed one step late")
class DuoStrategy(Strategy):
    def __init__(self, ddp, cfg, flat):
        super().__init__(ddp, cfg, flat)
        self.committed = [self.flat.detach().clone()]
        self.slow_group = dist.new_group(backend="gloo")  # slow path on its own channel
        self.world = dist.get_world_size()
        self.pending = None       # (work, buffer) of the in-flight slow reduction
        self.cached = False       # a full-precision gradient waits in the cache
        self.prev_lr = None       # learning rate of the step whose gradient is being reduced
        self.slow = hooks.CommStats()

    def attach(self):
        self.state = hooks.CodecState(make_torch_codec(self.cfg["bits"], self.cfg["bucket"]),
                                      cache_offsets={id(p): o for p, o in zip(self.module_params, self.offsets)},
                                      cache=torch.zeros_like(self.flat))
        self.ddp.register_comm_hook(self.state, hooks.codec_hook)
        self.paths = {"fast": self.state.stats, "slow": self.slow}

    def _launch(self) -> None:
        """Start the all-reduce of the cached full-precision gradient (parameter order, local sum)."""
        if self.pending is not None or not self.cached:
            return
        buf = self.state.cache
        self.state.cache = torch.zeros_like(buf)  # the next backward caches into a fresh vector
        self.cached = False
        self.t_launch = time.perf_counter()
        self.pending = (dist.all_reduce(buf, group=self.slow_group, async_op=True), buf)

    def _commit(self) -> None:
        """Wait for the slow reduction and take the committed optimizer step with it."""
        if self.pending is None:
            return
        work, buf = self.pending
        t0 = time.perf_counter()
        work.wait()
        t1 = time.perf_counter()
        self.exposed_s += t1 - t0
        self.slow.add(buf.numel() * buf.element_size(), t1 - self.t_launch)
        gbar = buf.div_(self.world)
        self.opt.update(self.committed, [gbar], self.prev_lr, self.committed, write=True)
        self.pending = None

    def before_forward(self, step):
        self._launch()

    def after_backward(self, step, lr):
        self.cached = True
        self._commit()
        qbar = self.grads()
        self.opt.update(self.committed, qbar, lr, self.params, write=False)  # tentative, state untouched
        self.prev_lr = lr

    def finish(self, lr):
        self._launch()
        self._commit()
        with torch.no_grad():
            self.flat.copy_(self.committed[0])
