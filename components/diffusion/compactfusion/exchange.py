"""Patch-parallel DiT blocks over P token shards that exchange K/V every layer of every step.

One :class:`ShardWorker` per device owns a contiguous token shard. Per block it computes q, k, v
of its own tokens (``DiTBlock.qkv``), sends its K and V (one stream each, its CFG branches as two
independent streams in one payload), rebuilds every remote shard's K/V from their payloads, attends
with its own q over all tokens (``dit.attend``) and finishes its tokens (``DiTBlock.finish``).
What a stream sends is the system's:

- ``sync``: the exact K/V every step (``codec`` fp16, or fp32: lossless);
- ``stale`` (DistriFusion-like): fresh K/V are sent every step but a receiver attends over the
  previous step's remote K/V (the transfer hides behind the step); the first ``warmup`` steps are
  synchronous;
- ``compressed``: :mod:`components.compression.residual` streams (``order`` 0 naive / 1 residual,
  error feedback on or off, ``warmup`` uncompressed sends).

The same worker code runs in-process (:class:`InProcessRunner`, the quality sweeps) and on Ray
actors (:class:`ActorRunner`), so the two give the same bits. Receivers count the bytes they get.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from components.compression.residual import ResidualReceiver, ResidualSender, StreamSpec
from components.core import devices
from components.core.errors import require
from components.core.raytools import failure_reason
from components.diffusion.sampling import BlockRunner
from components.models.dit import DiT, attend

SYSTEMS = ("single", "sync", "stale", "compressed")
KINDS = ("k", "v")


@dataclass(frozen=True)
class ExchangeSpec:
    """What a shard sends each layer: the system and its stream settings."""

    system: str = "compressed"
    codec: str = "binary"
    order: int = 1
    ef: bool = True
    warmup: int = 1
    rank: int = 8
    scale: str = "rank1"

    def check(self) -> "ExchangeSpec":
        require(self.system in SYSTEMS, "system", self.system, "one of " + ", ".join(SYSTEMS))
        if self.system in ("sync", "stale"):
            require(self.codec in ("fp16", "fp32"), "codec", self.codec,
                    f"fp16 or fp32 for system={self.system} (it sends the exact K/V)")
        if self.system == "stale":
            require(self.warmup >= 1, "warmup", self.warmup, ">= 1 synchronous step for system=stale")
        self.stream().check()
        return self

    def stream(self) -> StreamSpec:
        if self.system in ("sync", "stale"):
            return StreamSpec(codec=self.codec, order=0, ef=False, warmup=0)
        return StreamSpec(codec=self.codec, order=self.order, ef=self.ef, warmup=self.warmup,
                          rank=self.rank, scale=self.scale)


def to_stream(t: torch.Tensor, branches: int) -> torch.Tensor:
    """[R, H, n, hd] K or V of a shard -> [branches, (R / branches) * n, H * hd] streams."""
    r, hh, n, hd = t.shape
    return t.transpose(1, 2).reshape(branches, (r // branches) * n, hh * hd)


def from_stream(s: torch.Tensor, shape) -> torch.Tensor:
    r, hh, n, hd = shape
    return s.reshape(r, n, hh, hd).transpose(1, 2)


class ShardWorker:
    """Device ``rank`` of ``P``: its shard of h, its senders and the receivers of remote streams."""

    def __init__(self, rank: int, P: int, spec: ExchangeSpec, model: DiT | None = None, config: dict | None = None,
                 state: dict | None = None, branches: int = 2, fail_step: int = -1, diagnose: bool = False):
        if model is None:                       # on an actor: its own copy, one thread (the same bits as in-process)
            from components.diffusion.prepare import load_dit

            torch.set_num_threads(1)
            model = load_dit({"config": config, "state": state})
        self.model, self.rank, self.P, self.spec, self.branches = model, rank, P, spec, branches
        self.stream = spec.stream()
        depth = len(model.blocks)
        self.send = {(l, k): ResidualSender(self.stream) for l in range(depth) for k in KINDS}
        self.recv = {(l, k, s): ResidualReceiver(self.stream) for l in range(depth) for k in KINDS
                     for s in range(P) if s != rank}
        self.stale: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self.fail_step, self.diagnose = fail_step, diagnose
        self.bytes_in = 0
        self.bytes_steps: list[int] = []               # bytes received at each step
        self.codec_s = 0.0
        self.step = -1

    def begin(self, step: int, h: torch.Tensor, c: torch.Tensor) -> int:
        if step == self.fail_step:
            os._exit(17)                                        # fault injection: the device dies
        self.step, self.h, self.c = step, h, c
        self.bytes_steps.append(0)
        self.used: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        return self.rank

    def qkv(self, layer: int) -> dict:
        """This shard's K/V of block ``layer`` as messages (the payloads every other shard gets)."""
        q, k, v, state = self.model.blocks[layer].qkv(self.h, self.c)
        self.cur = (q, k, v, state)
        t0 = time.perf_counter()
        msgs = {"k": self.send[(layer, "k")].send(to_stream(k, self.branches)),
                "v": self.send[(layer, "v")].send(to_stream(v, self.branches)), "shape": tuple(k.shape)}
        devices.synchronize(str(k.device))      # on a GPU: the codec's kernels inside the span
        self.codec_s += time.perf_counter() - t0
        return msgs

    def attend(self, layer: int, *msgs: dict) -> int:
        """Rebuild the remote K/V from ``msgs`` (one per rank, own ignored), attend, finish."""
        q, k, v, state = self.cur
        ks, vs = [], []
        t0 = time.perf_counter()
        for s, m in enumerate(msgs):
            if s == self.rank:
                ks.append(k)
                vs.append(v)
                continue
            nb = m["k"].nbytes + m["v"].nbytes
            self.bytes_in += nb
            self.bytes_steps[-1] += nb
            kv = tuple(from_stream(self.recv[(layer, n, s)].receive(m[n]), m["shape"]) for n in KINDS)
            if self.spec.system == "stale":
                fresh, kv = kv, self.stale.get((layer, s), kv) if self.step >= self.spec.warmup else kv
                self.stale[(layer, s)] = fresh
            if self.diagnose:
                self.used[(layer, s)] = kv
            ks.append(kv[0])
            vs.append(kv[1])
        devices.synchronize(str(q.device))
        self.codec_s += time.perf_counter() - t0
        out = attend(q, torch.cat(ks, dim=-2), torch.cat(vs, dim=-2))
        self.h = self.model.blocks[layer].finish(self.h, self.c, out, state)
        return self.rank

    def end(self) -> torch.Tensor:
        return self.h

    def report(self) -> dict:
        """Bytes received, codec seconds, and every stream's bases (for the consistency check)."""
        return {"bytes_in": self.bytes_in, "bytes_steps": list(self.bytes_steps), "codec_s": self.codec_s,
                "send_base": {key: s.base for key, s in self.send.items()},
                "recv_base": {key: r.base for key, r in self.recv.items()}}


