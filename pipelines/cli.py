"""`dtlab`: run, list, compare and look at experiments.

    dtlab run experiment=error_feedback            one experiment through the DAG
    dtlab run experiment=error_feedback debug=true the tiny flavour
    dtlab run experiment=error_feedback experiment.seeds=[10,11,12]   the claims on other seeds
    dtlab run -m experiment=error_feedback experiment.seeds=[0],[1]   a Hydra multirun
    dtlab list [KIND]                              experiments and every registered kind, with files
    dtlab compare [EXPERIMENT ...]                 latest runs side by side (+ HTML report)
    dtlab ui                                       MLflow UI on 127.0.0.1
    dtlab up [cluster.KEY=VALUE ...]               a warm local Ray head (dashboard 127.0.0.1:8265) runs attach to
    dtlab down                                     stop it
    dtlab gc                                       end FAILED the runs whose driver is gone
    dtlab scoreboard                               every experiment's claims, paper beside measured
    dtlab robustness experiment=NAME               re-check its claims off the tuned configuration
    dtlab serve specreason [--port N] [overrides]  a technique as a standing HTTP service (Ray Serve)

Bad configuration is reported in one line (key, value, what is allowed) with exit code 2,
before Ray starts.
"""
from __future__ import annotations

import os
import sys

from pipelines.preflight import _die, preflight, split_args  # noqa: F401 - one validation pass

USAGE = __doc__


def cmd_run(args: list[str]) -> None:
    if any(a in ("-h", "--help") for a in args):
        print(USAGE)
        return
    hydra_flags, overrides = split_args(args)
    multirun = any(a in ("-m", "--multirun") for a in hydra_flags)
    preflight(overrides, multirun)
    from pipelines import hydra_app

    sys.argv = ["dtlab"] + hydra_flags + overrides
    hydra_app.main()


def cmd_list(args: list[str]) -> None:
    """Experiments, then every registered kind (techniques, prepare steps, strategies, blocks,
    policies, codecs, services) with the file that defines each; ``dtlab list KIND`` one kind."""
    from omegaconf import OmegaConf
    from rich.console import Console
    from rich.table import Table

    from components.core.registry import KINDS, entries
    from pipelines.config import CONF_DIR, ROOT

    wanted = args[0] if args else None
    if wanted is not None and wanted not in KINDS and wanted != "experiment":
        _die(f"list KIND={wanted!r}: one of experiment, " + ", ".join(KINDS))
    console = Console()
    if wanted in (None, "experiment"):
        t = Table(title="experiments (dtlab run experiment=NAME)")
        for c in ("experiment", "family", "summary", "variants", "config"):
            t.add_column(c, overflow="fold")
        for path in sorted((CONF_DIR / "experiment").glob("*.yaml")):
            exp = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            variants = exp.get("variants") or {}
            t.add_row(path.stem, str(exp.get("family", "")), str(exp.get("summary", "")), ", ".join(variants),
                      _rel(path, ROOT))
        console.print(t)
    for kind, what in KINDS.items():
        if wanted not in (None, kind):
            continue
        table = entries(kind)
        if not table:
            continue
        t = Table(title=f"{kind}: {what}")
        cols = ("name", "family", "summary", "file") if kind == "technique" else ("name", "summary", "file")
        for c in cols:
            t.add_column(c, overflow="fold")
        for name, e in sorted(table.items(), key=lambda kv: (kv[1].meta.get("family", ""), kv[0])):
            row = (name, e.meta.get("family", ""), e.summary, e.file) if kind == "technique" else (name, e.summary, e.file)
            t.add_row(*row)
        console.print(t)


def _rel(path, root) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:  # DTLAB_CONF_DIR outside the repository
        return str(path)


def _tracking_uri(args: list[str]) -> tuple[str, list[str]]:
    from pipelines import config

    overrides = [a for a in args if "=" in a]
    rest = [a for a in args if "=" not in a]
    try:
        cfg = config.compose(overrides)
    except Exception as e:  # noqa: BLE001
        _die(str(e))
    uri = os.environ.get("MLFLOW_TRACKING_URI") or cfg["tracking"]["uri"]
    return uri, rest, cfg


def cmd_compare(args: list[str]) -> None:
    from rich.console import Console

    from pipelines.compare import compare

    uri, names, cfg = _tracking_uri(args)
    path = compare(uri, names, out_dir=os.path.join(cfg["runs_dir"], "reports"), console=Console())
    if path:
        print(f"HTML report: {path}")


