"""Plot an alpha multirun of the ``gatekeeper`` experiment from MLflow: s_d and small-model
accuracy against alpha (error bars: standard errors over seeds), continued CE as reference.

    dtlab run -m experiment=gatekeeper experiment.common.gatekeeper.alpha=0.1,0.3,0.5,0.7,0.9 \\
        only=[gatekeeper,ce_continued] runs_dir=RUNS
    python -m components.serving.gatekeeper.sweep_plot --runs-dir RUNS [--out alpha_tradeoff.png]

Reads the finished ``gatekeeper`` variant runs (means and standard errors over seeds; the
per-seed runs nested under them are skipped), keeps the most recent run per alpha, and the most
recent ``ce_continued`` run as the reference line. (The experiment's own ``alpha_sweep`` variant
draws the same figure per seed inside one task.)
"""
import argparse
import json
import os
import sys
from pathlib import Path


def collect(tracking_uri: str, experiment: str = "gatekeeper") -> tuple[list[dict], dict | None]:
    """Latest finished gatekeeper child run per alpha (sorted by alpha) and the latest CE reference."""
    from components.core.tracker import tracking_client

    client = tracking_client(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise SystemExit(f"no MLflow experiment {experiment!r} at {tracking_uri}")
    runs = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", order_by=["attributes.start_time DESC"],
                              max_results=5000)
    per_alpha: dict[float, dict] = {}
    ce = None
    for r in runs:
        tags, m = r.data.tags, r.data.metrics
        if tags.get("dtlab.kind") == "seed":       # the variant's run holds the aggregates over seeds
            continue
        if tags.get("technique") == "gatekeeper" and "alpha" in r.data.params and "s_d" in m:
            a = float(r.data.params["alpha"])
            per_alpha.setdefault(a, {"alpha": a, "run_id": r.info.run_id, **{k: m.get(k, float("nan")) for k in
                                     ("s_d", "s_d_se", "small_acc", "small_acc_se", "s_o", "auroc")}})
        elif ce is None and tags.get("variant") == "ce_continued" and "s_d" in m:
            ce = {"s_d": m["s_d"], "small_acc": m.get("small_acc", float("nan")), "run_id": r.info.run_id}
    return [per_alpha[a] for a in sorted(per_alpha)], ce


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-dir", default=os.environ.get("DTLAB_RUNS_DIR", "runs"))
    ap.add_argument("--tracking-uri", default=None, help="default: MLFLOW_TRACKING_URI or sqlite:///RUNS/mlflow.db")
    ap.add_argument("--experiment", default="gatekeeper")
    ap.add_argument("--out", default=None, help="PNG path (default: RUNS/reports/gatekeeper_alpha_tradeoff.png)")
    a = ap.parse_args(argv)
    uri = a.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(a.runs_dir).resolve()}/mlflow.db"
    rows, ce = collect(uri, a.experiment)
    if len(rows) < 2:
        print(f"need gatekeeper runs at >= 2 alphas, found {len(rows)}", file=sys.stderr)
        return 1
    from components.serving.gatekeeper.technique import tradeoff_figure

    png = tradeoff_figure([r["alpha"] for r in rows], [r["s_d"] for r in rows], [r["s_d_se"] for r in rows],
                          [r["small_acc"] for r in rows], [r["small_acc_se"] for r in rows],
                          ce["s_d"] if ce else None, ce["small_acc"] if ce else None,
                          title="Gatekeeper alpha multirun")
    out = Path(a.out or Path(a.runs_dir) / "reports" / "gatekeeper_alpha_tradeoff.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(png)
    print(json.dumps({"rows": rows, "ce_continued": ce, "plot": str(out)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
