"""The board's cost (issue "The whole board in 75 minutes"): every experiment's full run, its wall time,
the cold prepare in it, peak memory and share of the total, against the targets (10 minutes per
experiment warm, 75 minutes for the board warm, 100 cold).

Reads what `dtlab reproduce` recorded: each experiment's latest board run in the store (its wall time,
``platform.prepare_s`` and whether any prepare step missed the cache, or the prepare pass reproduce ran
before it, ``reproduce.prepare_s``; the process tree's peak memory),
and, for an experiment whose run is not in this store, its row in RESULTS.md (wall and peak memory
only: marked "RESULTS.md"). Warm wall = wall - prepare for a run whose prepare missed the cache (a
cached prepare costs about nothing); a run that hit the cache is warm as it is, and so is one after a
prepare pass (its wall "as run" adds the pass when it built something). The cold board is the warm one plus each
experiment's newest recorded cold prepare (its latest run may have found the cache warm); a pass that
`dtlab reproduce` ran once for several experiments counts once.

``--profile[=N]`` prints, instead, where each experiment's run in the store spends its time (the
issue's "profile before changing anything"): its platform stages (Ray start, prepare, execute, report)
and its N slowest tasks, each a (variant, seed) run with its wall seconds, and the sum of task walls
against the run's wall (their ratio is how many tasks ran at once). Robustness runs count: a
perturbation is the same work on other inputs. It also splits the task seconds by what the
experiment's claims read (:func:`claim_reads`): variants a gated claim's ``holds`` or ``premise``
reads, variants only controls or ``measured`` figures read, and variants no claim reads; the last
line says how long the gated tasks alone take at the packing of each experiment's tuned run (its task
seconds scaled by wall / task seconds), the floor that only a smaller regime of the gated claims can lower.

Run: .venv/bin/python benchmarks/bench_reproduce.py [RESULTS.md] [tracking.uri=...] [--profile[=N]]
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

EXPERIMENT_S, BOARD_WARM_S, BOARD_COLD_S = 600.0, 75 * 60.0, 100 * 60.0


def prepare_of(run) -> tuple[bool, float | None]:
    """(cold, seconds) of a run's prepare: reproduce's pass before the run when one ran (cold when it
    built something), else the run's own prepare stage (cold when a step missed the cache)."""
    cold, secs, _ = _prepare_pass_of(run)
    return cold, secs


def _prepare_pass_of(run) -> tuple[bool, float | None, tuple | None]:
    """:func:`prepare_of` and the pass's identity where the board shared it (counted once in a sum)."""
    from pipelines.results_md import prepare_pass, shared_pass_key

    p = prepare_pass(run)
    if p is not None:
        return bool(p["built"]), p["seconds"], shared_pass_key(p)
    tags = run.data.tags
    cold = any(k.startswith("prepare.") and k.endswith(".cache") and v == "miss" for k, v in tags.items())
    return cold, run.data.metrics.get("platform.prepare_s"), None


def last_cold_pass(runs) -> tuple[float, tuple | None] | None:
    """(seconds, identity of the board's shared pass or None) of the newest cold prepare among ``runs`` (newest
    first): what a fresh store pays before the experiment, even where the latest run found the cache warm. None if
    none was cold."""
    return next(((secs, shared) for cold, secs, shared in map(_prepare_pass_of, runs) if cold and secs is not None),
                None)


def cold_total(passes) -> float:
    """The seconds of the cold passes behind the experiments' rows: an experiment's own pass each, a pass
    the board shared once however many experiments it built for."""
    own = sum(secs for secs, shared in passes if shared is None)
    return own + sum({shared: secs for secs, shared in passes if shared is not None}.values())


def store_rows(client) -> dict[str, dict]:
    """{experiment: wall, prepare, cold, peak, last cold prepare} of each experiment's latest board run
    in the store."""
    from components.core.runs_query import off_board, parent_history, robustness_label
    from pipelines.results_md import prepare_pass, run_wall

    rows = {}
    for h in parent_history(client, None, statuses=("FINISHED",)):
        tuned = [r for r in h.runs if not off_board(r) and robustness_label(r) in ("", "tuned")]
        if not tuned or h.experiment.name == "scoreboard":
            continue
        run = tuned[0]
        cold, prep, shared = _prepare_pass_of(run)
        wall = run_wall(run)
        if prepare_pass(run) is not None and cold and shared is None:   # its own pass before the run: "as run" adds it
            wall = (wall or 0.0) + prep
        rows[h.experiment.name] = {"wall_s": wall, "prepare_s": prep, "cold": cold,
                                   "last_cold": last_cold_pass(tuned),
                                   "peak_mb": run.data.metrics.get("reproduce.peak_rss_mb"), "source": "store"}
        if shared is not None:   # the board's pass, shared: added once to the total "as run", not to this row
            rows[h.experiment.name].update(warm_s=wall, shared_pass=(prep, shared))
    return rows


