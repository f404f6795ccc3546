"""Registered technique `federated`: one federated run for one seed (clients on Ray actors, server
loop in the variant task), for any registered strategy (``dtlab list strategy``: FedAvg/FedProx,
local-only, FML, FedProto, PHP-FL), with the fairness metrics PHP-FL is judged by. Baselines and
PHP-FL ablations are the same technique with other params.

``ctx.seed`` fixes one Dirichlet split, one assignment of participation probabilities and one
participation sequence, identical across strategies, so the DAG pairs methods seed by seed.
Metrics: mean_acc, acc_std (fairness: spread of client accuracies within the run), worst20_acc
(mean of the worst 20% of clients), low_high_p_gap (mean accuracy of the lowest-p quartile minus
the highest-p quartile); per-round curves, a per-client table and a plot of accuracy against
participation probability. ISPU's premise, per client: low_part_acc (lowest-p quartile's mean
accuracy), low_part_rate and the strategy's own diagnostics over that quartile (PHP-FL:
low_part_overwrite_loss, low_part_merge_gain).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from components.core.errors import require
from components.core.params import parse_params
from components.core.registry import technique
from components.core.result import Result
from components.data.digits import dirichlet_partition, train_test_split_per_client
from components.federated.client import ClientSpec
from components.federated.participation import check_pattern, client_probs
from components.federated.pool import HostPool
from components.federated.server import History, run_federation
from components.federated.strategy import FLConfig, make_strategy, strategy_class
from components.models.small_nets import PRIVATE_ARCHS
from components.core.plotting import fig_png


@dataclass
class FederatedParams:
    strategy: str = "php_fl"         # a registered strategy (dtlab list strategy)
    options: dict = field(default_factory=dict)        # the strategy's own knobs (its Options dataclass)
    participation: dict = field(default_factory=lambda: {"pattern": "linear"})
    n_clients: int = 20
    alpha: float = 0.3               # Dirichlet label skew (smaller: fewer classes per client)
    min_client_samples: int = 10
    test_frac: float = 0.2           # per-client held-out share
    archs: list[str] = field(default_factory=lambda: list(PRIVATE_ARCHS))   # assigned round-robin
    rounds: int = 100
    local_epochs: int = 2
    batch_size: int = 16
    lr: float = 0.05
    emb_dim: int = 32
    aux_hidden: int = 16
    eval_window: int = 5             # final per-client accuracy = mean of the last k evaluations
    hosts: int = 4                   # client hosts (Ray actors); 0 = in-process, no Ray
    fault: dict = field(default_factory=dict)   # {host: h, round: r}: kill host h's actor during round r

    def check(self):
        require(self.n_clients >= 1, "n_clients", self.n_clients, "a positive number of clients")
        require(self.alpha > 0 and math.isfinite(self.alpha), "alpha", self.alpha, "a positive Dirichlet concentration")
        require(self.min_client_samples >= 2, "min_client_samples", self.min_client_samples, "an integer >= 2 (train and test)")
        require(self.n_clients * self.min_client_samples <= 1797, "n_clients", self.n_clients,
                f"at most {1797 // self.min_client_samples} clients with min_client_samples={self.min_client_samples} (load_digits has 1797 samples)")
        require(0 < self.test_frac < 1, "test_frac", self.test_frac, "a fraction in (0, 1)")
        check_pattern(self.participation, self.n_clients)
        require(len(self.archs) >= 1, "archs", self.archs, "at least one architecture")
        for i, a in enumerate(self.archs):
            require(a in PRIVATE_ARCHS, f"archs[{i}]", a, "one of " + ", ".join(PRIVATE_ARCHS))
        require(self.rounds >= 1, "rounds", self.rounds, "a positive number of rounds")
        require(self.local_epochs >= 1, "local_epochs", self.local_epochs, "a positive number of epochs")
        require(self.batch_size >= 1, "batch_size", self.batch_size, "a positive batch size")
        require(self.lr > 0, "lr", self.lr, "a positive learning rate")
        require(self.emb_dim >= 1, "emb_dim", self.emb_dim, "a positive width")
        require(self.aux_hidden >= 1, "aux_hidden", self.aux_hidden, "a positive width")
        require(1 <= self.eval_window <= self.rounds + 1, "eval_window", self.eval_window, f"an integer in [1, rounds + 1 = {self.rounds + 1}]")
        require(self.hosts >= 0, "hosts", self.hosts, "a non-negative number of host actors (0: in-process)")
        options = strategy_class(self.strategy).Options
        if options is not None:
            parse_params(options, self.options, "options")
        if self.fault:
            bad = sorted(set(self.fault) - {"host", "round"})
            require(not bad, f"fault.{bad[0] if bad else ''}", self.fault, "only keys host, round")
            require(self.hosts >= 1, "fault", self.fault, "a fault drill needs hosts >= 1 (Ray actors)")
            h, r = self.fault.get("host", 0), self.fault.get("round", 0)
            require(isinstance(h, int) and 0 <= h < self.hosts, "fault.host", h, f"a host index in [0, {self.hosts})")
            require(isinstance(r, int) and 0 <= r < self.rounds, "fault.round", r, f"a round in [0, {self.rounds})")

    def fl_config(self) -> FLConfig:
        return FLConfig(lr=self.lr, local_epochs=self.local_epochs, batch_size=self.batch_size, rounds=self.rounds,
                        emb_dim=self.emb_dim, aux_hidden=self.aux_hidden)


# ---------------------------------------------------------------------------------- metrics
def p_quartiles(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the lowest-p and the highest-p quarter of clients (at least one each)."""
    q = max(1, len(probs) // 4)
    order = np.argsort(probs, kind="stable")
    return order[:q], order[-q:]


def fairness_metrics(acc: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    """mean, spread, worst-20% mean, the lowest-p and highest-p quartiles' mean accuracies
    (low_part_acc, high_part_acc) and their gap."""
    ok = np.isfinite(acc)
    a, p = acc[ok], probs[ok]
    k20 = max(1, math.ceil(0.2 * len(a)))
    low, high = p_quartiles(p)
    return {"mean_acc": float(a.mean()), "acc_std": float(a.std()), "worst20_acc": float(np.sort(a)[:k20].mean()),
            "low_high_p_gap": float(a[low].mean() - a[high].mean()),
            "low_part_acc": float(a[low].mean()), "high_part_acc": float(a[high].mean())}


def low_part_metrics(hist: History, rounds: int) -> dict[str, float]:
    """The lowest-p quartile's participation rate and the mean of each strategy diagnostic
    (Strategy.client_report) over its clients: ``low_part_<name>`` (NaN where none has a value)."""
    low, _ = p_quartiles(hist.probs)
    out = {"low_part_rate": float(hist.participations[low].mean() / rounds)}
    names = sorted({k for r in hist.client_report.values() for k in r})
    for k in names:
        v = np.array([hist.client_report.get(int(c), {}).get(k, np.nan) for c in low], dtype=float)
        out[f"low_part_{k}"] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
    return out


def split_clients(X, y, p: FederatedParams, seed: int) -> list[ClientSpec]:
    rng = np.random.default_rng([seed, 1])
    parts = dirichlet_partition(y, p.n_clients, p.alpha, rng, p.min_client_samples)
    specs = []
    for cid, (tr, te) in enumerate(train_test_split_per_client(parts, p.test_frac, rng)):
        specs.append(ClientSpec(cid, p.archs[cid % len(p.archs)], X[tr], y[tr], X[te], y[te], seed * 1000 + cid))
    return specs


def run_one_seed(p: FederatedParams, X, y, seed: int, nodes, own_nodes: bool, key: str, progress=None) -> tuple[History, list[ClientSpec]]:
    """One federation: split, probabilities, hosts, server loop, all drawn from ``seed``."""
    specs = split_clients(X, y, p, seed)
    probs = client_probs(p.participation, p.n_clients, np.random.default_rng([seed, 2]))
    fl = p.fl_config()
    cls = strategy_class(p.strategy)
    pool = HostPool(key, cls, p.options, fl, specs, max(1, p.hosts), nodes, own_nodes)
    try:
        hist = run_federation(make_strategy(cls, p.options, fl), pool, probs, p.rounds,
                              np.random.default_rng([seed, 3]), seed * 1000 + 999, p.fault or None, progress)
    finally:
        pool.close()
    return hist, specs


@technique("federated", family="federated", params=FederatedParams, inputs=("digits",),
           summary="Federated learning on Ray actors (clients hosted several per actor) for any registered strategy "
                   "(params.strategy: fedavg, local_only, fml, fedproto, php_fl; dtlab list strategy) under unequal "
                   "participation patterns; accuracy and fairness per client.")
def run_federated(p: FederatedParams, ctx) -> Result:
    """Runs one seed; with Ray hosts, from a helper thread (see :func:`off_main_thread`)."""
    import torch

    torch.set_num_threads(1)
    return off_main_thread(_run_federated, p, ctx) if p.hosts > 0 else _run_federated(p, ctx)


def off_main_thread(fn, *args):
    """Call ``fn`` in a helper thread and wait for it.

    A Ray task that blocks in ``ray.get`` on its main thread hands its CPUs back, and Ray then
    starts further variant tasks (each a worker process of ~400 MB with torch): all 28 variants
    of php_fl ran at once (~10 GB). Ray releases CPUs only for blocking calls on the task's main
    thread, so calling the actors from a helper thread keeps ``resources.num_cpus`` a real bound.
    """
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="fl-server") as ex:
        return ex.submit(fn, *args).result()


def _run_federated(p: FederatedParams, ctx) -> Result:
    digits = ctx.input("digits")
    X, y = np.asarray(digits["X"], np.float32), np.asarray(digits["y"], np.int64)
    seed = ctx.seed
    t0 = time.perf_counter()
    nodes, own = None, False
    if p.hosts > 0:
        if p.fault or not ctx.nodes:   # a fault drill kills actors: never the shared pool
            from components.core.raytools import start_nodes

            nodes, own = start_nodes(p.hosts, 0.0, "fl-host"), True
        else:
            nodes = ctx.nodes
    hist, specs = run_one_seed(p, X, y, seed, nodes, own, ctx.host_key(),
                               lambda r, acc: ctx.progress(r, p.rounds, acc=acc))
    wall = time.perf_counter() - t0

    final = np.nanmean(hist.acc[-p.eval_window:], axis=0)
    metrics = fairness_metrics(final, hist.probs)
    metrics.update(never_sampled=float((hist.sampled == 0).sum()), dropped_participants=float(hist.dropped),
                   host_failures=float(sum(e["event"] == "host_died" for e in hist.events)),
                   participation_rate=float(hist.participations.sum() / (p.rounds * p.n_clients)),
                   upload_floats_per_round=hist.upload_floats / p.rounds, rounds_per_s=p.rounds / max(hist.wall_s, 1e-9),
                   wall_s_technique=wall)
    metrics.update(low_part_metrics(hist, p.rounds))
    curve = np.array([[fairness_metrics(row, hist.probs)[k] if np.isfinite(row).any() else np.nan
                       for k in ("mean_acc", "acc_std", "worst20_acc")] for row in hist.acc])
    rows = [{"client": s.cid, "arch": s.arch, "p": round(float(hist.probs[s.cid]), 4),
             "sampled": int(hist.sampled[s.cid]), "participations": int(hist.participations[s.cid]),
             "n_train": len(s.ytr), "n_test": len(s.yte), "classes": int(len(np.unique(s.ytr))),
             "acc": float(final[s.cid]), **hist.client_report.get(s.cid, {})} for s in specs]
    xs, ys = _acc_vs_p(rows)
    # per-round curves get their own names: MLflow keeps one history per key, and the final
    # metrics (mean of the last eval_window evaluations) must not be overwritten by a curve
    series = {"round_mean_acc": curve[:, 0].tolist(), "round_acc_std": curve[:, 1].tolist(),
              "round_worst20_acc": curve[:, 2].tolist(), "acc_vs_p": (xs, ys, "participation probability")}
    tables = {"per_client": rows}
    if hist.events:
        tables["faults"] = hist.events
    info = {"strategy": p.strategy, "options": p.options, "participation": check_pattern(p.participation, p.n_clients),
            "events": hist.events, "hosts": p.hosts,
            "note": "acc[t] is measured entering round t; final accuracy = mean of the last eval_window evaluations"}
    return Result(metrics=metrics, series=series, tables=tables, info=info,
                  files={"plots/acc_vs_p.png": _plot_acc_vs_p(rows, xs, ys, f"{ctx.variant}: {p.strategy}, "
                                                                f"{p.participation.get('pattern')}, seed {seed}")})


def _acc_vs_p(rows: list[dict]) -> tuple[list[float], list[float]]:
    """Mean client accuracy per participation level (levels rounded to 0.01)."""
    by: dict[float, list[float]] = {}
    for r in rows:
        if math.isfinite(r["acc"]):
            by.setdefault(round(r["p"], 2), []).append(r["acc"])
    xs = sorted(by)
    return xs, [float(np.mean(by[x])) for x in xs]


def _plot_acc_vs_p(rows, xs, ys, title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter([r["p"] for r in rows], [r["acc"] for r in rows], s=12, alpha=0.4, label="client")
    ax.plot(xs, ys, "-o", color="tab:red", ms=3, label="mean per p level")
    ax.set_xlabel("participation probability p_i")
    ax.set_ylabel("client test accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig_png(fig, dpi=100)
