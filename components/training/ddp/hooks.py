"""DDP communication hooks for every gradient codec, each counting the bytes it really put on the wire
and timing its collective (gloo across processes, or the in-process ranks' :mod:`world
<components.training.ddp.world>`: ``state.group``).

A hook receives the DDP bucket's flat buffer of *local* gradients and returns a future holding the
averaged gradient DDP writes back to ``param.grad``:

- :func:`allreduce_hook` - fp32 all-reduce (what DDP does by default), counted and timed.
- :func:`codec_hook` - encode the local gradient with a :mod:`torch codec <components.compression.torch_codecs>`,
  all-gather the packed payloads and average the *dequantized* per-worker gradients (no re-quantization
  of partial sums). With ``error_feedback`` the codec compresses ``g + e`` and keeps ``e`` = what it lost.
  With ``cache`` (a callable) it hands the bucket to it first, which keeps the full-precision local gradient
  (DUO's slow path: one contiguous copy of the bucket into a persistent buffer).
- :func:`powersgd_hook` - torch's own PowerSGD hook, wrapped to count its all-reduced elements.

Every buffer a hook makes takes the device and dtype of the bucket it was given (CUDA buckets under NCCL).
"""
import time
from dataclasses import dataclass, field

import torch

from components.compression.torch_codecs import TorchCodec
from components.training.ddp import world as comm


@dataclass
class CommStats:
    """Per-path totals over a run: payload bytes this worker sent, collective seconds, messages."""

    bytes: int = 0
    seconds: float = 0.0
    calls: int = 0
    collectives: int = 0

    def add(self, nbytes: int, seconds: float, collectives: int = 1) -> None:
        self.bytes += int(nbytes)
        self.seconds += seconds
        self.calls += 1
        self.collectives += collectives


def _done(t: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(t)
    return fut


@dataclass
class AllreduceState:
    group: object = None
    stats: CommStats = field(default_factory=CommStats)


def allreduce_hook(state: AllreduceState, bucket) -> torch.futures.Future[torch.Tensor]:
    buf = bucket.buffer()
    world = comm.world_size(state.group)
    t0 = time.perf_counter()
    comm.all_reduce(buf, group=state.group)
    state.stats.add(buf.numel() * buf.element_size(), time.perf_counter() - t0)
    return _done(buf.div_(world))


@dataclass
class CodecState:
    codec: TorchCodec
    group: object = None
    error_feedback: bool = False
    stats: CommStats = field(default_factory=CommStats)
    errors: dict = field(default_factory=dict)     # id(parameter) -> local residual (EF)
    # DUO: ``cache(bucket)`` keeps the full-precision local gradient before the bucket is encoded
    cache: object = None


def codec_hook(state: CodecState, bucket) -> torch.futures.Future[torch.Tensor]:
    g = bucket.buffer()
    n = g.numel()
    if state.cache is not None:
        state.cache(bucket)
    v = g
    if state.error_feedback:  # residuals are kept per parameter: DDP reorders its bucket after step 0
        params, views = bucket.parameters(), bucket.gradients()
        v = g + torch.cat([state.errors.get(id(p), gv.new_zeros(gv.numel())) for p, gv in zip(params, views)])
    payload = state.codec.encode(v)
    if state.error_feedback:
        resid = v - state.codec.decode(payload, n)
        for p, gv in zip(params, views):
            off = gv.storage_offset() - g.storage_offset()
            state.errors[id(p)] = resid[off:off + gv.numel()].clone()
    if payload.numel() == 0:  # 0-bit: nothing is sent, the fast update is zero
        state.stats.add(0, 0.0, collectives=0)
        return _done(torch.zeros_like(g))
    world = comm.world_size(state.group)
    gathered = [torch.empty_like(payload) for _ in range(world)]
    t0 = time.perf_counter()
    comm.all_gather(gathered, payload, group=state.group)
    state.stats.add(payload.numel(), time.perf_counter() - t0)
    mean = torch.stack([state.codec.decode(p, n) for p in gathered]).mean(dim=0)
    return _done(mean.to(g.dtype))


@dataclass
class PowerSGDStats:
    """Wraps torch's PowerSGDState; counts the elements its all-reduces carry (fp32)."""

    inner: object
    stats: CommStats = field(default_factory=CommStats)


def powersgd_hook(state: PowerSGDStats, bucket) -> torch.futures.Future[torch.Tensor]:
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

    inner = state.inner
    vanilla = inner.iter < inner.start_powerSGD_iter
    before = inner.total_numel_after_compression
    t0 = time.perf_counter()
    fut = ps.powerSGD_hook(inner, bucket)
    if vanilla:  # torch runs a plain all-reduce of the whole bucket before start_powerSGD_iter
        nbytes, colls = bucket.buffer().numel() * 4, 1
    else:        # uncompressed 1-D tensors + Ps + Qs: three all-reduces
        nbytes, colls = (inner.total_numel_after_compression - before) * 4, 3

    def _stop(f):
        state.stats.add(nbytes, time.perf_counter() - t0, collectives=colls)
        return f.value()

    return fut.then(_stop)
