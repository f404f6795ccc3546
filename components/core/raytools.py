"""Ray helpers: start embedded Ray or join a cluster, from the `cluster` config group."""
from __future__ import annotations

import os
import time
from typing import Any


def init_ray(cluster: dict[str, Any]) -> dict[str, Any]:
    """Start embedded Ray (``address: null``) or connect to ``address``; reuse a running session.

    Returns facts for the report: address, dashboard URL, CPUs, and seconds spent starting.
    """
    import ray

    t0 = time.perf_counter()
    if not ray.is_initialized():
        if cluster.get("auth_mode"):
            os.environ.setdefault("RAY_AUTH_MODE", str(cluster["auth_mode"]))
        kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": bool(cluster.get("log_to_driver", True)),
                                  "logging_level": cluster.get("logging_level", "WARNING")}
        address = cluster.get("address")
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = cluster.get("num_cpus") or os.cpu_count()
            kwargs["include_dashboard"] = bool(cluster.get("include_dashboard", True))
            kwargs["dashboard_host"] = cluster.get("dashboard_host", "127.0.0.1")
            if cluster.get("dashboard_port"):
                kwargs["dashboard_port"] = int(cluster["dashboard_port"])
            if cluster.get("metrics_export_port"):
                kwargs["_metrics_export_port"] = int(cluster["metrics_export_port"])
            if cluster.get("object_store_memory"):
                kwargs["object_store_memory"] = int(cluster["object_store_memory"])
        ctx = ray.init(**kwargs)
        dashboard = getattr(ctx, "dashboard_url", None)
    else:
        dashboard = None
        try:
            dashboard = ray.get_runtime_context().gcs_address and ray.worker.get_dashboard_url()  # type: ignore[attr-defined]
        except Exception:
            pass
    res = ray.cluster_resources()
    return {"dashboard_url": f"http://{dashboard}" if dashboard and not str(dashboard).startswith("http") else dashboard,
            "num_cpus": res.get("CPU", 0.0), "nodes": len([n for n in ray.nodes() if n.get("Alive")]),
            "ray_init_s": time.perf_counter() - t0}


class NodeActor:
    """A generic Ray actor standing for one machine (a worker node, a client host, a chiplet).

    It hosts any number of objects by key, so concurrent variants of an experiment share one pool
    of node processes instead of each starting their own: ``host(key, cls, *args)`` builds an
    object on the node, ``call(key, method, *args)`` runs one of its methods there.
    """

    def __init__(self, index: int):
        self.index = index
        self.objects: dict[str, Any] = {}

    def host(self, key: str, cls, *args, **kwargs) -> None:
        self.objects[key] = cls(*args, **kwargs)

    def call(self, key: str, method: str, *args, **kwargs):
        return getattr(self.objects[key], method)(*args, **kwargs)

    def drop(self, key: str) -> None:
        self.objects.pop(key, None)

    def keys(self) -> list[str]:
        return list(self.objects)


def start_nodes(n: int, num_cpus: float = 0.0, prefix: str = "node"):
    """Start ``n`` NodeActors (named ``prefix-i`` in the Ray dashboard)."""
    import ray

    cls = ray.remote(num_cpus=num_cpus)(NodeActor)
    return [cls.options(name=f"{prefix}-{i}-{os.getpid()}-{time.time_ns() % 10**6}").remote(i) for i in range(n)]


class RemoteObjects:
    """Objects hosted one per node (``nodes[i]`` hosts ``objs[i]``), called all at once.

    ``call('round', x)`` returns the results in node order. With ``nodes=None`` the objects are
    plain local objects (single-process runs, unit tests) behind the same API.
    """

    def __init__(self, key: str, factories: list[tuple], nodes: list | None):
        self.key, self.n = key, len(factories)
        self.nodes = list(nodes[: self.n]) if nodes is not None else None
        if self.nodes is None:
            self.local = [cls(*args) for cls, *args in factories]
            return
        import ray

        if len(self.nodes) < self.n:
            raise ValueError(f"{self.n} objects need as many nodes, got {len(self.nodes)}")
        self.local = None
        ray.get([node.host.remote(key, cls, *args) for node, (cls, *args) in zip(self.nodes, factories)])

    def call(self, method: str, *args) -> list:
        if self.local is not None:
            return [getattr(o, method)(*args) for o in self.local]
        import ray

        return ray.get([node.call.remote(self.key, method, *args) for node in self.nodes])

    def close(self) -> None:
        if self.local is None:
            import ray

            ray.get([node.drop.remote(self.key) for node in self.nodes])
