"""`dtlab`: run, list, compare and look at experiments.

    dtlab run experiment=error_feedback            one experiment through the DAG
    dtlab run experiment=error_feedback debug=true the tiny flavour
    dtlab run experiment=error_feedback experiment.seeds=[10,11,12]   the claims on other seeds
    dtlab run -m experiment=error_feedback experiment.seeds=[0],[1]   a Hydra multirun
    dtlab run experiment=error_feedback debug=true --dry-run   what would run (params with defaults); starts nothing
    dtlab list [KIND | EXPERIMENT]                 experiments and every registered kind, with files;
                                                   one experiment's variants, claims, prepare steps, axes
    dtlab prepare experiment=NAME                  build its prepare entries into the cache, nothing else
    dtlab compare [EXPERIMENT ...]                 latest runs side by side (+ HTML report)
    dtlab ui                                       MLflow UI on 127.0.0.1
    dtlab up [cluster.KEY=VALUE ...]               a warm local Ray head (dashboard 127.0.0.1:8265) runs attach to
    dtlab down [--force]                           stop it (names attached drivers, asks first)
    dtlab gc                                       end FAILED the runs whose driver is gone
    dtlab scoreboard                               every experiment's claims, paper beside measured
    dtlab robustness experiment=NAME               re-check its claims off the tuned configuration
    dtlab reproduce [experiment=a,b] [--dry-run]   every experiment's full run, skipping what is current;
                                                   RESULTS.md (--check: is it current?)
    dtlab serve specreason [--port N] [overrides]  a technique as a standing HTTP service (Ray Serve)
    dtlab completion bash|zsh                      shell completion: eval "$(dtlab completion bash)"

`dtlab COMMAND --help` explains each command; `dtlab run --help` lists the config groups.

Bad configuration is reported in one line (key, value, what is allowed) with exit code 2,
before Ray starts.
"""
from __future__ import annotations

import os
import sys

from pipelines.preflight import _die, preflight, split_args, tracking_store  # noqa: F401 - one validation pass

USAGE = __doc__


def cmd_run(args: list[str]) -> None:
    if any(a in ("-h", "--help") for a in args):
        print(run_help())
        return
    hydra_flags, overrides = split_args(args)
    dry = "--dry-run" in hydra_flags
    hydra_flags = [f for f in hydra_flags if f != "--dry-run"]
    if not _names_experiment(overrides) and not set(hydra_flags) & _INFO_FLAGS:
        overrides = [f"experiment={which_experiment()}", *overrides]
    multirun = any(a in ("-m", "--multirun") for a in hydra_flags)
    if dry:
        from pipelines.preflight import dry_run

        return dry_run(overrides, multirun)
    if set(hydra_flags) & {"--cfg", "-c"} and "debug=true" in overrides:
        print("dtlab: note: --cfg shows the config before the experiment's debug block is applied; "
              "`dtlab run ... --dry-run` shows what will run", file=sys.stderr)
    set_verbose(preflight(overrides, multirun))
    from pipelines import hydra_app

    sys.argv = ["dtlab"] + hydra_flags + overrides
    hydra_app.main()


_INFO_FLAGS = {"--cfg", "-c", "--info", "--hydra-help", "--resolve"}   # Hydra prints and exits: nothing runs


def _names_experiment(overrides: list[str]) -> bool:
    return any(o.lstrip("+~").partition("=")[0] == "experiment" for o in overrides)


