"""The sweeper: ask Optuna for trials, launch them as Hydra jobs, tell Optuna the objective.

- The study lives in RDB storage (default ``sqlite:///<runs_dir>/optuna.db``) and is loaded if it
  exists, so an interrupted sweep resumes: trials already finished count towards ``n_trials``.
  Its name is ``<study_name or experiment>-<hash of objective, direction and space>``: a sweep of
  another objective or space is another study.
- Ctrl-C, SIGTERM or SIGHUP: the trials in flight are told FAIL with the user attribute
  ``dtlab.interrupted`` and re-queued with the same params (``enqueue_trial``); they count neither
  toward ``n_trials`` nor toward ``max_failure_rate``. Their open runs end KILLED with the reason,
  and so does the sweep run. Trials left RUNNING by a SIGKILLed sweep are re-queued the same way.
- The objective is what the task returns: the experiment's ``objective`` expression over variant
  metrics (for example ``dist_ef21.iters_to_tol``), or the number of claims that hold.
- A trial whose job crashes, or whose objective is missing or not finite, is told FAIL and the
  sweep goes on (until ``max_failure_rate`` is exceeded).
- MLflow: one sweep run (tag ``dtlab.kind=sweep``) per study; every trial's parent run is nested
  under it; the best trial, its config, and Optuna's plots are logged on the sweep run.
"""
from __future__ import annotations

import io
import logging
import math
from pathlib import Path
from typing import Any, List

import optuna
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.dtlab_optuna_sweeper.search_space import fmt_value, parse_space

log = logging.getLogger(__name__)


INTERRUPTED = "dtlab.interrupted"


def study_name(base: str, objective: Any, direction: Any, space: dict) -> str:
    """``base-<8 hex>``: the hash covers the objective, the direction and the search space."""
    import hashlib
    import json

    direction = OmegaConf.to_container(direction) if OmegaConf.is_list(direction) else direction
    key = json.dumps({"objective": objective, "direction": direction,
                      "space": {k: repr(v) for k, v in sorted(space.items())}}, sort_keys=True, default=str)
    return f"{base}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def counts(study: optuna.Study) -> tuple[int, int]:
    """(trials done, trials failed), interrupted ones left out of both: they were re-queued."""
    S = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False, states=(S.COMPLETE, S.FAIL, S.PRUNED))
    real = [t for t in trials if INTERRUPTED not in t.user_attrs]
    return len(real), sum(t.state == S.FAIL for t in real)


