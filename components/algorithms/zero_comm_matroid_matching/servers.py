"""The protocol: m servers each send ONE message, the centre solves exactly on the union.

A message (and a shard) is a dict of aligned arrays ``ids``, ``w``, ``data`` (the elements themselves,
so the centre needs nothing else). :func:`reduce` is the one reduction every party applies: a server
to its shard, a tree node to the union of up to four messages (``tree``: the 4-ary reduction; both
reductions compose without losing the optimum), the centre (matroids) to the final union.

Two ways to run the servers, with the same result:
- ``vectorised``: all shards split with one stable argsort in this process (the large sweeps);
- ``actors``: every server lives on a Ray actor (the experiment's NodeActor pool ``ctx.nodes``, or
  actors started here with ``num_cpus=0``), holding only its shard, and returns its message as an
  object; message sizes are counted on what came back (elements and pickled bytes). A server actor
  that dies raises :class:`ServerDied` naming it and the cause, which ends the variant FAILED.
"""
from __future__ import annotations

import os
import pickle
import time

import numpy as np

from components.algorithms.zero_comm_matroid_matching.matching import kcapped_mwm, matching_kernel, naive_topk
from components.algorithms.zero_comm_matroid_matching.matroids import greedy

PROTOCOLS = ("kernel", "naive_topk", "send_all")


class ServerDied(RuntimeError):
    pass


def _take(msg: dict, pos) -> dict:
    return {"ids": msg["ids"][pos], "w": msg["w"][pos], "data": None if msg["data"] is None else msg["data"][pos]}


def union(msgs: list[dict]) -> dict:
    data = [m["data"] for m in msgs]
    return {"ids": np.concatenate([m["ids"] for m in msgs]), "w": np.concatenate([m["w"] for m in msgs]),
            "data": None if data[0] is None else np.concatenate(data)}


def reduce(problem: str, kind: str, meta: dict, msg: dict, k: int, protocol: str = "kernel") -> dict:
    """The message a party holding ``msg`` sends on (``protocol``: kernel, naive_topk or send_all)."""
    if protocol == "send_all":
        return msg
    if problem == "mwis":
        keep = greedy(kind, meta, msg["ids"], msg["w"], msg["data"], k)
    elif protocol == "kernel":
        keep = matching_kernel(msg["ids"], msg["data"], msg["w"], k)
    else:
        keep = naive_topk(msg["ids"], msg["data"], msg["w"], k)
    pos = np.searchsorted(msg["ids"], keep, sorter=np.argsort(msg["ids"]))
    return _take(msg, np.argsort(msg["ids"])[pos])


def solve(problem: str, kind: str, meta: dict, msg: dict, k: int) -> tuple[float, np.ndarray]:
    """The centre: the exact optimum on ``msg`` (weight, chosen ids)."""
    if problem == "mwis":
        out = reduce("mwis", kind, meta, msg, k)
        return float(np.sum(out["w"])), np.sort(out["ids"])
    weight, pos = kcapped_mwm(msg["data"], msg["w"], k)
    return weight, np.sort(msg["ids"][pos])


def shards(inst, problem: str) -> list[dict]:
    """Every server's shard, split by ``inst.owner`` with one stable argsort."""
    ids = np.arange(inst.n)
    data = inst.edges if problem == "mwm" else inst.data
    full = {"ids": ids, "w": inst.w, "data": data}
    by = np.argsort(inst.owner, kind="stable")
    cuts = np.searchsorted(inst.owner[by], np.arange(inst.m + 1))
    return [_take(full, by[cuts[s]:cuts[s + 1]]) for s in range(inst.m)]


class ServerGroup:
    """The servers one actor hosts; each knows only its own shard."""

    def __init__(self, problem: str, kind: str, meta: dict, shard_list: list[dict], fail: bool = False):
        self.problem, self.kind, self.meta, self.shards, self.fail = problem, kind, meta, shard_list, fail

    def messages(self, k: int, protocol: str) -> list[dict]:
        if self.fail:                                   # fault injection: the server process dies
            os._exit(17)
        return [reduce(self.problem, self.kind, self.meta, s, k, protocol) for s in self.shards]


def messages_vectorised(problem, kind, meta, shard_list, k, protocol) -> list[dict]:
    return [reduce(problem, kind, meta, s, k, protocol) for s in shard_list]


def messages_actors(problem, kind, meta, shard_list, k, protocol, nodes, key: str,
                    fail_server: int = -1) -> list[dict]:
    """Messages computed on the actors ``nodes`` (server s on node s mod len(nodes)), in server order."""
    import ray
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    groups = [list(range(j, len(shard_list), len(nodes))) for j in range(min(len(nodes), len(shard_list)))]
    try:
        ray.get([nodes[j].host.remote(key, ServerGroup, problem, kind, meta, [shard_list[s] for s in g],
                                      fail_server in g) for j, g in enumerate(groups)])
        refs = [nodes[j].call.remote(key, "messages", k, protocol) for j in range(len(groups))]
        out: list[dict | None] = [None] * len(shard_list)
        for j, (g, ref) in enumerate(zip(groups, refs)):
            try:
                got = ray.get(ref)
            except (RayActorError, ActorDiedError, ActorUnavailableError) as e:
                cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ServerDied(f"server actor {j} (servers {g[:4]}{'...' if len(g) > 4 else ''}) died: "
                                 f"{type(e).__name__}: {cause}") from e
            for s, msg in zip(g, got):
                out[s] = msg
    finally:
        try:
            ray.get([n.drop.remote(key) for n in nodes[: len(groups)]], timeout=30)
        except Exception:                               # a dead node has nothing to drop
            pass
    return out


def tree_reduce(problem, kind, meta, msgs: list[dict], k: int, fanout: int = 4) -> tuple[dict, int]:
    """Reduce the messages in a ``fanout``-ary tree to one message; returns it and the tree depth."""
    depth = 0
    while len(msgs) > 1:
        msgs = [reduce(problem, kind, meta, union(msgs[i:i + fanout]), k) for i in range(0, len(msgs), fanout)]
        depth += 1
    return msgs[0], depth


def message_stats(msgs: list[dict]) -> tuple[int, int, int]:
    """(largest message in elements, total elements, largest pickled size in bytes)."""
    sizes = [len(m["ids"]) for m in msgs]
    return max(sizes), sum(sizes), max(len(pickle.dumps(m, protocol=5)) for m in msgs)


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0