def which_experiment(ask=input, tty: bool | None = None) -> str:
    """``dtlab run`` without ``experiment=``: on a terminal, ask which one (a name or its number
    in the list); otherwise the usage and the experiment list, exit 2. A full run is never
    started by default."""
    from pipelines.config import experiment_names

    names = experiment_names()
    listing = "\n".join(f"  {i:2d}. {n}" for i, n in enumerate(names, 1))
    tty = sys.stdin.isatty() and sys.stdout.isatty() if tty is None else tty
    if not tty:
        print(f"usage: dtlab run experiment=NAME [debug=true] [KEY=VALUE ...]  (dtlab run --help)\n"
              f"experiments (dtlab list NAME shows one):\n{listing}", file=sys.stderr)
        _die("run: experiment=NAME is required (no experiment runs by default)")
    print(f"experiments:\n{listing}")
    try:
        answer = ask("which experiment (name or number; Enter quits)? ").strip()
    except EOFError:
        answer = ""
    if answer.isdigit() and 1 <= int(answer) <= len(names):
        answer = names[int(answer) - 1]
    if answer not in names:
        _die(f"experiment={answer!r}: " + ("no experiment chosen" if not answer else "unknown experiment")
             + "; one of " + ", ".join(names))
    print(f"dtlab run experiment={answer} ...")
    return answer


def set_verbose(cfg: dict) -> None:
    """``verbose`` for this run and the processes it starts (components.core.verbosity); a bad value
    is one line and exit 2."""
    from components.core.errors import ConfigError
    from components.core.verbosity import apply_verbose

    try:
        apply_verbose(cfg)
    except ConfigError as e:
        _die(str(e))


def group_options() -> dict[str, list[str]]:
    """Each config group (conf/GROUP/) and its options: what ``GROUP=OPTION`` may say."""
    from pipelines.config import GROUPS, _group_options

    return {g: _group_options(g) for g in GROUPS}


# root keys of conf/config.yaml worth a line in `dtlab run --help` (the rest is internal plumbing)
_ROOT_KEYS = {"debug": "true: the experiment's tiny debug flavour (tests, CI); claims are expected to fail",
              "flavour": "full (default) | debug | paper: the papers' sizes, for GPU nodes (README \"On GPUs\")",
              "only": "a subset of variants, e.g. only=[ef21,cgd]",
              "runs_dir": "caches, the MLflow DB, artifacts and Hydra logs (default: runs/)",
              "objective": "what a sweep optimises (default: claims held)",
              "verbose": "true: Ray's and Ray Serve's INFO logs too (default: WARNING and above)"}


def run_help() -> str:
    """``dtlab run --help``: usage, config groups with their options, root keys, Hydra flags."""
    lines = ["usage: dtlab run [-m] [--dry-run] experiment=NAME [GROUP=OPTION ...] [KEY=VALUE ...]", "",
             "Runs one experiment through the DAG (prepare -> execute -> evaluate -> report); -m: a Hydra multirun.", "",
             "config groups (conf/GROUP/OPTION.yaml; `dtlab list EXPERIMENT` shows one experiment):"]
    for g, opts in group_options().items():
        lines.append(f"  {g}=  " + " | ".join(opts) + ("  (or null)" if g == "hparams_search" else ""))
    lines += ["", "keys:"] + [f"  {k}=  {v}" for k, v in _ROOT_KEYS.items()]
    lines += ["  experiment.KEY=VALUE, cluster.KEY=VALUE, tracking.KEY=VALUE  any key below a group", "",
              "--dry-run: validate and print what will run (variants, seeds, params with defaults, prepare steps,",
              "  claims), then stop: no Ray, no MLflow run",
              "hydra flags: -m/--multirun, --cfg job (the composed config, before the debug block), --info,",
              "  --hydra-help", "",
              "examples:",
              "  dtlab run experiment=error_feedback debug=true",
              "  dtlab run experiment=gatekeeper experiment.seeds=[0,1,2] tracking=server",
              "  dtlab run -m experiment=error_feedback hparams_search=error_feedback_optuna"]
    return "\n".join(lines)


