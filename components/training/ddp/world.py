"""In-process ranks: the data-parallel loop's W ranks as W threads of one process, with the same DDP,
the same comm hooks and the same strategies as the Ray Train / gloo workers (issue "The whole board in
75 minutes": 4 gloo processes in lock-step on 2 cores spent most of a job waiting on each other, and
every job paid Ray Train's worker-group start-up).

Each thread holds its own replica wrapped in torch's real ``DistributedDataParallel`` over a private
one-rank gloo group, so DDP buckets, rebuilds its buckets after step 0, honours ``no_sync`` and calls
the comm hook exactly as it does across processes. Only the collectives the hooks and strategies call
change: they go through :func:`all_reduce`, :func:`all_gather` and :func:`world_size`, which use
``torch.distributed`` for a real group and a :class:`VirtualGroup` (a barrier among the threads) for
in-process ranks.

Bit for bit the same as gloo processes: every rank's forward and backward (the same ops on one
intra-op thread), the codec paths (all-gather, then each rank decodes the rank-ordered payloads), and
the sum all-reduces (fp32 DDP, DUO's slow path), which :func:`ring_sum` adds in the order of gloo's
ring (float addition is not associative: summed in rank order, 4 ranks drifted 1e-3 from the gloo
workers' weights in 20 AdamW steps). ``tests/training/test_ddp_world.py`` checks this against gloo
processes, and the experiments run a prefix of steps on the real workers beside it (``ray_check_steps``).

Collective seconds in the hooks' CommStats are thread waits here, not network time; the simulated
step (sim_*) never reads them.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch


class VirtualGroup:
    """Collectives among the threads of :func:`run_ranks`, one call per rank, every rank in the same
    order (as in gloo). Results are computed once, in rank order, by the last rank to arrive."""

    def __init__(self, world: int):
        self.world = world
        self._lock = threading.Condition()
        self._round: dict[int, dict] = {}      # round number -> {"parts": {rank: tensor}, "result": ...}
        self._next: dict[int, int] = {}        # rank -> its next round number
        self.broken: BaseException | None = None

    def bind(self, rank: int) -> "RankGroup":
        return RankGroup(self, rank)

    def abort(self, why: BaseException) -> None:
        """A rank failed: every rank waiting (now or later) raises instead of waiting forever."""
        with self._lock:
            self.broken = why
            self._lock.notify_all()

    def _contribute(self, rank: int, part: Any, combine: Callable[[list], Any]) -> dict:
        with self._lock:
            n = self._next.get(rank, 0)
            self._next[rank] = n + 1
            rnd = self._round.setdefault(n, {"parts": {}, "result": None, "taken": 0})
            rnd["parts"][rank] = part
            if len(rnd["parts"]) == self.world:
                rnd["result"] = combine([rnd["parts"][r] for r in range(self.world)])
                rnd["parts"] = None
                self._lock.notify_all()
            return rnd | {"n": n}

    def _result(self, n: int) -> Any:
        with self._lock:
            while self._round[n]["result"] is None:
                if self.broken is not None:
                    raise RuntimeError(f"in-process rank failed: {type(self.broken).__name__}: {self.broken}")
                self._lock.wait(timeout=1.0)
            rnd = self._round[n]
            rnd["taken"] += 1
            if rnd["taken"] == self.world:
                del self._round[n]
            return rnd["result"]


class RankGroup:
    """One rank's handle on a :class:`VirtualGroup` (what a hook's ``group`` holds in-process)."""

    def __init__(self, group: VirtualGroup, rank: int):
        self.group, self.rank = group, rank

    def size(self) -> int:
        return self.group.world


class _Work:
    """An in-flight virtual all-reduce: ``wait`` writes the sum into the rank's tensor."""

    def __init__(self, group: VirtualGroup, n: int, tensor: torch.Tensor):
        self.group, self.n, self.tensor = group, n, tensor

    def wait(self) -> bool:
        self.tensor.copy_(self.group._result(self.n))
        return True


GLOO_MAX_SEGMENT_BYTES = 1024 * 1024   # gloo::AllreduceOptions::kMaxSegmentSize


