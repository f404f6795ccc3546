"""The Ray side: client hosts placed on actors, called once per round, faults turned into drops.

``HostPool`` splits the clients into ``n_hosts`` groups (client i on group i mod n_hosts) and
builds a :class:`~components.federated.host.ClientHost` per group, either in-process (``nodes``
None: tests, no Ray) or on Ray actors: the experiment's shared NodeActor pool
(components.core.raytools) or actors it starts itself (``num_cpus=0``: they never wait for the
CPU the variant task holds). A host whose actor dies during a call loses that round: its
participants are dropped (no upload, logged as an event) and its clients are rebuilt fresh on a
live actor (their device state died with the process), so the run goes on and ends cleanly.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from components.federated.client import ClientSpec
from components.federated.host import ClientHost
from components.federated.strategy import FLConfig, Strategy


@dataclass
class Slot:
    key: str
    cids: list[int]
    node: int | None = None          # index into HostPool.nodes (None: in-process)
    local: ClientHost | None = None


@dataclass
class RoundOut:
    acc: dict[int, float]
    uploads: dict[int, tuple[int, Any]]
    events: list[dict] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)


class HostPool:
    def __init__(self, key: str, strategy: type[Strategy], options: dict, fl: FLConfig, specs: list[ClientSpec],
                 n_hosts: int, nodes: list | None = None, own_nodes: bool = False):
        self.key, self.strategy, self.options, self.fl = key, strategy, options, fl
        self.specs = {s.cid: s for s in specs}
        self.remote = nodes is not None
        self.nodes = list(nodes or [])
        self.own = set(range(len(self.nodes))) if own_nodes else set()
        self.dead: set[int] = set()
        self.generation = 0
        n_hosts = max(1, min(n_hosts, len(specs)))
        groups = [[s for i, s in enumerate(specs) if i % n_hosts == h] for h in range(n_hosts)]
        self.slots: list[Slot] = []
        for h, g in enumerate(groups):
            self.slots.append(self._place([s.cid for s in g], preferred=h % len(self.nodes) if self.remote else None))

    # ------------------------------------------------------------------------ placement
    def _new_key(self) -> str:
        self.generation += 1
        return f"{self.key}/g{self.generation}"

    def _place(self, cids: list[int], preferred: int | None = None) -> Slot:
        specs = [self.specs[c] for c in cids]
        args = (self.strategy, self.options, self.fl, specs)
        key = self._new_key()
        if not self.remote:
            return Slot(key, cids, None, ClientHost(*args))
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        order = [preferred] if preferred is not None and preferred not in self.dead else []
        load = {i: sum(1 for s in getattr(self, "slots", []) if s.node == i) for i in range(len(self.nodes))}
        order += sorted((i for i in range(len(self.nodes)) if i not in self.dead and i not in order), key=load.get)
        for i in order:
            try:
                ray.get(self.nodes[i].host.remote(key, ClientHost, *args))
                return Slot(key, cids, i)
            except (RayActorError, ActorUnavailableError):
                self.dead.add(i)
        from components.core.raytools import start_nodes

        self.nodes += start_nodes(1, 0.0, "fl-host")
        i = len(self.nodes) - 1
        self.own.add(i)
        ray.get(self.nodes[i].host.remote(key, ClientHost, *args))
        return Slot(key, cids, i)

    # ------------------------------------------------------------------------ calls
    def _call_all(self, method: str, per_slot_args: list[tuple], kill: int | None = None) -> list[tuple[Any, str | None]]:
        if not self.remote:
            return [(getattr(s.local, method)(*a), None) for s, a in zip(self.slots, per_slot_args)]
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        refs = [self.nodes[s.node].call.remote(s.key, method, *a) for s, a in zip(self.slots, per_slot_args)]
        if kill is not None:  # fault injection: the actor dies while the round is in flight
            ray.kill(self.nodes[self.slots[kill % len(self.slots)].node], no_restart=True)
        out = []
        for ref in refs:
            try:
                out.append((ray.get(ref), None))
            except (RayActorError, ActorUnavailableError) as e:
                out.append((None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
        return out

    def _recover(self, failed: list[int], rnd: int, participants: set[int], errors: list[str]) -> tuple[list[dict], list[int]]:
        events, dropped = [], []
        for j, err in zip(failed, errors):
            slot = self.slots[j]
            self.dead.add(slot.node)
            lost = [c for c in slot.cids if c in participants]
            dropped += lost
            t0 = time.perf_counter()
            self.slots[j] = self._place(slot.cids)
            events.append({"round": rnd, "event": "host_died", "host": j, "clients": slot.cids,
                           "dropped_participants": lost, "error": err, "rehosted_on": self.slots[j].node,
                           "rehost_s": round(time.perf_counter() - t0, 3)})
        return events, dropped

    def round(self, rnd: int, payload: Any, participants: list[int], kill: int | None = None) -> RoundOut:
        parts = set(int(c) for c in participants)
        args = [(rnd, payload, [c for c in s.cids if c in parts]) for s in self.slots]
        res = self._call_all("round", args, kill)
        out = RoundOut({}, {})
        failed, errors = [], []
        for j, (r, err) in enumerate(res):
            if err is not None:
                failed.append(j)
                errors.append(err)
                continue
            out.acc.update(r["acc"])
            out.uploads.update(r["uploads"])
        if failed:
            out.events, out.dropped = self._recover(failed, rnd, parts, errors)
        return out

    def evaluate(self, payload: Any, rnd: int = -1) -> RoundOut:
        res = self._call_all("evaluate", [(payload,)] * len(self.slots))
        out = RoundOut({}, {})
        failed, errors = [], []
        for j, (r, err) in enumerate(res):
            if err is None:
                out.acc.update(r)
            else:
                failed.append(j)
                errors.append(err)
        if failed:
            out.events, _ = self._recover(failed, rnd, set(), errors)
        return out

    def report(self) -> dict[int, dict[str, float]]:
        """Every client's strategy diagnostics; clients of a host that died now are left out."""
        out: dict[int, dict[str, float]] = {}
        for r, err in self._call_all("report", [()] * len(self.slots)):
            if err is None:
                out.update(r)
        return out

    def close(self) -> None:
        if not self.remote:
            return
        import ray

        for s in self.slots:
            if s.node not in self.dead and s.node not in self.own:
                try:
                    ray.get(self.nodes[s.node].drop.remote(s.key))
                except Exception:
                    pass
        for i in self.own:
            if i not in self.dead:
                ray.kill(self.nodes[i])
