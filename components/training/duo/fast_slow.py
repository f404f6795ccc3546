"""DUO's fast/slow update inside real DDP.

Step t on every worker (spec sheet, "our implementable reading"):

1. ``before_forward``: launch the slow path, an async fp32 all-reduce of the full-precision local
   gradient cached at step t-1 (``dist.all_reduce(async_op=True)`` on its own gloo group), so it runs
   while the forward computes.
2. backward: the DDP comm hook (:func:`components.training.ddp.hooks.codec_hook` with ``cache``)
   caches ``g_t`` and all-gathers its low-bit code -> ``qbar_t`` (0-bit: nothing sent, ``qbar_t = 0``).
3. ``after_backward``: wait for the slow path -> ``gbar_{t-1}``; commit
   ``c_t, S_t = Opt.step(c_{t-1}, S_{t-1}, gbar_{t-1})``; working weights
   ``w_{t+1} = Opt.preview(c_t, S_t, qbar_t)`` (same math, optimizer state not written).
4. ``finish``: reduce and commit the last cached gradient, then ``w = c``.

For SGD this is ``w_{t+1} = w_t - lr qbar_t - lr (gbar_{t-1} - qbar_{t-1})``: each quantization error
is replaced by the exact gradient one step later.

What each step costs beyond plain low-bit sync (and nothing else):

- caching: one contiguous copy of each DDP bucket (the local fp32 gradient) into one of two persistent
  buffers (step t writes one while step t-1's is being all-reduced); the commit reads the reduced buffer
  through per-parameter views made once per bucket layout (DDP rebuilds its buckets after step 0).
- optimizer: :meth:`~components.training.ddp.optim.FunctionalOptimizer.commit_preview`, i.e. torch's fused
  AdamW kernel once on the committed weights and moments with ``gbar_{t-1}``, once more on scratch copies
  of the moments with ``qbar_t``, writing the preview straight into the working weights (the model's
  parameters). The first version made a fresh zeroed cache per step, copied it parameter by parameter and
  ran two unfused AdamW passes with ~17 temporaries each (3.3 ms of CPU per step vs 1.65 ms for plain
  sync's one pass; now ~0.1 ms vs ~0.05 ms: benchmarks/bench_duo.py --phases).
"""
from __future__ import annotations

import time

import torch

from components.compression.torch_codecs import make_torch_codec
from components.core.registry import register
from components.training.ddp import hooks
from components.training.ddp import world as comm
from components.training.ddp.strategies import Strategy


@register("ddp_strategy", "duo", summary="DUO: low-bit fast sync + tentative update; the cached exact gradient "
          "all-reduced behind the next forward and committed one step late")
class DuoStrategy(Strategy):
    def __init__(self, ddp, cfg, flat, group=None):
        super().__init__(ddp, cfg, flat, group)
        self.committed = [self.flat.detach().clone()]
        sizes = [p.numel() for p in self.module_params]
        self.c_views = [c.view_as(p) for c, p in zip(self.committed[0].split(sizes), self.module_params)]
        self.slow_group = comm.new_group(group)  # slow path on its own channel
        self.world = comm.world_size(group)
        self.pending = None       # (works, gbar views in parameter order) of the in-flight slow reduction
        self.parity = 0           # which of the two cache buffer sets the next backward writes
        self.bufs: dict = {}      # (parity, bucket index) -> persistent cache buffer
        self.layouts: dict = {}   # (parity, bucket index, buffer ptr, param ids, offsets) -> {id(param): view}
        self.cached: dict = {}    # id(param) -> view of this step's cache (filled by the hook)
        self.cached_bufs: list = []
        self.prev_lr = None       # learning rate of the step whose gradient is being reduced
        self.slow = hooks.CommStats()

    def attach(self):
        self.state = hooks.CodecState(make_torch_codec(self.cfg["bits"], self.cfg["bucket"]), cache=self._cache,
                                       group=self.group)
        self.ddp.register_comm_hook(self.state, hooks.codec_hook)
        self.paths = {"fast": self.state.stats, "slow": self.slow}

    def _cache(self, bucket) -> None:
        """The comm hook's first act: keep the bucket's local fp32 gradient (one contiguous copy)."""
        g = bucket.buffer()
        i = bucket.index()
        buf = self.bufs.get((self.parity, i))
        if buf is None or buf.numel() != g.numel():
            buf = self.bufs[(self.parity, i)] = torch.empty_like(g)
        buf.copy_(g)
        params, grads = bucket.parameters(), bucket.gradients()
        base = g.storage_offset()
        offsets = tuple(gv.storage_offset() - base for gv in grads)
        # the layout is the parameters and their offsets: DDP's bucket rebuild after step 0 may reorder
        # the same parameters in a new buffer at the freed buffer's address
        key = (self.parity, i, buf.data_ptr(), tuple(map(id, params)), offsets)
        views = self.layouts.get(key)
        if views is None:   # once per bucket layout and buffer
            views = self.layouts[key] = {id(p): buf[o:][:gv.numel()].view_as(p)
                                         for p, gv, o in zip(params, grads, offsets)}
        self.cached.update(views)
        self.cached_bufs.append(buf)

    def _launch(self) -> None:
        """Start the all-reduce of the cached full-precision gradient (local sums, one per bucket)."""
        if self.pending is not None or not self.cached_bufs:
            return
        self.t_launch = time.perf_counter()
        works = [comm.all_reduce(b, group=self.slow_group, async_op=True) for b in self.cached_bufs]
        self.pending = (works, self.cached_bufs, [self.cached[id(p)] for p in self.module_params])
        self.cached, self.cached_bufs = {}, []
        self.parity ^= 1          # the next backward caches into the other buffers

    def _wait(self):
        """Wait for the slow reduction; the averaged gradient, one view per parameter (or None)."""
        if self.pending is None:
            return None
        works, bufs, gbar = self.pending
        t0 = time.perf_counter()
        for w in works:
            w.wait()
        t1 = time.perf_counter()
        self.exposed_s += t1 - t0
        self.slow.add(sum(b.numel() * b.element_size() for b in bufs), t1 - self.t_launch, collectives=len(bufs))
        for b in bufs:
            b.div_(self.world)
        self.pending = None
        return gbar

    def before_forward(self, step):
        self._launch()

    def after_backward(self, step, lr):
        gbar = self._wait()
        qbar = self.grad_list()
        if gbar is None:       # step 0: nothing to commit yet
            self.opt.update(self.c_views, qbar, lr, self.params, write=False)
        else:                  # commit with gbar_{t-1}, preview with qbar_t into the working weights
            self.opt.commit_preview(self.c_views, gbar, self.prev_lr, qbar, lr, self.params)
        self.prev_lr = lr

    def finish(self, lr):
        self._launch()
        gbar = self._wait()
        if gbar is not None:
            self.opt.update(self.c_views, gbar, self.prev_lr, self.c_views, write=True)
        with torch.no_grad():
            self.flat.copy_(self.committed[0])
        # the slow path's group ends with the run: one process training several variants (the tests) would
        # otherwise keep every earlier run's gloo group and its threads until exit
        comm.destroy_group(self.slow_group)
        self.slow_group = None