def split_tokens(h: torch.Tensor, P: int) -> list[torch.Tensor]:
    n = h.shape[1] // P
    return [h[:, i * n:(i + 1) * n].contiguous() for i in range(P)]


class ShardedRunner(BlockRunner):
    """A sampling block runner over P shard workers; subclasses say where the workers live."""

    name = "patch_parallel"

    def __init__(self, P: int, spec: ExchangeSpec, branches: int = 2):
        self.P, self.spec, self.branches = P, spec, branches

    def check_tokens(self, n_tokens: int) -> None:
        require(n_tokens % self.P == 0, "shards", self.P, f"a divisor of the {n_tokens} tokens")


class InProcessRunner(ShardedRunner):
    """All shards in this process, called in turn (the same worker code as the actors).

    ``diagnose``: per step, the relative error of the K/V each receiver attended over against the
    sender's exact K/V (``recon_rel_err``), and the relative change of the exact K/V since the
    previous step (``kv_step_change``), pooled over layers, K and V, senders and receivers.
    """

    def __init__(self, P: int, spec: ExchangeSpec, model: DiT, branches: int = 2, diagnose: bool = False):
        super().__init__(P, spec, branches)
        self.workers = [ShardWorker(r, P, spec, model, branches=branches, diagnose=diagnose) for r in range(P)]
        self.diagnose = diagnose
        self.recon_rel_err: list[float] = []
        self.kv_step_change: list[float] = []
        self._prev: dict = {}

    def __call__(self, i, h, c, model):
        self.begin_step(i, h, c)
        for layer in range(len(model.blocks)):
            self.layer(layer)
        self.end_step(i)
        self.count(self.depth * self.upb)
        return torch.cat([w.end() for w in self.workers], dim=1)

    def begin_step(self, i: int, h: torch.Tensor, c: torch.Tensor) -> None:
        self.check_tokens(h.shape[1])
        for w, hs in zip(self.workers, split_tokens(h, self.P)):
            w.begin(i, hs, c)
        self._err = self._ref = self._chg = 0.0
        self._n_chg = 0

    def layer(self, layer: int, h: torch.Tensor | None = None) -> torch.Tensor | None:
        """Block ``layer`` on every shard (from ``h`` re-split when given; then the gathered output)."""
        if h is not None:
            for w, hs in zip(self.workers, split_tokens(h, self.P)):
                w.h = hs
        msgs = [w.qkv(layer) for w in self.workers]
        for w in self.workers:
            w.attend(layer, *msgs)
        if self.diagnose:
            self._diagnose(layer)
        return None if h is None else torch.cat([w.end() for w in self.workers], dim=1)

    def _diagnose(self, layer: int) -> None:
        for s, src in enumerate(self.workers):
            exact = src.cur[1:3]
            for w in self.workers:
                if w.rank != s:
                    for a, b in zip(w.used[(layer, s)], exact):
                        self._err += float((a - b).pow(2).sum())
                        self._ref += float(b.pow(2).sum())
            prev = self._prev.get((layer, s))
            if prev is not None:
                self._chg += sum(float((a - b).pow(2).sum()) / float(b.pow(2).sum()) for a, b in zip(exact, prev))
                self._n_chg += 2
            self._prev[(layer, s)] = tuple(t.clone() for t in exact)

    def end_step(self, i: int) -> None:
        if self.diagnose:
            self.recon_rel_err.append((self._err / self._ref) ** 0.5 if self._ref else 0.0)
            if i > 0:
                self.kv_step_change.append((self._chg / self._n_chg) ** 0.5 if self._n_chg else float("nan"))

    def reports(self) -> list[dict]:
        return [w.report() for w in self.workers]