def cmd_list(args: list[str]) -> None:
    """Experiments, then every registered kind (techniques, prepare steps, strategies, blocks,
    policies, codecs, services) with the file that defines each; ``dtlab list KIND`` one kind,
    ``dtlab list EXPERIMENT`` one experiment in full. Nothing under components/ is imported: the
    registry lists every kind from its source index, and a module that cannot be read is one line."""
    import yaml
    from rich.console import Console
    from rich.table import Table

    from components.core.registry import KINDS, entries
    from pipelines.config import CONF_DIR, ROOT, experiment_names

    wanted = args[0] if args else None
    if wanted is not None and wanted in experiment_names() and wanted not in KINDS:
        return list_experiment(wanted, Console(), args[1:])
    if wanted is not None and wanted not in KINDS and wanted != "experiment":
        _die(f"list KIND={wanted!r}: one of experiment, " + ", ".join(KINDS) + ", or an experiment: "
             + ", ".join(experiment_names()))
    console = Console()
    if wanted in (None, "experiment"):
        t = Table(title="experiments (dtlab run experiment=NAME; dtlab list NAME for one)")
        for c in ("experiment", "family", "summary", "variants", "config"):
            t.add_column(c, overflow="fold")
        from components.core.errors import ConfigError
        from pipelines.config import check_yaml

        for path in sorted((CONF_DIR / "experiment").glob("*.yaml")):
            try:  # libyaml when present: the pure-Python parser is most of this command's time
                exp = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            except yaml.YAMLError:
                try:
                    check_yaml(path, "experiment", path.stem)   # the one-line error with file:line:column
                except ConfigError as e:
                    _die(str(e))
                raise
            exp = exp if isinstance(exp, dict) else {}
            variants = exp.get("variants") or {}
            t.add_row(path.stem, str(exp.get("family", "")), str(exp.get("summary", "")), ", ".join(variants),
                      _rel(path, ROOT) + (" (+ flavour=paper)" if exp.get("paper") else ""))
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
    from components.core.registry import broken

    for b in broken():  # listed, not raised: only the experiments that use it fail
        console.print(f"broken module {b}", style="red", markup=False, highlight=False, soft_wrap=True)


def list_experiment(name: str, console, overrides: list[str] = ()) -> None:
    """``dtlab list NAME [KEY=VALUE ...]``: the experiment's variants (technique, role, seeds),
    claims (holds, gated or control), prepare steps and axes, as the run with those overrides
    (``debug=true``, ``only=``, ``experiment.seeds=``, ...) will see them."""
    from rich.markup import escape
    from rich.table import Table

    from components.core.errors import ConfigError
    from pipelines import config
    from pipelines.flavours import flavour_label, paper_notes
    from pipelines.preflight import checked_jobs

    bad = [a for a in overrides if "=" not in a]
    if bad:
        _die(f"list {name}: {bad[0]!r} is not an override KEY=VALUE; usage: {HELP['list'].splitlines()[0]}")
    try:
        _job, cfg, spec = next(checked_jobs([f"experiment={name}", *overrides], multirun=False, devices=False))
    except ConfigError as e:
        _die(str(e))
    console.print(f"[bold]{spec.name}[/] ({spec.family}){flavour_label(spec)}: "
                  f"{escape(spec.summary)}\n"
                  f"config {_rel(config.CONF_DIR / 'experiment' / (name + '.yaml'), config.ROOT)} · seeds {spec.seeds}"
                  + (f" · overrides {escape(' '.join(overrides))}" if overrides else "")
                  + escape(f" · run: dtlab run experiment={name} [debug=true] (--dry-run: every param with its default)")
                  + (" · flavour=paper: the papers' sizes" if "paper" in spec.raw else ""))
    for line in paper_notes(spec):
        console.print(escape(line), style="yellow")
    t = Table(title=f"{name}: variants")
    for c in ("variant", "technique", "role", "seeds", "inputs"):
        t.add_column(c, overflow="fold")
    for v in spec.variants:
        t.add_row(v.name, v.technique, v.role, ",".join(map(str, v.seeds)),
                  ", ".join(f"{k}<-{e}" for k, e in v.inputs.items()))
    console.print(t)
    if spec.claims:
        t = Table(title=f"{name}: claims", show_lines=True)
        for c in ("claim", "gated", "holds if", "paper"):
            t.add_column(c, overflow="fold")
        for c in spec.claims:
            holds = c.holds + (f" (over {', '.join(c.over)}" + (f", at least {c.at_least}" if c.at_least else "") + ")"
                               if c.over else "")
            holds += f"\npremise: {c.premise}" if getattr(c, "premise", "") else ""
            t.add_row(c.name, "gated" if c.gate else "control (not gated)", escape(holds), escape(c.paper))
        console.print(t)
    if spec.prepare:
        t = Table(title=f"{name}: prepare steps (cached under runs/cache)")
        for c in ("entry", "step", "inputs", "seeded"):
            t.add_column(c, overflow="fold")
        for p in spec.prepare:
            t.add_row(p.name, p.step, ", ".join(f"{k}<-{e}" for k, e in p.inputs.items()), "yes" if p.seeded else "no")
        console.print(t)
    if spec.axes:
        t = Table(title=f"{name}: axes")
        t.add_column("axis")
        t.add_column("values", overflow="fold")
        for a, vals in spec.axes.items():
            t.add_row(a, ", ".join(map(str, vals)))
        console.print(t)