def results_rows(path: Path) -> dict[str, dict]:
    """{experiment: wall, peak} from RESULTS.md's summary rows (no prepare split there)."""
    from pipelines.results_md import summary_rows

    if not path.is_file():
        return {}
    out = {}
    for name, r in summary_rows(path.read_text()).items():
        if r["wall_s"] is not None:
            out[name] = {"wall_s": r["wall_s"], "prepare_s": None, "cold": None, "peak_mb": r["peak_mb"],
                         "source": "RESULTS.md"}
    return out


STAGES = ("ray_init_s", "prepare_s", "execute_s", "report_s", "tracking_wait_s", "teardown_s")


def task_walls(client, run) -> list[tuple[str, float, str]]:
    """[(task name, wall seconds, variant)] of a parent's tasks, slowest first: its grandchildren
    (``variant@seed`` runs) where a variant has them, else the variant run itself."""
    from pipelines.results_md import run_wall

    def children(parent_id):
        return client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'",
                                  max_results=5000)

    out = []
    for v in children(run.info.run_id):
        out += [(r.info.run_name, run_wall(r) or 0.0, v.info.run_name) for r in children(v.info.run_id) or [v]]
    return sorted(out, key=lambda t: -t[1])


READS = ("gated", "control", "unread")


def claim_reads(name: str) -> dict[str, str]:
    """{variant: gated | control | unread} for experiment ``name``'s full configuration: ``gated`` when a
    gated claim's holds or premise reads it (in any cell), ``control`` when only a control claim or a
    measured / premise_measured figure does, ``unread`` when no claim names it (table rows and plots)."""
    from components.core.claims import referenced_variants, substitute
    from pipelines.config import compose
    from pipelines.dag import validate

    spec = validate(compose([f"experiment={name}"]))
    gated: set[str] = set()
    shown: set[str] = set()
    for c in spec.claims:
        for cell, holds, measured in c.expressions():
            decides = referenced_variants(holds) | (referenced_variants(substitute(c.premise, cell))
                                                    if c.premise else set())
            figures = (referenced_variants(measured) if measured else set()) | (
                referenced_variants(substitute(c.premise_measured, cell)) if c.premise_measured else set())
            (gated if c.gate else shown).update(decides)
            shown.update(figures)
    return {v.name: "gated" if v.name in gated else "control" if v.name in shown else "unread" for v in spec.variants}


def profile(client, top: int) -> None:
    """Per experiment in the store: its newest finished full run's stages and slowest tasks."""
    from components.core.runs_query import off_board, parent_history, robustness_label
    from pipelines.config import experiment_names
    from pipelines.results_md import duration, run_wall

    print(f"| experiment | run | wall | {' | '.join(s[:-2] for s in STAGES)} | tasks: sum / wall | "
          f"task s gated / control / unread | slowest {top} tasks |")
    print("|---|---|---:|" + "---:|" * len(STAGES) + "---:|---:|---|")
    known, floor = set(experiment_names()), {k: 0.0 for k in READS}
    for h in parent_history(client, None, statuses=("FINISHED",)):
        run = next((r for r in h.runs if not off_board(r)), None)
        if run is None or h.experiment.name == "scoreboard":
            continue
        m, wall, tasks = run.data.metrics, run_wall(run) or 0.0, task_walls(client, run)
        stages = " | ".join(f"{m[f'platform.{s}']:.0f}" if f"platform.{s}" in m else "–" for s in STAGES)
        busy = sum(t for _, t, _ in tasks)
        reads = claim_reads(h.experiment.name) if h.experiment.name in known else {}
        split = {k: sum(t for _, t, v in tasks if reads.get(v, "unread") == k) for k in READS}
        at_once = busy / wall if wall else float("nan")
        tuned = next((r for r in h.runs if not off_board(r) and robustness_label(r) in ("", "tuned")), None)
        if tuned is not None:   # the floor reads each experiment's tuned run, even where a perturbation is newer
            t_tasks = tasks if tuned is run else task_walls(client, tuned)
            t_busy, t_wall = sum(t for _, t, _ in t_tasks), run_wall(tuned) or 0.0
            for k in READS:
                share = sum(t for _, t, v in t_tasks if reads.get(v, "unread") == k)
                floor[k] += share * t_wall / t_busy if t_busy else 0.0
        slow = ", ".join(f"{n} {t:.0f} s" for n, t, _ in tasks[:top])
        print(f"| {h.experiment.name} | {robustness_label(run) or 'tuned'} | {duration(wall)} | {stages} | "
              f"{busy:.0f} s / {wall:.0f} s = {at_once:.2f} | "
              f"{' / '.join(f'{split[k]:.0f}' for k in READS)} | {slow} |")
    print(f"\ntuned runs, each at its own packing: the gated tasks alone {duration(floor['gated'])}, control tasks "
          f"{duration(floor['control'])}, unread tasks {duration(floor['unread'])} (target for the board "
          f"{duration(BOARD_WARM_S)})")