class ShardActorDied(RuntimeError):
    """A shard's actor died (or stopped answering) while sampling; the message names it and why."""


class ActorRunner(ShardedRunner):
    """The shards on Ray actors (NodeActors hosting one ShardWorker each); payloads travel as object
    refs from the sender's actor to every receiver's, the driver only passes refs along."""

    def __init__(self, P: int, spec: ExchangeSpec, prepared_dit: dict, nodes=None, key: str = "cf",
                 branches: int = 2, fail_rank: int = -1, fail_step: int = -1, timeout_s: float = 300.0):
        import ray

        super().__init__(P, spec, branches)
        self.own = nodes is None
        if self.own:
            from components.core.raytools import start_nodes

            nodes = start_nodes(P, 0.0, "cf-shard")
        require(len(nodes) >= P, "resources.nodes", len(nodes), f">= {P} actors for {P} shards")
        self.nodes, self.key, self.timeout_s = list(nodes[:P]), key, timeout_s
        self._get([n.host.remote(key, ShardWorker, r, P, spec, None, prepared_dit["config"], prepared_dit["state"],
                                 branches, fail_step if r == fail_rank else -1) for r, n in enumerate(self.nodes)],
                  "set-up")
        self._ray = ray

    def _get(self, refs, what):
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError

        try:
            return ray.get(refs, timeout=self.timeout_s)
        except (RayActorError, ActorDiedError, ActorUnavailableError) as e:
            raise ShardActorDied(f"a shard actor died during {what}: {failure_reason(e)}") from e
        except GetTimeoutError as e:
            raise ShardActorDied(f"shard actors gave no answer within {self.timeout_s:g} s during {what}") from e

    def _call(self, r: int, method: str, *args):
        return self.nodes[r].call.remote(self.key, method, *args)

    def __call__(self, i, h, c, model):
        self.check_tokens(h.shape[1])
        c_ref = self._ray.put(c)
        for r, hs in enumerate(split_tokens(h, self.P)):
            self._call(r, "begin", i, hs, c_ref)
        for layer in range(len(model.blocks)):
            msgs = [self._call(r, "qkv", layer) for r in range(self.P)]
            for r in range(self.P):
                self._call(r, "attend", layer, *msgs)
        out = self._get([self._call(r, "end") for r in range(self.P)], f"denoising step {i}")
        self.count(self.depth * self.upb)
        return torch.cat(out, dim=1)

    def reports(self) -> list[dict]:
        return self._get([self._call(r, "report") for r in range(self.P)], "the report")

    def close(self) -> None:
        try:
            self._ray.get([n.drop.remote(self.key) for n in self.nodes], timeout=30)
        except Exception:  # noqa: BLE001 - a dead actor has nothing to drop
            pass
        if self.own:
            for n in self.nodes:
                self._ray.kill(n)