def _requeue(study: optuna.Study, trial, reason: str) -> None:
    """Tell ``trial`` FAIL as interrupted (not a failure) and queue its params to be asked again."""
    number = trial.number
    frozen = study._storage.get_trial(trial._trial_id)
    if frozen.state != optuna.trial.TrialState.RUNNING:  # told already: it counts as it ended
        return
    study._storage.set_trial_user_attr(trial._trial_id, INTERRUPTED, reason)
    study.tell(number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    if frozen.params:
        study.enqueue_trial(frozen.params, user_attrs={"dtlab.requeued_from": number})


class DtlabOptunaSweeper(Sweeper):
    def __init__(self, sampler: Any, direction: Any, study_name: str | None, storage: str | None, n_trials: int,
                 n_jobs: int, max_failure_rate: float, params: dict | None):
        self.sampler_cfg, self.direction = sampler, direction
        self.study_name, self.storage = study_name, storage
        self.n_trials, self.n_jobs, self.max_failure_rate = n_trials, n_jobs, max_failure_rate
        self.params = dict(params or {})
        self.job_idx = 0

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(config=config, hydra_context=hydra_context,
                                                                task_function=task_function)

    # ------------------------------------------------------------------------------------------
    def _study(self, space: dict) -> optuna.Study:
        runs_dir = Path(str(self.config.runs_dir))
        runs_dir.mkdir(parents=True, exist_ok=True)
        storage = self.storage or f"sqlite:///{runs_dir}/optuna.db"
        name = study_name(self.study_name or str(self.config.experiment.name), self.config.get("objective"),
                          self.direction, space)
        sampler = self.sampler_cfg  # Hydra instantiates nested _target_ nodes itself
        if sampler is not None and not isinstance(sampler, optuna.samplers.BaseSampler):
            sampler = instantiate(sampler)
        directions = list(self.direction) if isinstance(self.direction, (list, tuple)) or OmegaConf.is_list(self.direction) else None
        kwargs = {"directions": directions} if directions else {"direction": str(self.direction)}
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, load_if_exists=True, **kwargs)
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            log.warning(f"trial {t.number} was left running by a sweep that is gone: re-queued")
            _requeue(study, t, "left RUNNING by a sweep that is gone")
        return study

    def _tracker(self):
        from components.core.tracker import Tracker, resolve_tracking_uri

        tracker = Tracker(resolve_tracking_uri(self.config.tracking.uri))
        tracker.check_reachable()
        return tracker

    def _sweep_run(self, tracker, study: optuna.Study) -> str:
        exp_id = tracker.experiment_id(str(self.config.experiment.name))
        found = tracker.client.search_runs([exp_id], filter_string=(
            f"tags.`dtlab.kind` = 'sweep' and tags.`optuna.study` = '{study.study_name}'"), max_results=1)
        if found:
            rid = found[0].info.run_id
            tracker.client.update_run(rid, status="RUNNING")
            return rid
        rid = tracker.start_run(exp_id, f"sweep-{study.study_name}", tags={
            "dtlab.kind": "sweep", "optuna.study": study.study_name, "experiment": str(self.config.experiment.name)})
        tracker.log_params(rid, {"n_trials": self.n_trials, "direction": str(self.direction),
                                 "sampler": type(self.sampler_cfg).__name__ if isinstance(self.sampler_cfg, optuna.samplers.BaseSampler) else str(self.sampler_cfg),
                                 "space": {k: str(v) for k, v in self.params.items()}})
        return rid

    # ------------------------------------------------------------------------------------------
    def sweep(self, arguments: List[str]) -> None:
        from pipelines.dag import terminate_as_interrupt

        with terminate_as_interrupt():
            self._sweep(arguments)

    def _sweep(self, arguments: List[str]) -> None:
        from hydra_plugins.dtlab_optuna_sweeper.config import check_conf
        from hydra_plugins.dtlab_ray_launcher.open_runs import end_open_runs, interrupt_reason

        check_conf({"direction": OmegaConf.to_container(self.direction) if OmegaConf.is_list(self.direction) else self.direction,
                    "n_trials": self.n_trials, "n_jobs": self.n_jobs, "max_failure_rate": self.max_failure_rate,
                    "study_name": self.study_name, "storage": self.storage, "sampler": None,
                    "objective": self.config.get("objective")})
        space, fixed = parse_space(self.params, arguments)
        if not space:
            raise ValueError("dtlab_optuna sweeper: no search space (hydra.sweeper.params or a sweep override)")
        study = self._study(space)
        tracker = self._tracker()
        sweep_rid = self._sweep_run(tracker, study)
        done, failures = counts(study)
        remaining = max(0, self.n_trials - done)
        log.info(f"study {study.study_name}: {done} trials done, {remaining} to run; space: {list(space)}")
        status, reason = "FINISHED", None
        trials: list = []
        try:
            while remaining > 0:
                batch = min(self.n_jobs, remaining)
                trials = [study.ask(space) for _ in range(batch)]
                overrides = [tuple(fixed + [f"{k}={fmt_value(v)}" for k, v in t.params.items()] +
                                   [f"sweep_run_id={sweep_rid}", f"sweep_trial={t.number}"]) for t in trials]
                returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx)
                self.job_idx += len(returns)
                for trial, ret in zip(trials, returns):
                    value, error = None, ""
                    try:
                        value = ret.return_value
                        error = self._bad_value(value, len(study.directions))
                        if error:
                            value = None
                    except Exception as e:  # the job crashed
                        error = f"{type(e).__name__}: {e}".splitlines()[0]
                    if value is None:
                        study.tell(trial, state=optuna.trial.TrialState.FAIL)
                        tracker.set_tags(sweep_rid, {f"trial.{trial.number}.error": error})
                        log.warning(f"trial {trial.number} failed: {error}")
                        missing = error.startswith("objective") and self._missing_metric(tracker, sweep_rid, trial.number)
                        if missing:  # every trial would end NaN: stop at the first
                            status, reason = "FAILED", missing
                            from components.core.errors import ConfigError

                            raise ConfigError("objective", self.config.get("objective"), missing)
                    elif isinstance(value, (list, tuple)):   # one value per direction
                        study.tell(trial, [float(v) for v in value])
                        tracker.log_metrics(sweep_rid, {f"trial_value_{i}": float(v) for i, v in enumerate(value)},
                                            step=trial.number)
                    else:
                        study.tell(trial, float(value))
                        tracker.log_metrics(sweep_rid, {"trial_value": float(value)}, step=trial.number)
                trials = []
                done, failures = counts(study)
                remaining = max(0, self.n_trials - done)
                if done and failures / done > self.max_failure_rate:
                    status = "FAILED"
                    raise RuntimeError(f"failure rate {failures}/{done} exceeds max_failure_rate={self.max_failure_rate}")
        except KeyboardInterrupt as e:
            status, reason = "KILLED", interrupt_reason(e)
            for t in trials:  # in flight: not a failure, asked again on resume
                _requeue(study, t, reason)
            exp = tracker.client.get_experiment_by_name(str(self.config.experiment.name))
            end_open_runs(tracker.client, [exp.experiment_id] if exp else [],
                          lambda r: r.data.tags.get("dtlab.sweep_run_id") == sweep_rid, f"{reason} (sweep interrupted)")
            log.warning(f"sweep {reason}: {len(trials)} trial(s) in flight re-queued")
            raise
        finally:
            self._report(tracker, sweep_rid, study, status, reason)

    @staticmethod
    def _bad_value(value: Any, n_directions: int) -> str:
        """Why a trial's objective cannot be told to the study ("" if it can): missing, not finite, or
        not one value per direction."""
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if isinstance(value, (list, tuple)) != (n_directions > 1) or len(values) != n_directions:
            return f"objective gave {len(values)} value(s) for {n_directions} direction(s): {value}"
        if any(v is None or not math.isfinite(float(v)) for v in values):
            return f"objective not finite: {value}"
        return ""

    def _missing_metric(self, tracker, sweep_rid: str, number: int) -> str | None:
        """Why the objective cannot be computed from a trial whose variants all finished: a
        ``variant.metric`` it names that the variant's run did not report (None if it did)."""
        import ast

        expr = self.config.get("objective")
        if not expr:
            return None
        wanted = {(n.value.id, n.attr) for n in ast.walk(ast.parse(str(expr), mode="eval"))
                  if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
        client = tracker.client
        exp = client.get_experiment_by_name(str(self.config.experiment.name))
        parents = client.search_runs([exp.experiment_id], f"tags.`dtlab.sweep_run_id` = '{sweep_rid}' and "
                                                          f"tags.`optuna.trial` = '{number}'", max_results=1)
        if not parents:
            return None
        children = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}' "
                                                           "and tags.`dtlab.kind` = 'variant'")
        reported = {c.data.tags.get("variant"): c for c in children}
        for variant, metric in sorted(wanted):
            run = reported.get(variant)
            if run is not None and run.info.status == "FINISHED" and metric not in run.data.metrics:
                known = sorted(k for k in run.data.metrics if not k.endswith(("_se", "_n")))
                return f"variant {variant!r} reports no metric {metric!r} (it reports: {', '.join(known)})"
        return None

    def _report(self, tracker, sweep_rid: str, study: optuna.Study, status: str, reason: str | None = None) -> None:
        completed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        tracker.log_metrics(sweep_rid, {"trials_complete": len(completed), "trials_total": len(study.trials)})
        if completed and len(study.directions) == 1 and status != "KILLED":
            best = study.best_trial
            tracker.log_metrics(sweep_rid, {"best_value": best.value, "best_trial": best.number})
            tracker.set_tags(sweep_rid, {f"best.{k}": v for k, v in best.params.items()})
            best_cfg = {"study": study.study_name, "best_trial": best.number, "best_value": best.value,
                        "best_params": best.params, "direction": str(study.direction.name)}
            tracker.log_text(sweep_rid, OmegaConf.to_yaml(OmegaConf.create(best_cfg)), "best_config.yaml")
            out = Path(str(self.config.hydra.sweep.dir))
            out.mkdir(parents=True, exist_ok=True)
            (out / "optimization_results.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(best_cfg)))
            self._plots(tracker, sweep_rid, study)
            log.info(f"best trial {best.number}: value {best.value} with {best.params}")
        elif completed and status != "KILLED":   # multi-objective: the Pareto front, not one best
            front = [{"trial": t.number, "values": list(t.values), "params": t.params} for t in study.best_trials]
            tracker.log_metrics(sweep_rid, {"pareto_trials": len(front)})
            text = OmegaConf.to_yaml(OmegaConf.create({"study": study.study_name, "directions": [d.name for d in study.directions],
                                                       "pareto_front": front}))
            tracker.log_text(sweep_rid, text, "pareto_front.yaml")
            out = Path(str(self.config.hydra.sweep.dir))
            out.mkdir(parents=True, exist_ok=True)
            (out / "optimization_results.yaml").write_text(text)
            log.info(f"Pareto front: {len(front)} of {len(completed)} trials")
        tracker.end(sweep_rid, status, error=reason)

    @staticmethod
    def _plots(tracker, sweep_rid: str, study: optuna.Study) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from optuna.visualization import matplotlib as ovm

        plots = {"optimization_history": ovm.plot_optimization_history}
        if len(study.best_trial.params) >= 2 and len(study.trials) >= 3:
            plots["param_importances"] = ovm.plot_param_importances
        for name, fn in plots.items():
            try:
                ax = fn(study)
                fig = ax.figure if hasattr(ax, "figure") else plt.gcf()
                fig.set_size_inches(7, 4.5)
                fig.tight_layout()
                buf = io.BytesIO()
                fig.savefig(buf, format="png", dpi=100)
                plt.close(fig)
                tracker.log_bytes(sweep_rid, buf.getvalue(), f"plots/{name}.png")
            except Exception as e:  # a plot is a nicety; the study itself is logged already
                log.warning(f"optuna plot {name} skipped: {e}")