def main(args: list[str]) -> None:
    from components.core.tracker import tracking_client
    from pipelines.preflight import tracking_store
    from pipelines.results_md import duration

    flag = next((a for a in args if a.startswith("--profile")), None)
    if flag is not None:
        _, eq, n = flag.partition("=")
        if eq and not (n.isdigit() and int(n) >= 1):
            print(f"bench_reproduce: error: --profile={n}: a positive number of tasks (e.g. --profile=5)",
                  file=sys.stderr)
            sys.exit(2)
        uri, _, _ = tracking_store([a for a in args if "=" in a and not a.startswith("--")])
        profile(tracking_client(uri), int(n) if eq else 5)
        return
    path = Path(next((a for a in args if "=" not in a), "RESULTS.md"))
    uri, _, _ = tracking_store([a for a in args if "=" in a])
    rows = {**results_rows(path), **store_rows(tracking_client(uri))}
    warm = {k: r.get("warm_s", r["wall_s"] - (r["prepare_s"] or 0.0) if r["cold"] else r["wall_s"])
            for k, r in rows.items()}
    shared_now = {r["shared_pass"][1]: r["shared_pass"][0] for r in rows.values() if r.get("shared_pass")}
    total, total_warm = sum(r["wall_s"] for r in rows.values()) + sum(shared_now.values()), sum(warm.values())
    print(f"board cost: {len(rows)} experiments (store {uri}; rows not in it from {path})\n")
    print("| experiment | wall | prepare (cold/warm) | warm wall | peak memory | share | <= 10 min warm | from |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for name in sorted(rows, key=lambda k: -rows[k]["wall_s"]):
        r = rows[name]
        known = r["cold"] is not None     # a RESULTS.md row does not say whether its prepare was cold
        prep = "–" if r["prepare_s"] is None else f"{r['prepare_s']:.0f} s ({'cold' if r['cold'] else 'warm'}" + (
            ", a pass the board shared" if r.get("shared_pass") else "") + ")"
        peak = f"{r['peak_mb']:.0f} MB" if r["peak_mb"] else "–"
        ok = "yes" if warm[name] <= EXPERIMENT_S else ("NO" if known else "NO (or a cold prepare)")
        print(f"| {name} | {duration(r['wall_s'])} | {prep} | {'' if known else '<= '}{duration(warm[name])} | "
              f"{peak} | {r['wall_s'] / total:.1%} | {ok} | {r['source']} |")
    over = sorted(k for k in rows if warm[k] > EXPERIMENT_S)
    print(f"\nover 10 minutes warm: {', '.join(over) or 'none'}")
    # cold: what a fresh store pays, each experiment's newest recorded cold prepare on top of the warm
    # board (its latest run may have found the cache warm, so "as run" can understate it)
    colds = {k: r.get("last_cold") for k, r in rows.items()}
    total_cold = total_warm + cold_total([v for v in colds.values() if v])
    n_shared = len({v[1] for v in colds.values() if v and v[1] is not None})
    print(f"total {duration(total)} as run · warm {'<= ' if any(r['cold'] is None for r in rows.values()) else ''}"
          f"{duration(total_warm)} (target {duration(BOARD_WARM_S)}; "
          f"{'met' if total_warm <= BOARD_WARM_S else 'NOT met'}) · cold {duration(total_cold)} = warm + each "
          f"experiment's newest recorded cold prepare ({sum(1 for v in colds.values() if v)} experiments"
          f"{f', {n_shared} pass(es) the board shared counted once' if n_shared else ''}; "
          f"target {duration(BOARD_COLD_S)}; {'met' if total_cold <= BOARD_COLD_S else 'NOT met'})")


if __name__ == "__main__":
    main(sys.argv[1:])
