"""The sweeper: ask Optuna for trials, launch them as Hydra jobs, tell Optuna the objective.

- The study lives in RDB storage (default ``sqlite:///<runs_dir>/optuna.db``) and is loaded if it
  exists, so an interrupted sweep resumes: trials already finished count towards ``n_trials``.
  A seeded sampler is seeded from (its seed, the trials the study holds) on resume
  (:func:`make_sampler`): the same seed again would replay its first proposals (TPE's random
  start-up trials) and re-run points the study has already tried. Hydra job numbers go on from the
  study's trial numbers (trial 7 is job #7, not #0 of the new session).
  Its name is ``<study_name or experiment>-<hash of objective, direction and space>``: a sweep of
  another objective or space is another study.
- Ctrl-C, SIGTERM or SIGHUP: the trials in flight are told FAIL with the user attribute
  ``dtlab.interrupted`` and re-queued with the same params (``enqueue_trial``); they count neither
  toward ``n_trials`` nor toward ``max_failure_rate``. Their open runs end KILLED with the reason,
  and so does the sweep run. Trials left RUNNING by a SIGKILLed sweep are re-queued the same way.
- The objective is what the task returns: the experiment's ``objective`` expression over variant
  metrics (for example ``dist_ef21.iters_to_tol``), or the number of claims that hold.
- A trial whose job crashes, or whose objective is missing or not finite, is told FAIL and the
  sweep goes on (until ``max_failure_rate`` is exceeded). A trial lost to the infrastructure (a Ray
  actor, worker or node that died, a placement group removed under it: :func:`infra_cause`) is
  told FAIL with ``dtlab.infra_failure`` and re-queued with the same params, once: it counts
  neither toward ``n_trials`` nor toward ``max_failure_rate``; its re-run, if lost again, does.
- MLflow: one sweep run (tag ``dtlab.kind=sweep``) per study; every trial's parent run is nested
  under it; the best trial, its config, and Optuna's plots are logged on the sweep run. A resumed
  sweep re-owns that run (``dtlab.driver``, a stale ``error`` tag moved to ``sweep.previous_error``)
  and records the current target as the tag ``sweep.n_trials`` (MLflow params cannot change, so
  ``n_trials`` is a tag, not a param) and the session count as ``sweep.sessions``.
- The sweep ends with one line per trial it ran: number, params, state, value, parent run.
"""
from __future__ import annotations

import io
import logging
import math
import re
import warnings
from pathlib import Path
from typing import Any, List

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.dtlab_optuna_sweeper.lazy import optuna
from hydra_plugins.dtlab_optuna_sweeper.sampler import make_sampler, resume_seed
from hydra_plugins.dtlab_optuna_sweeper.search_space import fmt_value, parse_space

log = logging.getLogger(__name__)


INTERRUPTED = "dtlab.interrupted"
INFRA = "dtlab.infra_failure"            # told FAIL for an infrastructure reason and re-queued
REQUEUED_FROM = "dtlab.requeued_from"    # on a re-queued trial: the number of the trial it re-runs
INFRA_RETRY = "dtlab.infra_retry_of"     # on a trial re-queued after an infrastructure failure

# Ray's exceptions for a party that is gone (not an error of the code it ran), and Ray Train's
# message for a placement group removed under a job (components/training/ddp/runner.py)
INFRA_ERRORS = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "NodeDiedError", "WorkerCrashedError",
                "LocalRayletDiedError", "OwnerDiedError", "ObjectLostError", "ObjectReconstructionFailedError",
                "RaySystemError")
INFRA_MESSAGES = ("placement group was removed",)
_INFRA_RE = re.compile(r"\b(" + "|".join(INFRA_ERRORS) + r")\b")


def infra_cause(errors: list[str]) -> str | None:
    """The first error when every one of ``errors`` (``Type: message`` lines; a variant's
    ``seed 0: ...; seed 1: ...`` counts seed by seed) is an infrastructure failure, else None.
    A ConfigError or any exception of the technique's own makes the trial a real failure."""
    def infra(part: str) -> bool:
        part = re.sub(r"^seed \d+: ", "", part.strip())
        if part.startswith("ConfigError"):
            return False
        return bool(_INFRA_RE.search(part)) or any(m in part for m in INFRA_MESSAGES)

    parts = [p for e in errors for p in e.splitlines()[0].split("; ") if p.strip()] if errors else []
    return errors[0].splitlines()[0] if parts and all(infra(p) for p in parts) else None