def ring_sum(parts: list[torch.Tensor]) -> torch.Tensor:
    """The ranks' tensors summed in the order gloo's ring all-reduce adds them (gloo/allreduce.cc, ``ring``),
    so that in-process ranks match gloo processes bit for bit.

    gloo cuts the buffer into ``numSegments`` segments (a multiple of the world size, at least twice
    it, each at most 1 MiB), ``numSegments / world`` consecutive segments per chunk. Chunk c's partial
    sum starts at rank c-1 and travels down the ring, each rank adding its own values to what it
    received, and ends at rank c: x_c + (x_{c+1} + (... + x_{c-1})), ranks mod world."""
    size = len(parts)
    flat = [p.reshape(-1) for p in parts]
    if size == 1:
        return flat[0].clone().view_as(parts[0])
    n, esize = flat[0].numel(), flat[0].element_size()
    total = n * esize
    max_seg = esize * max(1, GLOO_MAX_SEGMENT_BYTES // esize)
    nseg = -(-max(-(-total // max_seg), 2 * size) // size) * size
    per_rank = nseg // size
    seg = -(-(-(-total // nseg)) // esize)       # elements per segment (bytes rounded up to an element)
    out = torch.empty_like(flat[0])
    for k in range(nseg):
        lo, hi = k * seg, min((k + 1) * seg, n)
        if lo >= n:
            break
        c = k // per_rank
        acc = flat[(c + size - 1) % size][lo:hi].clone()
        for h in range(size - 2, -1, -1):
            acc = flat[(c + h) % size][lo:hi] + acc
        out[lo:hi] = acc
    return out.view_as(parts[0])


def world_size(group=None) -> int:
    import torch.distributed as dist

    return group.size() if isinstance(group, RankGroup) else dist.get_world_size(group)


def all_reduce(tensor: torch.Tensor, group=None, async_op: bool = False):
    """Sum ``tensor`` over the ranks in place (``async_op``: returns a work whose ``wait`` completes it).
    In-process, the contribution is a copy taken now, as gloo reads the buffer when the op starts."""
    import torch.distributed as dist

    if not isinstance(group, RankGroup):
        return dist.all_reduce(tensor, group=group, async_op=async_op)
    rnd = group.group._contribute(group.rank, tensor.clone(), ring_sum)
    work = _Work(group.group, rnd["n"], tensor)
    if async_op:
        return work
    work.wait()
    return None


def all_gather(out: list[torch.Tensor], tensor: torch.Tensor, group=None) -> None:
    """``out[r]`` <- rank r's ``tensor``."""
    import torch.distributed as dist

    if not isinstance(group, RankGroup):
        dist.all_gather(out, tensor, group=group)
        return
    rnd = group.group._contribute(group.rank, tensor.clone(), lambda parts: parts)
    for o, part in zip(out, group.group._result(rnd["n"])):
        o.copy_(part)


def new_group(group=None):
    """A second channel beside ``group`` (DUO's slow path): its own group across processes, on the default
    group's backend (gloo on cpu, NCCL on cuda), its own virtual group in-process (made once per world by
    :func:`run_ranks`)."""
    import torch.distributed as dist

    if isinstance(group, RankGroup):
        return group.group.slow.bind(group.rank)
    return dist.new_group(backend=dist.get_backend())


def destroy_group(group) -> None:
    import torch.distributed as dist

    if group is not None and not isinstance(group, RankGroup):
        dist.destroy_process_group(group)


def run_ranks(fn: Callable[[int, RankGroup, Any], Any], world: int) -> list:
    """Run ``fn(rank, group, process_group)`` for every rank in its own thread (one intra-op thread
    each, all computing at once); the results in rank order.

    ``group`` is the rank's handle for the hooks' collectives; ``process_group`` a private one-rank gloo
    group for the rank's DDP wrapper (made here, on the calling thread; destroyed after). If a rank
    raises, every other rank's next collective raises too, and the first error is re-raised here with
    its rank: nothing waits forever."""
    import torch.distributed as dist

    owns_default = not dist.is_initialized()
    if owns_default:   # a one-rank default group: new_group needs one; nothing leaves this process
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    vg = VirtualGroup(world)
    vg.slow = VirtualGroup(world)
    pgs = [dist.new_group(ranks=[0], backend="gloo") for _ in range(world)]
    results: list = [None] * world
    errors: list = [None] * world
    nthreads = torch.get_num_threads()

    def body(rank: int) -> None:
        try:
            torch.set_num_threads(1)
            results[rank] = fn(rank, vg.bind(rank), pgs[rank])
        except BaseException as e:  # noqa: BLE001 - handed to the caller below, with the rank
            errors[rank] = e
            vg.abort(e)
            vg.slow.abort(e)

    threads = [threading.Thread(target=body, args=(r,), name=f"dp-rank-{r}", daemon=True) for r in range(world)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for pg in pgs:
            dist.destroy_process_group(pg)
        if owns_default:
            dist.destroy_process_group()
        torch.set_num_threads(nthreads)
    first = next(((r, e) for r, e in enumerate(errors) if e is not None and not _secondary(e)), None) \
        or next(((r, e) for r, e in enumerate(errors) if e is not None), None)
    if first is not None:
        rank, err = first
        raise RuntimeError(f"in-process rank {rank} of {world} failed: {type(err).__name__}: {err}") from err
    return results


def _secondary(e: BaseException) -> bool:
    """An error a rank raised only because another rank failed first."""
    return isinstance(e, RuntimeError) and str(e).startswith("in-process rank failed")
