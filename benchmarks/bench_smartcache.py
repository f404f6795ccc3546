"""SmartCache benchmark (run by `make bench`): the experiment's variant table (ratios against prefix
caching and no cache from the same run) and claim table, then a loopback load test of the Ray Serve
service, SmartCache vs no cache, from a second process: req/s, p50, p99; peak memory beside time.

    .venv/bin/python benchmarks/bench_smartcache.py [--debug] [--runs-dir DIR] [--requests N]
    .venv/bin/python benchmarks/bench_smartcache.py --separability [--plot PATH]

The LM and embeddings come from the experiment's cached prepare steps (same runs dir: built once).

``--separability`` (issue 32 item 7, no Ray): whether the embedder can tell the workload's repeated
questions from different ones with one threshold, for each phrasing and each kind of question
(explicit, pronoun follow-up), among texts the entity guard cannot tell apart (the same entities): the
share of same-meaning pairs at cosine >= tau and of different-meaning pairs at cosine >= tau, over tau,
with the figures the experiment reports (:func:`components.serving.smartcache.misses.paraphrase_recall`)
and how often a text's nearest neighbour among them asks the same thing (the ranking a top-1 lookup
in scope sees). A curve per kind in ``--plot``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

COLS = ["hit_ratio", "false_hit_ratio", "answer_accuracy", "kv_blocks_peak", "prefill_tokens_saved", "sim_ttft_s",
        "shift_f1", "wall_per_turn_s"]

from benchmarks._util import (PeakMemory, claims_table, fig, fig_ratio, prepared, run_in_store,  # noqa: E402
                              variant_metrics, variant_table)


def tables(out) -> None:
    pre = variant_metrics(out).get("prefix", {})
    variant_table(out, [*[(c, fig(c, ".4g")) for c in COLS], ("blocks/prefix", fig_ratio(pre, "kv_blocks_peak")),
                        ("ttft/prefix", fig_ratio(pre, "sim_ttft_s"))])
    claims_table(out)


def load_test(b: dict, workload: dict, n_requests: int, concurrency: int, max_seconds: float) -> None:
    import ray

    from components.data.conversations import KBParams, WorkloadParams, make_kb, make_workload
    from components.serving.app import deploy, serve_session, undeploy
    from components.serving.loadtest import run_load_test
    from components.serving.smartcache.service import build_app

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    kb = make_kb(KBParams(**b["lm"]["kb"]))
    turns = make_workload(kb, WorkloadParams(**workload), seed=99)       # a draw no experiment seed uses
    bodies = [{"session": f"s{t.session}", "query": t.query} for t in turns]
    rows = []
    with serve_session() as s:
        for system in ("none", "smartcache"):
            name = f"smartcache_bench_{system}"
            handle = deploy(build_app(b, system), name=name, route_prefix=f"/scb_{system}")
            r = run_load_test(s.url(f"/scb_{system}/chat"), bodies, n_requests=n_requests, concurrency=concurrency,
                              max_seconds=max_seconds)
            rows.append((system, r, handle.stats.remote().result(timeout_s=60)))
            undeploy(name)
    base = rows[0][1]
    print(f"\nLoad test: {n_requests} turns max, concurrency {concurrency}, <= {max_seconds:.0f} s each, loopback HTTP")
    print(f"{'service':<12} {'ok':>5} {'err':>4} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'thr vs none':>12} "
          f"{'p50 vs none':>12} {'kv peak':>8} {'prefill tok':>12}")
    for system, r, st in rows:
        print(f"{system:<12} {r.n_ok:>5} {r.n_err:>4} {r.throughput_rps:>8.1f} {r.p50_ms:>8.1f} {r.p99_ms:>8.1f} "
              f"{r.throughput_rps / base.throughput_rps:>12.2f} {r.p50_ms / base.p50_ms:>12.2f} "
              f"{st['kv_blocks_peak']:>8} {sum(st['usage']['prefill'].values()):>12}")


TAUS = [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.81, 0.85, 0.9, 0.95]


def separability(runs_dir: str, plot: str, debug: bool = False) -> None:
    """Same- and different-meaning cosines of the workload's questions, per phrasing and kind (see above);
    ``debug``: the debug flavour's embeddings (a bag of words, built in seconds)."""
    from pathlib import Path

    import numpy as np

    from components.core.plotting import fig_png, figure
    from components.data.conversations import KBParams, make_kb, query_meanings
    from components.serving.smartcache.forest import entities
    from components.serving.smartcache.misses import paraphrase_recall

    fig, axes = figure(10, 4, ncols=2)
    for col, entry in enumerate(("embeddings", "embeddings_natural")):
        e, spec = prepared("smartcache", entry, runs_dir, debug)
        kbp = next(p.params for p in spec.prepare if p.name == entry).kb
        kb, emb = make_kb(KBParams(**kbp)), dict(zip(e["texts"], e["emb"]))
        tau = next(v for v in spec.variants if v.name == "smart").params.tau_sim_smart
        meanings = query_meanings(kb)
        pairs = {"explicit": ([], []), "followup": ([], [])}   # kind -> (same-meaning, different-meaning) cosines
        nearest = {"explicit": [], "followup": []}
        groups: dict = {}
        for text in meanings:
            groups.setdefault(entities(text), []).append(text)
        for texts in groups.values():
            kind = "followup" if meanings[texts[0]][0] is None else "explicit"
            v = np.stack([emb[t] for t in texts])
            sim = v @ v.T
            m = [meanings[t] for t in texts]
            iu = np.triu_indices(len(texts), 1)
            alike = np.array([m[i] == m[j] for i, j in zip(*iu)], bool)
            pairs[kind][0].extend(sim[iu][alike])
            pairs[kind][1].extend(sim[iu][~alike])
            np.fill_diagonal(sim, -np.inf)
            nearest[kind] += [m[i] == m[j] for i, j in enumerate(sim.argmax(1))]
        fig_text = paraphrase_recall(kb, emb, tau)
        phrasing = kbp.get("phrasing", "templated")
        print(f"\n## {phrasing} phrasing ({e['model']}; the forest's tau {tau})\n")
        print("| kind | texts | same / different pairs | p10 of same | max of different | recall at tau | "
              "separable recall | nearest neighbour asks the same |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for kind, (same, diff) in pairs.items():
            print(f"| {kind} | {len(nearest[kind])} | {len(same)} / {len(diff)} | "
                  f"{fig_text[f'paraphrase_sim_p10_{kind}']:.3f} | {fig_text[f'cross_meaning_max_{kind}']:.3f} | "
                  f"{fig_text[f'paraphrase_recall_{kind}']:.3f} | {fig_text[f'paraphrase_recall_separable_{kind}']:.3f} | "
                  f"{np.mean(nearest[kind]):.3f} |")
        print("\n| tau | " + " | ".join(f"{k} same >= tau | {k} different >= tau" for k in pairs) + " |")
        print("|---:|" + "---:|---:|" * len(pairs))
        ax = axes[0][col]
        for kind, (same, diff) in pairs.items():
            same, diff = np.asarray(same), np.asarray(diff)
            grid = np.linspace(0.3, 1.0, 71)
            ax.plot(grid, [(same >= t).mean() for t in grid], label=f"{kind}: same meaning")
            ax.plot(grid, [(diff >= t).mean() for t in grid], "--", label=f"{kind}: different meaning")
        for t in TAUS:
            print(f"| {t:.2f} | " + " | ".join(f"{(np.asarray(s) >= t).mean():.3f} | {(np.asarray(d) >= t).mean():.3f}"
                                               for s, d in pairs.values()) + " |")
        ax.axvline(tau, color="grey", lw=0.8)
        ax.set(xlabel="threshold (cosine)", ylabel="share of pairs at or above it", title=f"{phrasing} phrasing")
        ax.legend(fontsize=7)
    Path(plot).parent.mkdir(parents=True, exist_ok=True)
    Path(plot).write_bytes(fig_png(fig))
    print(f"\nplot: {plot}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--debug", action="store_true", help="the experiment's debug flavour")
    ap.add_argument("--runs-dir", default=os.environ.get("DTLAB_RUNS_DIR", "runs"))
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-seconds", type=float, default=40.0)
    ap.add_argument("--skip-experiment", action="store_true", help="only the load test")
    ap.add_argument("--separability", action="store_true", help="only the embedder's separability (no Ray)")
    ap.add_argument("--plot", default="runs/reports/smartcache_separability.png")
    a = ap.parse_args()
    if a.separability:
        separability(a.runs_dir, a.plot, a.debug)
        return

    if not a.skip_experiment:
        tables(run_in_store("smartcache", a.debug, a.runs_dir)[0])
    t0 = time.perf_counter()
    b, spec = prepared("smartcache", "served", a.runs_dir, a.debug)
    wl = next(v for v in spec.variants if v.name == "smart").params.workload
    with PeakMemory() as mem:
        load_test(b, wl, a.requests, a.concurrency, a.max_seconds)
    print(f"load test: {time.perf_counter() - t0:.0f} s wall, peak RSS {mem.peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
