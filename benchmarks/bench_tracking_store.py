"""Opening a new SQLite tracking store: MLflow's own schema migration against dtlab's copy of an
empty migrated template (components/core/tracker.py), timed by the shared mechanism
(components.core.timing.interleave, wall clock: MLflow's migration is one thread, but the copy's
cost is I/O). Every new runs folder, test store and a fresh clone's first `dtlab run` pays this once.
Aim: the copy at most 0.2x of the migration, outside the noise floor.

    python benchmarks/bench_tracking_store.py [--rounds 8]
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._util import PeakMemory  # noqa: E402

AIM = 0.2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8, help="interleaved rounds at most (at least 5)")
    args = ap.parse_args()
    from mlflow.tracking import MlflowClient

    from components.core import timing, tracker

    with tempfile.TemporaryDirectory() as d:
        os.environ["DTLAB_CACHE_HOME"] = f"{d}/cache"   # a template of this run's own, built by the warm-up call
        n = itertools.count()

        def migrate():   # MLflow builds the store (what every new store cost before)
            MlflowClient(tracking_uri=f"sqlite:///{d}/m{next(n)}/mlflow.db").search_experiments(max_results=1)

        def template():  # dtlab's path: copy of the template, then MLflow opens and checks it
            tracker.tracking_client(f"sqlite:///{d}/t{next(n)}/mlflow.db")

        with PeakMemory() as mem:
            t = timing.interleave({"mlflow_migrate": migrate, "template_copy": template}, "mlflow_migrate",
                                  clock="wall", min_rounds=5, max_rounds=max(5, args.rounds), warmup=1)
    from components.core.claims import Claim, check, outcome_status

    figures = {"bench": t.metrics("copy_ratio", "template_copy")}   # the ratio and its noise, as a technique logs them
    aim = check(Claim("copy_aim", f"bench.copy_ratio <= {AIM}", noise=("bench.copy_ratio_noise",)), figures)
    print("| method | median_s | ratio_vs_migrate | interval | rounds |")
    print("|---|---|---|---|---|")
    for name in ("mlflow_migrate", "template_copy"):
        ratio = t.ratio(name) if name != "mlflow_migrate" else None
        print(f"| {name} | {t.median(name):.3f} | {ratio.value if ratio else 1.0:.3f} | "
              f"{f'[{ratio.lo:.3f}, {ratio.hi:.3f}]' if ratio else '-'} | {t.n_rounds} |")
    print(f"\nnoise floor (log self ratio) {t.noise:.3f}; aim template_copy <= {AIM}x: {outcome_status(aim)}"
          f"{f' ({aim.error})' if aim.error else ''}; peak memory {mem.peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