def cmd_ui(args: list[str]) -> None:
    uri, rest, cfg = _tracking_uri(args)
    port = rest[0] if rest else "5000"
    cmd = ["mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    print(" ".join(cmd))
    bindir = os.path.dirname(sys.executable)
    exe = os.path.join(bindir, "mlflow")
    os.execv(exe if os.path.exists(exe) else cmd[0], cmd)


def cmd_serve(args: list[str]) -> None:
    """Deploy a serving technique on Ray Serve (127.0.0.1) with its experiment's cached models."""
    from components.core.registry import entries

    services = {k: e.obj for k, e in entries("service").items()}
    if not args or args[0] in ("-h", "--help"):
        print("usage: dtlab serve NAME [--port N] [experiment overrides, e.g. debug=true]\nservices: "
              + "; ".join(f"{k}: {v.summary}" for k, v in services.items()))
        return
    name, rest = args[0], args[1:]
    if name not in services:
        _die(f"serve NAME={name!r}: a service: {', '.join(services)}")
    port = None
    if "--port" in rest:
        i = rest.index("--port")
        try:
            port = int(rest[i + 1])
            assert 1024 <= port <= 65535
        except (IndexError, ValueError, AssertionError):
            _die("--port: an integer in [1024, 65535]")
        rest = rest[:i] + rest[i + 2:]
    svc = services[name]
    cfg = preflight([f"experiment={svc.experiment}", *rest], multirun=False)
    from pathlib import Path

    from components.core.raytools import init_ray
    from components.serving.app import deploy, start_serve, stop_serve
    from pipelines import dag

    spec = dag.validate(cfg)
    runs_dir = Path(cfg.get("runs_dir") or "runs").resolve()
    print(f"dtlab serve {name}: models from prepare entry {svc.prepare!r} of experiment {svc.experiment!r} "
          f"(cache {runs_dir / 'cache'})", flush=True)
    out, status = dag.prepare_local(spec, svc.prepare, runs_dir)
    print(f"prepare cache: {svc.prepare}={status}", flush=True)
    init_ray(cfg["cluster"])
    info = start_serve(port)
    try:
        deploy(svc.build(out), name=f"dtlab_{name}", route_prefix=svc.route_prefix)
        url = info.url(svc.route_prefix + svc.endpoint)
        import json

        print(f"serving {name} at {url}\n  curl -s -X POST {url} -H 'content-type: application/json' "
              f"-d '{json.dumps(svc.example)}'\nCtrl-C stops it.", flush=True)
        import time

        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop_serve()
        import ray

        ray.shutdown()


def cmd_gc(args: list[str]) -> None:
    """End FAILED every run left RUNNING by a driver that is gone (SIGKILL, out of memory)."""
    if any(a in ("-h", "--help") for a in args):
        print("usage: dtlab gc [tracking=...]\n  mark runs whose driver process is gone FAILED (\"driver gone\")")
        return
    from mlflow.tracking import MlflowClient

    from components.core.provenance import mark_stale

    uri, _, _ = _tracking_uri(args)
    ended = mark_stale(MlflowClient(tracking_uri=uri))
    print(f"{len(ended)} run(s) left RUNNING by a driver that is gone: marked FAILED" if ended
          else "no stale runs")


def _lazy(target: str):
    """A subcommand whose module is imported only when it runs."""
    def run(args: list[str]) -> None:
        import importlib

        module, fn = target.split(":")
        getattr(importlib.import_module(module), fn)(args)

    return run


from pipelines.cluster import cmd_down, cmd_up  # noqa: E402 - `dtlab up` / `dtlab down` (a warm local Ray head)

COMMANDS = {"run": cmd_run, "list": cmd_list, "compare": cmd_compare, "ui": cmd_ui, "serve": cmd_serve,
            "up": cmd_up, "down": cmd_down, "gc": cmd_gc,
            "scoreboard": _lazy("pipelines.scoreboard:cmd_scoreboard"),
            "robustness": _lazy("pipelines.robustness:cmd_robustness")}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        _die(f"unknown command {cmd!r}; commands: {', '.join(COMMANDS)}")
    COMMANDS[cmd](rest)


if __name__ == "__main__":
    main()