def study_name(base: str, objective: Any, direction: Any, space: dict) -> str:
    """``base-<8 hex>``: the hash covers the objective, the direction and the search space."""
    import hashlib
    import json

    direction = OmegaConf.to_container(direction) if OmegaConf.is_list(direction) else direction
    key = json.dumps({"objective": objective, "direction": direction,
                      "space": {k: repr(v) for k, v in sorted(space.items())}}, sort_keys=True, default=str)
    return f"{base}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def counts(study: optuna.Study) -> tuple[int, int]:
    """(trials done, trials failed), interrupted and infrastructure-lost ones left out of both:
    they were re-queued."""
    S = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False, states=(S.COMPLETE, S.FAIL, S.PRUNED))
    real = [t for t in trials if INTERRUPTED not in t.user_attrs and INFRA not in t.user_attrs]
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
        study.enqueue_trial(frozen.params, user_attrs={REQUEUED_FROM: number})


class DtlabOptunaSweeper(Sweeper):
    def __init__(self, sampler: Any, direction: Any, study_name: str | None, storage: str | None, n_trials: int,
                 n_jobs: int, max_failure_rate: float, params: dict | None):
        self.sampler_cfg, self.direction = sampler, direction
        self.study_name, self.storage = study_name, storage
        self.n_trials, self.n_jobs, self.max_failure_rate = n_trials, n_jobs, max_failure_rate
        self.params = dict(params or {})
        self.job_idx = 0
        self.n_existing = 0          # trials the study held when this session loaded it
        self.sampler_seed = None     # the seed this session's sampler got (resume_seed)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(config=config, hydra_context=hydra_context,
                                                                task_function=task_function)
        if hasattr(self.launcher, "summary"):
            self.launcher.summary = False   # one summary at the end of the sweep, not one per batch
        from components.core.verbosity import quiet_loggers

        quiet_loggers()   # trials may run in this process (hydra/launcher=basic)

    # ------------------------------------------------------------------------------------------
    def _study(self, space: dict) -> optuna.Study:
        runs_dir = Path(str(self.config.runs_dir))
        runs_dir.mkdir(parents=True, exist_ok=True)
        storage = self.storage or f"sqlite:///{runs_dir}/optuna.db"
        name = study_name(self.study_name or str(self.config.experiment.name), self.config.get("objective"),
                          self.direction, space)
        directions = list(self.direction) if isinstance(self.direction, (list, tuple)) or OmegaConf.is_list(self.direction) else None
        kwargs = {"directions": directions} if directions else {"direction": str(self.direction)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study = optuna.create_study(study_name=name, storage=storage, load_if_exists=True,
                                        sampler=optuna.samplers.RandomSampler(), **kwargs)
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            log.warning(f"trial {t.number} was left running by a sweep that is gone: re-queued")
            _requeue(study, t, "left RUNNING by a sweep that is gone")
        self.n_existing = len(study.trials)
        # the sampler's config as written (the sweeper is built with _recursive_=False: not instantiated)
        cfg = OmegaConf.select(self.config, "hydra.sweeper.sampler") if OmegaConf.is_config(self.config) else None
        cfg = cfg if cfg is not None else self.sampler_cfg
        seed = cfg.get("seed") if cfg is not None and not isinstance(cfg, optuna.samplers.BaseSampler) else None
        self.sampler_seed = resume_seed(seed, self.n_existing)
        study.sampler = make_sampler(cfg, self.n_existing) or optuna.samplers.TPESampler()
        return study

    def _tracker(self):
        from components.core.tracker import Tracker, resolve_tracking_uri

        tracker = Tracker(resolve_tracking_uri(self.config.tracking.uri))
        tracker.check_reachable()
        return tracker

    def _session_tags(self, sessions: int) -> dict[str, str]:
        """What may change from one session of the sweep to the next, as tags (MLflow params are fixed)."""
        return {"sweep.n_trials": str(self.n_trials), "sweep.n_jobs": str(self.n_jobs), "sweep.sessions": str(sessions),
                "sweep.sampler_seed": str(self.sampler_seed)}

    def _sweep_run(self, tracker, study: optuna.Study) -> str:
        """The study's MLflow sweep run: created on the first session, re-owned on a resume (this
        driver in ``dtlab.driver`` before it is RUNNING again, so no stale-run check takes it for
        a dead driver's; a previous session's ``error`` moved to ``sweep.previous_error``)."""
        from components.core.provenance import DRIVER_TAG, driver_id

        exp_id = tracker.experiment_id(str(self.config.experiment.name),
                                       description=OmegaConf.select(self.config, "experiment.summary"))
        found = tracker.client.search_runs([exp_id], filter_string=(
            f"tags.`dtlab.kind` = 'sweep' and tags.`optuna.study` = '{study.study_name}'"), max_results=1)
        if found:
            run = found[0]
            rid, tags = run.info.run_id, run.data.tags
            client = tracker.client
            client.set_tag(rid, DRIVER_TAG, driver_id())
            if "error" in tags:
                client.set_tag(rid, "sweep.previous_error", tags["error"][:5000])
                client.delete_tag(rid, "error")
            sessions = int(tags.get("sweep.sessions", "1")) + 1
            for k, v in self._session_tags(sessions).items():
                client.set_tag(rid, k, v)
            client.update_run(rid, status="RUNNING")
            return rid
        rid = tracker.start_run(exp_id, f"sweep-{study.study_name}", tags={
            "dtlab.kind": "sweep", "optuna.study": study.study_name, "experiment": str(self.config.experiment.name),
            **self._session_tags(1)})
        sampler = self.sampler_cfg
        sampler = (type(sampler).__name__ if isinstance(sampler, optuna.samplers.BaseSampler) else
                   str(OmegaConf.to_container(sampler) if OmegaConf.is_config(sampler) else sampler))
        tracker.log_params(rid, {"direction": str(self.direction), "sampler": sampler,
                                 "space": {k: str(v) for k, v in self.params.items()}})
        return rid

    # ------------------------------------------------------------------------------------------
    def sweep(self, arguments: List[str]) -> None:
        from components.core.interrupts import terminate_as_interrupt

        with terminate_as_interrupt():
            self._sweep(arguments)

    def _sweep(self, arguments: List[str]) -> None:
        from hydra_plugins.dtlab_optuna_sweeper.config import check_conf
        from components.core.interrupts import interrupt_reason
        from hydra_plugins.dtlab_ray_launcher.open_runs import end_open_runs

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
        self.job_idx = max(self.job_idx, self.n_existing)   # job numbers go on from the study's trials
        log.info(f"study {study.study_name}: {done} trials done, {remaining} to run; space: {list(space)}")
        status, reason = "FINISHED", None
        trials: list = []
        ran: list[int] = []
        try:
            while remaining > 0:
                batch = min(self.n_jobs, remaining)
                trials = [study.ask(space) for _ in range(batch)]
                overrides = [tuple(fixed + [f"{k}={fmt_value(v)}" for k, v in t.params.items()] +
                                   [f"sweep_run_id={sweep_rid}", f"sweep_trial={t.number}"]) for t in trials]
                first = trials[0].number   # job #N is trial N where the batch's numbers allow it
                idx = first if first >= self.job_idx and all(t.number == first + i for i, t in enumerate(trials)) \
                    else self.job_idx
                returns = self.launcher.launch(overrides, initial_job_idx=idx)
                self.job_idx = idx + len(returns)
                for trial, ret in zip(trials, returns):
                    ran.append(trial.number)
                    value, error = None, ""
                    try:
                        value = ret.return_value
                        error = self._bad_value(value, len(study.directions))
                        if error:
                            value = None
                    except Exception as e:  # the job crashed
                        error = f"{type(e).__name__}: {e}".splitlines()[0]
                    if value is None:
                        causes = [] if error.startswith("objective") else self._trial_errors(tracker, sweep_rid,
                                                                                            trial.number)
                        if not error.startswith("objective") and self._requeue_if_infra(tracker, sweep_rid, study,
                                                                                        trial, causes or [error]):
                            continue
                        if causes:   # what the failed variants raised, beside "variants failed: a"
                            error = f"{error} ({'; '.join(causes)})"[:1000]
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
            try:
                self._summary(tracker, sweep_rid, study, ran)
            except Exception as e:  # noqa: BLE001 - never mask how the sweep ended
                log.warning(f"sweep summary skipped: {e}")

    def _requeue_if_infra(self, tracker, sweep_rid: str, study: optuna.Study, trial, errors: list[str]) -> bool:
        """A trial lost to the infrastructure (:func:`infra_cause` over ``errors``: its failed variants'
        errors, else its job's): told FAIL as ``dtlab.infra_failure`` and its params queued again,
        once (a re-run lost the same way is a failure). True when re-queued."""
        cause = infra_cause(errors)
        if cause is None:
            return False
        if INFRA_RETRY in trial.user_attrs:
            tracker.set_tags(sweep_rid, {f"trial.{trial.number}.error": f"{cause} (infrastructure again: not re-queued)"})
            log.warning(f"trial {trial.number} (a re-run of trial {trial.user_attrs[INFRA_RETRY]}) was lost to the "
                        f"infrastructure again ({cause}): recorded FAIL, not re-queued twice")
            return False
        trial.set_user_attr(INFRA, cause)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(trial.params, user_attrs={REQUEUED_FROM: trial.number, INFRA_RETRY: trial.number})
        tracker.set_tags(sweep_rid, {f"trial.{trial.number}.error": f"{cause} (infrastructure: re-queued once)"})
        log.warning(f"trial {trial.number} was lost to the infrastructure ({cause}): re-queued once with the same "
                    "params; it counts neither toward n_trials nor toward max_failure_rate")
        return True

    def _trial_parent(self, tracker, sweep_rid: str, number: int):
        """The MLflow parent run of trial ``number`` of this sweep (None if the job made none)."""
        exp = tracker.client.get_experiment_by_name(str(self.config.experiment.name))
        if exp is None:
            return None
        found = tracker.client.search_runs([exp.experiment_id], f"tags.`dtlab.sweep_run_id` = '{sweep_rid}' and "
                                                                 f"tags.`optuna.trial` = '{number}'",
                                           order_by=["attributes.start_time DESC"], max_results=1)
        return found[0] if found else None

    def _trial_errors(self, tracker, sweep_rid: str, number: int) -> list[str]:
        """The first lines of the ``error`` tags of the trial's failed variant runs (else of its
        parent run's, unless that only says which variants failed); [] when MLflow has none."""
        try:
            parent = self._trial_parent(tracker, sweep_rid, number)
            if parent is None:
                return []
            children = tracker.client.search_runs(
                [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}' and "
                                             "tags.`dtlab.kind` = 'variant' and attributes.status = 'FAILED'")
        except Exception:  # noqa: BLE001 - the job's own error is then all there is
            return []
        errors = [c.data.tags["error"].splitlines()[0] for c in children if c.data.tags.get("error")]
        head = (parent.data.tags.get("error") or "").splitlines()[:1]
        if not errors and head and not head[0].startswith("variants failed"):
            errors = head
        return errors

    def _summary(self, tracker, sweep_rid: str, study: optuna.Study, numbers: list[int]) -> None:
        """One line per trial this session ran: number, params, state, value (or error), parent run."""
        if not numbers:
            return
        from hydra_plugins.dtlab_ray_launcher.launcher import short_overrides

        tracker.flush()
        by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
        lines = [f"sweep {study.study_name}: {len(numbers)} trial(s) this session "
                 f"({counts(study)[0]} of n_trials={self.n_trials} done)"]
        for n in numbers:
            t = by_number.get(n)
            if t is None:
                continue
            params = short_overrides([f"{k}={fmt_value(v)}" for k, v in t.params.items()])
            if t.state == optuna.trial.TrialState.COMPLETE:
                what = "objective " + ", ".join(f"{v:.6g}" for v in t.values)
            elif INFRA in t.user_attrs:
                what = f"re-queued (infrastructure: {t.user_attrs[INFRA][:80]})"
            elif INTERRUPTED in t.user_attrs:
                what = f"re-queued ({t.user_attrs[INTERRUPTED]})"
            else:
                err = ""
                try:
                    err = tracker.client.get_run(sweep_rid).data.tags.get(f"trial.{n}.error", "")
                except Exception:  # noqa: BLE001 - the summary is a courtesy
                    pass
                what = err[:100] or t.state.name
            parent = None
            try:
                parent = self._trial_parent(tracker, sweep_rid, n)
            except Exception:  # noqa: BLE001
                pass
            lines.append(f"  #{n:<4} {params:<48} {t.state.name:<8} {what}  parent {parent.info.run_id if parent else '-'}")
        print("\n".join(lines), flush=True)

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
                with warnings.catch_warnings():   # Optuna's matplotlib plots are "experimental"
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
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