def _rel(path, root) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:  # DTLAB_CONF_DIR outside the repository
        return str(path)


def cmd_prepare(args: list[str]) -> None:
    """Build the experiments' prepare entries into the shared cache, nothing else (no MLflow run).
    ``experiment=a,b,c``: one pass for all of them (one Ray session, shared entries built once)."""
    import json

    as_json = "--json" in args
    overrides = [a for a in args if a != "--json"]
    bad = [a for a in overrides if a.startswith("-") or "=" not in a]
    if bad:
        _die(f"prepare: {bad[0]!r} is not an override KEY=VALUE; {HELP['prepare'].splitlines()[0]}")
    if not _names_experiment(overrides):
        _die(f"prepare: name an experiment (experiment=NAME); {HELP['prepare'].splitlines()[0]}")
    from components.core.errors import ConfigError
    from pipelines import dag
    from pipelines.preflight import check

    names = [n for o in overrides if o.lstrip("+~").partition("=")[0] == "experiment"
             for n in o.partition("=")[2].split(",")]
    rest = [o for o in overrides if o.lstrip("+~").partition("=")[0] != "experiment"]
    try:
        cfgs = [check([f"experiment={n}", *rest], False) for n in dict.fromkeys(names)]
    except ConfigError as e:
        _die(str(e))
    from rich.console import Console

    if len(cfgs) == 1:
        out = dag.prepare_only(cfgs[0], None if as_json else Console())
        if as_json:
            print(json.dumps(out))
            return
        built = ", ".join(out["built"]) or "nothing (the cache holds every entry)"
        print(f"dtlab prepare {out['experiment']}: {out['needed']} entries needed; built {built} in "
              f"{out['seconds']:.1f}s (cache: {cfgs[0].get('runs_dir') or 'runs'}/cache)")
        return
    out = dag.prepare_many(cfgs, None if as_json else Console())
    if as_json:
        print(json.dumps(out))
        return
    n_built = sum(map(len, out["built"].values()))
    print(f"dtlab prepare {len(cfgs)} experiments: {out['needed']} entries needed; built {n_built} in one pass of "
          f"{out['seconds']:.1f}s ({out['compute_s']:.0f}s of step compute; cache: {cfgs[0].get('runs_dir') or 'runs'}/cache)")
    for exp, labels in out["built"].items():
        print(f"  {exp}: {', '.join(labels)}")


def cmd_compare(args: list[str]) -> None:
    from rich.console import Console

    from pipelines.compare import compare

    bad = [a for a in args if a.startswith("-")]
    if bad:
        _die(f"compare: unknown option {bad[0]!r}; usage: {HELP['compare'].splitlines()[0]}")
    uri, names, cfg = tracking_store(args)
    path = compare(uri, names, out_dir=os.path.join(cfg["runs_dir"], "reports"), console=Console())
    if path:
        print(f"HTML report: {path}")


