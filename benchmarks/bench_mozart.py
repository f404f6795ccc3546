"""Mozart simulator benchmark (run by `make bench`): tokens simulated per second, clustering time as
experts grow, and the layer-time ratios of each configuration against the baseline (contiguous +
bulk + mesh) measured in the same run; peak memory (tracemalloc) beside time."""
from __future__ import annotations

import time
import tracemalloc

import numpy as np

from components.simulation.mozart.allocation import clustered, contiguous
from components.simulation.mozart.profiling import coactivation
from components.simulation.mozart.technique import layer_time
from components.simulation.mozart.traces import planted
from components.simulation.mozart.wafer import MoEShape, Wafer, stage_times


def timed(fn, repeat: int = 1):
    tracemalloc.start()
    t0 = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    dt = (time.perf_counter() - t0) / repeat
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, dt, peak


def main() -> None:
    w = Wafer.from_config({})
    rng = np.random.default_rng(0)
    print("Mozart: one MoE layer (fwd+bwd), 4096-token micro-batch, E = 64, 8 packages x 8 chiplets")
    print(f"{'config':<34} {'top-k':>5} {'layer us':>9} {'speedup':>8} {'sim ms':>8} {'tokens/s':>10} {'peak MiB':>9}")
    for k in (2, 8):
        m = MoEShape(experts=64, top_k=k)
        perm = rng.permutation(64)
        prof = planted(4096, 64, k, 8, 0.9, rng, perm)
        ev = planted(4096, 64, k, 8, 0.9, rng, perm)
        home = rng.integers(8, size=4096)
        f, C = coactivation(prof, 64)
        gc, g0 = clustered(f, C, 8, 0.1, rng), contiguous(f, C, 8, 0.1, rng)
        base = None
        for name, g, sched, net in [("baseline (contig, bulk, mesh)", g0, "bulk", "mesh"),
                                    ("+ clustering", gc, "bulk", "mesh"), ("+ streaming s=8", g0, "stream", "mesh"),
                                    ("+ NoP-Tree", g0, "bulk", "tree"), ("full", gc, "stream", "tree")]:
            (t, _), dt, peak = timed(lambda: layer_time(stage_times(ev, home, g, m, w, w.network(net)), sched, 8, w, True), repeat=5)
            base = base or t
            print(f"{name:<34} {k:>5} {t * 1e6:>9.1f} {base / t:>8.2f} {dt * 1e3:>8.2f} {4096 / dt:>10.0f} {peak:>9.1f}")
    print("\nBalanced clustering time vs experts (top-2, 8 packages; contiguous = baseline)")
    print(f"{'experts':>8} {'cluster s':>10} {'contig s':>9} {'ratio':>8} {'peak MiB':>9}")
    for E in (64, 128, 256, 512):
        perm = rng.permutation(E)
        prof = planted(8192, E, 2, 8, 0.9, rng, perm)
        f, C = coactivation(prof, E)
        _, dt_c, peak = timed(lambda: clustered(f, C, 8, 0.1, rng))
        _, dt_0, _ = timed(lambda: contiguous(f, C, 8, 0.1, rng), repeat=10)
        print(f"{E:>8} {dt_c:>10.3f} {dt_0:>9.5f} {dt_c / dt_0:>8.0f} {peak:>9.1f}")


if __name__ == "__main__":
    main()