def cmd_ui(args: list[str]) -> None:
    rest = [a for a in args if "=" not in a]
    port = "5000"
    if "--port" in rest:
        i = rest.index("--port")
        port = rest[i + 1] if i + 1 < len(rest) else ""
        rest = rest[:i] + rest[i + 2:]
    elif rest:
        port, rest = rest[0], rest[1:]
    if rest or not port.isdigit() or not 1024 <= int(port) <= 65535:
        _die(f"ui PORT={(rest[0] if rest else port)!r}: an integer in [1024, 65535]; usage: {HELP['ui'].splitlines()[0]}")
    uri, _, cfg = tracking_store([a for a in args if "=" in a])
    from components.core.tracker import tracking_client

    tracking_client(uri)  # a SQLite store's tables made under its lock, never beside a run making them
    cmd = ["mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    print(" ".join(cmd))
    bindir = os.path.dirname(sys.executable)
    exe = os.path.join(bindir, "mlflow")
    os.execv(exe if os.path.exists(exe) else cmd[0], cmd)


def cmd_serve(args: list[str]) -> None:
    """Deploy a serving technique on Ray Serve (127.0.0.1) with its experiment's cached models."""
    from components.core.errors import ConfigError
    from components.core.registry import entries

    services = entries("service")  # listed from the source: only the chosen service's module is imported
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
    try:
        svc = services[name].obj
    except ConfigError as e:  # its module does not import: one line
        _die(str(e))
    cfg = preflight([f"experiment={svc.experiment}", *rest], multirun=False)
    set_verbose(cfg)
    from pathlib import Path

    from components.serving.app import serve_until_stopped
    from pipelines import dag

    spec = dag.validate(cfg)
    runs_dir = Path(cfg.get("runs_dir") or "runs").resolve()
    print(f"dtlab serve {name}: models from prepare entry {svc.prepare!r} of experiment {svc.experiment!r} "
          f"(cache {runs_dir / 'cache'})", flush=True)
    out, status = dag.prepare_local(spec, svc.prepare, runs_dir)
    print(f"prepare cache: {svc.prepare}={status}", flush=True)
    serve_until_stopped(lambda: svc.build(out), name, svc.route_prefix, svc.endpoint, svc.example,
                        cfg["cluster"], port, flavour="debug" if cfg.get("debug") else None,
                        out=lambda line: print(line, flush=True))


def cmd_gc(args: list[str]) -> None:
    """End FAILED every run left RUNNING by a driver that is gone (SIGKILL, out of memory)."""
    if any(a in ("-h", "--help") for a in args):
        print("usage: dtlab gc [tracking=...]\n  mark runs whose driver process is gone FAILED (\"driver gone\")")
        return
    uri, _, _ = tracking_store(args)
    if not _may_have_running_runs(uri):
        print("no stale runs")
        return
    from components.core.provenance import mark_stale
    from components.core.tracker import tracking_client

    ended = mark_stale(tracking_client(uri))
    print(f"{len(ended)} run(s) left RUNNING by a driver that is gone: marked FAILED" if ended
          else "no stale runs")


def _may_have_running_runs(uri: str) -> bool:
    """False only when a SQLite store surely has no RUNNING run (absent, or none in its runs table):
    then ``dtlab gc`` answers without importing MLflow, which is most of its start-up."""
    import sqlite3
    from contextlib import closing

    from components.core.tracker import sqlite_path

    path = sqlite_path(uri)
    if path is None or "?" in uri:
        return True
    if not path.exists():
        return False
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            return db.execute("SELECT 1 FROM runs WHERE status = 'RUNNING' LIMIT 1").fetchone() is not None
    except sqlite3.Error:  # not an MLflow store yet, locked, or another schema: let MLflow look
        return True


HELP = {
    "list": "usage: dtlab list [KIND | EXPERIMENT [KEY=VALUE ...]]\n"
            "  no argument: every experiment, then every registered kind with the file that defines it\n"
            "  KIND (experiment, technique, prepare, ...): that kind only\n"
            "  EXPERIMENT: its variants (technique, role, seeds), claims (holds, gated), prepare steps, axes;\n"
            "  overrides (debug=true, only=[a,b], experiment.seeds=[1,2]) apply as in `dtlab run`",
    "compare": "usage: dtlab compare [EXPERIMENT ...] [runs_dir=DIR] [tracking=server]\n"
               "       dtlab compare RUN_A RUN_B   two runs of one experiment side by side (run ids, 8+ digit\n"
               "                                   prefixes, or EXPERIMENT@JOB: a job of its newest multirun)\n"
               "  the latest FINISHED parent run of each experiment (all when none named) side by side:\n"
               "  comparison tables, the scoreboard with each measured figure labelled, and one HTML report\n"
               "  under RUNS_DIR/reports/. Newer runs not ended are skipped and named. MLFLOW_TRACKING_URI wins\n"
               "  over the default store, an explicit tracking.uri= over both.",
    "prepare": "usage: dtlab prepare experiment=NAME[,NAME...] [KEY=VALUE ...] [--json]\n"
               "  builds the prepare entries (data, trained models) the experiment's variants need into the shared\n"
               "  cache, as a run would, and nothing else: no MLflow run. A run after it finds them (a warm cache);\n"
               "  `dtlab reproduce` does this before each configuration and times it apart from the run. Several\n"
               "  experiments: one pass, their steps side by side on the CPUs, an entry they share built once\n"
               "  (what `dtlab reproduce` runs first when several experiments' caches are cold).",
    "ui": "usage: dtlab ui [PORT | --port PORT] [tracking=...]\n"
          "  the MLflow UI on 127.0.0.1:PORT (default 5000) over the configured tracking store",
    "completion": "usage: dtlab completion bash|zsh\n"
                  "  prints a completion script: subcommands, GROUP= options, experiment names, `dtlab list` kinds.\n"
                  "  bash: eval \"$(dtlab completion bash)\"   (or save it under ~/.local/share/bash-completion/completions/dtlab)\n"
                  "  zsh:  eval \"$(dtlab completion zsh)\"    (in ~/.zshrc, after compinit)",
}

_BASH = r"""# dtlab completion for bash (generated by `dtlab completion bash`; regenerate after adding experiments)
_dtlab() {
    local line="${COMP_LINE:0:$COMP_POINT}"
    local rest="${line#*[[:space:]]}"       # string operations only: bash and zsh index arrays differently
    local cmd="${rest%%[[:space:]]*}"
    local cur="${line##*[[:space:]]}"       # the whole word, "=" included (bash splits words at "=")
    local key="" value="$cur"
    if [[ "$cur" == *=* ]]; then key="${cur%%=*}"; value="${cur#*=}"; fi
    COMPREPLY=()
    local words="" plain=""
    case "$cmd" in
        list) plain="@KINDS@ @EXPERIMENTS@" ;;
        completion) plain="bash zsh" ;;
        serve) [[ $COMP_CWORD -eq 2 ]] && plain="@SERVICES@" || plain="--port debug=" ;;
        compare) plain="@EXPERIMENTS@ runs_dir= tracking= --help" ;;
        *) plain="@KEYS@ -m --help" ;;
    esac
    [[ "$rest" != *[[:space:]]* ]] && { plain="@COMMANDS@"; key=""; }   # the subcommand itself
    case "$key" in
@GROUP_CASES@
        debug|verbose) words="true false" ;;
        "") COMPREPLY=($(compgen -W "$plain" -- "$cur")) ;;
    esac
    local want="$cur"
    if [[ -n "$key" && "$COMP_WORDBREAKS" == *=* ]]; then   # bash replaces only what follows the "="
        COMPREPLY=($(compgen -W "$words" -- "$value")); want="$value"
    elif [[ -n "$key" ]]; then
        COMPREPLY=($(compgen -P "$key=" -W "$words" -- "$value"))
    fi
    local w out=()                          # zsh's compgen (bashcompinit) does not filter: do it here
    for w in "${COMPREPLY[@]}"; do [[ "$w" == "$want"* ]] && out+=("$w"); done
    COMPREPLY=("${out[@]}")
    if [[ ${#COMPREPLY[@]} -eq 1 && "${COMPREPLY[0]}" == *= ]]; then compopt -o nospace 2>/dev/null; fi
}
complete -F _dtlab dtlab
"""

_ZSH_HEAD = """# dtlab completion for zsh (generated by `dtlab completion zsh`): the bash completion through
# zsh's bashcompinit, so both shells complete the same words
autoload -U +X compinit && { (( $+functions[compdef] )) || compinit; }
autoload -U +X bashcompinit && bashcompinit
"""


def completion_script(shell: str) -> str:
    """The completion script for ``shell`` (bash or zsh), with the names it completes filled in."""
    from components.core.registry import KINDS, entries
    from pipelines.config import experiment_names

    groups = group_options()
    cases = "\n".join(f'        {g}) words="{" ".join(opts + (["null"] if g == "hparams_search" else []))}" ;;'
                       for g, opts in groups.items())
    script = (_BASH.replace("@COMMANDS@", " ".join(COMMANDS)).replace("@KINDS@", " ".join(["experiment", *KINDS]))
              .replace("@EXPERIMENTS@", " ".join(experiment_names())).replace("@SERVICES@", " ".join(entries("service")))
              .replace("@GROUP_CASES@", cases).replace("@KEYS@", " ".join([f"{g}=" for g in groups]
                                                                           + [f"{k}=" for k in _ROOT_KEYS])))
    return _ZSH_HEAD + script if shell == "zsh" else script


def cmd_completion(args: list[str]) -> None:
    if len(args) != 1 or args[0] not in ("bash", "zsh"):
        _die(f"completion SHELL={(args[0] if args else None)!r}: bash or zsh")
    print(completion_script(args[0]))


def _lazy(target: str):
    """A subcommand whose module is imported only when it runs."""
    def run(args: list[str]) -> None:
        import importlib

        module, fn = target.split(":")
        getattr(importlib.import_module(module), fn)(args)

    return run


from pipelines.cluster import cmd_down, cmd_up  # noqa: E402 - `dtlab up` / `dtlab down` (a warm local Ray head)

COMMANDS = {"run": cmd_run, "list": cmd_list, "prepare": cmd_prepare, "compare": cmd_compare, "ui": cmd_ui, "serve": cmd_serve,
            "up": cmd_up, "down": cmd_down, "gc": cmd_gc,
            "scoreboard": _lazy("pipelines.scoreboard:cmd_scoreboard"),
            "reproduce": _lazy("pipelines.reproduce:cmd_reproduce"),
            "robustness": _lazy("pipelines.robustness:cmd_robustness"),
            "completion": cmd_completion}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        _die(f"unknown command {cmd!r}; commands: {', '.join(COMMANDS)}")
    if cmd in HELP and any(a in ("-h", "--help") for a in rest):
        print(HELP[cmd])
        return
    try:
        COMMANDS[cmd](rest)
    except KeyboardInterrupt as e:
        interrupted(e)


def interrupted(e: KeyboardInterrupt) -> None:
    """Ctrl-C (or SIGTERM/SIGHUP, turned into an interrupt by the DAG): one line saying what
    became of the runs, exit 128 + the signal's number (130 for Ctrl-C), no traceback."""
    import signal

    name = getattr(e, "dtlab_signal", None)
    if name is None:
        text = str(e)
        name = next((s for s in ("SIGTERM", "SIGHUP") if s in text), "SIGINT")
    n = getattr(e, "dtlab_runs_ended", None)   # set by the DAG; a multirun's launcher ends its own runs
    what = f": {n} run(s) ended KILLED (their error tag names the signal)" if n is not None else ""
    print(f"dtlab: interrupted by {'Ctrl-C (SIGINT)' if name == 'SIGINT' else name}{what}", file=sys.stderr)
    raise SystemExit(128 + int(getattr(signal, name, signal.SIGINT)))


if __name__ == "__main__":
    main()
