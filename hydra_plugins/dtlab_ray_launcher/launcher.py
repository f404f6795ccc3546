"""Launch each Hydra job as a Ray task and gather the JobReturns; print one line per job at the end.

A job whose worker or node died (a Ray error, not the job's own exception) comes back as a FAILED
JobReturn naming the Ray error, so a sweeper can tell it from a technique's failure and the other
jobs' results are kept.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from components.core.verbosity import quiet_loggers

log = logging.getLogger(__name__)


@dataclass
class DtlabRayLauncherConf:
    _target_: str = "hydra_plugins.dtlab_ray_launcher.launcher.DtlabRayLauncher"
    max_parallel: Optional[int] = None   # jobs in flight at once (None: all); variants share the CPUs
    job_cpus: float = 0.0                # CPUs reserved per job task (its variants reserve their own)


ConfigStore.instance().store(group="hydra/launcher", name="dtlab_ray", node=DtlabRayLauncherConf, provider="dtlab")


def check_conf(conf: dict) -> None:
    """The launcher's options, checked by preflight before anything starts (ConfigError)."""
    import math

    from components.core.errors import require

    mp, cpus = conf.get("max_parallel"), conf.get("job_cpus", 0.0)
    require(mp is None or (isinstance(mp, int) and not isinstance(mp, bool) and mp >= 1),
            "hydra.launcher.max_parallel", mp, "null (all jobs at once) or an integer >= 1")
    require(isinstance(cpus, (int, float)) and not isinstance(cpus, bool) and math.isfinite(cpus) and cpus >= 0,
            "hydra.launcher.job_cpus", cpus, "a finite number >= 0")


def short_overrides(overrides: Sequence[str], width: int = 60) -> str:
    """A job's overrides as its summary line and its parent's name show them (``step=0.2504,seeds=[1]``)."""
    from components.core.provenance import job_label

    return job_label(list(overrides), width=width)


def job_parent(sweep_config: DictConfig) -> Optional[str]:
    """The parent run the job just made in this process (its ``hydra.job`` and this process as its
    driver), None if it made none."""
    try:
        from components.core.provenance import DRIVER_TAG, driver_id
        from components.core.tracker import resolve_tracking_uri, tracking_client

        client = tracking_client(resolve_tracking_uri(sweep_config.tracking.uri))
        exp = client.get_experiment_by_name(str(sweep_config.experiment.name))
        if exp is None:
            return None
        runs = client.search_runs([exp.experiment_id], f"tags.`dtlab.kind` = 'parent' and tags.`hydra.job` = "
                                  f"'{sweep_config.hydra.job.num}' and tags.`{DRIVER_TAG}` = '{driver_id()}'",
                                  order_by=["attributes.start_time DESC"], max_results=1)
        return runs[0].info.run_id if runs else None
    except Exception:  # noqa: BLE001 - the summary line then shows no run id
        return None


def _run_remote(hydra_context: HydraContext, task_function: TaskFunction, sweep_config: DictConfig,
                singleton_state: dict, beacon: Optional[str] = None) -> tuple[JobReturn, Optional[str]]:
    if beacon:  # first: which process runs this job, for a driver that must wait for it to go
        from components.core.provenance import driver_id

        try:
            Path(beacon).write_text(driver_id())
        except OSError:   # another node's filesystem: the driver cannot watch this process anyway
            pass
    Singleton.set_state(singleton_state)
    setup_globals()
    quiet_loggers()
    HydraConfig.instance().set_config(sweep_config)
    ret = run_job(hydra_context=hydra_context, task_function=task_function, config=sweep_config,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    if ret.status.name == "FAILED":  # keep the exception picklable and readable on the driver
        err = ret._return_value
        ret._return_value = RuntimeError(f"{type(err).__name__}: {err}")
    return ret, job_parent(sweep_config)


def lost_job(overrides: Sequence[str], e: BaseException) -> JobReturn:
    """The JobReturn of a job whose task never returned (its worker or node died): FAILED with the
    Ray error's type and first line, which a sweeper reads as an infrastructure failure."""
    cause = getattr(e, "cause", None)
    err = cause if isinstance(cause, BaseException) else e
    text = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}".rstrip(": ")
    return JobReturn(overrides=list(overrides), status=JobStatus.FAILED, _return_value=RuntimeError(text))


def summary_lines(rows: list[dict]) -> list[str]:
    """The end-of-multirun summary: one line per job (number, overrides, status, headline, parent run).

    ``rows``: dicts with ``idx``, ``overrides``, ``status`` (the parent run's, else the job's), ``headline``
    (claims held, the objective, or the error) and ``parent`` (run id or None)."""
    if not rows:
        return []
    width = min(60, max(len(r["overrides"]) for r in rows))
    out = [f"multirun: {len(rows)} job(s), {sum(r['status'] == 'FINISHED' for r in rows)} finished"]
    for r in rows:
        out.append(f"  #{r['idx']:<4} {r['overrides']:<{width}}  {r['status']:<8}  {r['headline']}"
                   f"  parent {r['parent'] or '-'}")
    return out


class DtlabRayLauncher(Launcher):
    def __init__(self, max_parallel: Optional[int] = None, job_cpus: float = 0.0):
        self.max_parallel, self.job_cpus = max_parallel, job_cpus
        self.summary = True   # a sweeper that prints its own summary turns the per-launch one off
        self.parents: dict[int, Optional[str]] = {}   # job number -> its MLflow parent run

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config
        quiet_loggers()

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Run the jobs as Ray tasks. Ctrl-C, SIGTERM or SIGHUP cancels them and ends every run
        they left open KILLED with the reason, then re-raises (the multirun stops)."""
        from components.core.interrupts import terminate_as_interrupt

        with terminate_as_interrupt() as reinstall:
            return self._launch(job_overrides, initial_job_idx, reinstall)

    def _launch(self, job_overrides, initial_job_idx: int, reinstall) -> Sequence[JobReturn]:
        import time

        import ray

        from components.core.raytools import init_ray
        from components.core.tracker import Tracker, resolve_tracking_uri

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        # create/migrate the tracking store once here, before jobs race to do it (and fail fast if down)
        tracker = Tracker(resolve_tracking_uri(self.config.tracking.uri))
        tracker.check_reachable()
        cluster = OmegaConf.to_container(self.config.cluster, resolve=True)
        info = init_ray(cluster)
        reinstall()  # ray.init installs its own SIGTERM handler in the driver
        log.info(f"Launching {len(job_overrides)} jobs as Ray tasks ({info['num_cpus']:.0f} CPUs, {info['nodes']} nodes)")
        task = ray.remote(num_cpus=self.job_cpus, max_retries=0)(_run_remote)
        state = Singleton.get_state()
        refs: list[Any] = []
        beacons: dict[Any, Path] = {}   # job task -> the file its process writes its driver tag to
        beacon_dir = Path(str(self.config.hydra.sweep.dir)).resolve() / ".dtlab-jobs"
        beacon_dir.mkdir(parents=True, exist_ok=True)
        results: list[JobReturn] = []
        experiments: set[str] = set()
        idxs = {str(initial_job_idx + i) for i in range(len(job_overrides))}
        t0_ms = int(time.time() * 1000) - 1000
        try:
            for i, overrides in enumerate(job_overrides):
                idx = initial_job_idx + i
                log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
                sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                experiments.add(str(sweep_config.experiment.name))
                with open_dict(sweep_config):
                    sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
                    sweep_config.hydra.job.num = idx
                beacon = beacon_dir / f"{idx}.driver"
                beacon.unlink(missing_ok=True)
                refs.append(task.options(name=f"hydra-job-{idx}").remote(self.hydra_context, self.task_function,
                                                                           sweep_config, state, str(beacon)))
                beacons[refs[-1]] = beacon
                if self.max_parallel and len(refs) >= self.max_parallel:
                    results.append(self._gather(refs[0], job_overrides[len(results)], initial_job_idx + len(results)))
                    refs.pop(0)   # only once gathered: a job interrupted while awaited is still cancelled
            while refs:
                results.append(self._gather(refs[0], job_overrides[len(results)], initial_job_idx + len(results)))
                refs.pop(0)
            if self.summary:
                self._print_summary(tracker, job_overrides, results, initial_job_idx)
            return results
        except KeyboardInterrupt as e:
            self._interrupted(e, refs, tracker, experiments, idxs, t0_ms, beacons)
            raise

    def _gather(self, ref, overrides: Sequence[str], idx: int) -> JobReturn:
        """The job's JobReturn (its parent run noted); a job whose task died is a FAILED JobReturn."""
        import ray

        try:
            ret, self.parents[idx] = ray.get(ref)
        except ray.exceptions.RayError as e:   # the worker, its node or the task itself died
            self.parents[idx] = None
            ret = lost_job(overrides, e)
            log.warning(f"job #{idx} lost: {ret._return_value}")
        return ret

    def _print_summary(self, tracker, job_overrides, results: Sequence[JobReturn], initial_job_idx: int) -> None:
        """One line per job: overrides, status, claims held (or the objective, or the error), parent run."""
        objective = OmegaConf.select(self.config, "objective")
        rows = []
        for i, (overrides, ret) in enumerate(zip(job_overrides, results)):
            idx = initial_job_idx + i
            parent = self.parents.get(idx)
            status, headline = ret.status.name, ""
            run = None
            if parent:
                try:
                    run = tracker.client.get_run(parent)
                except Exception:  # noqa: BLE001 - the line shows what the JobReturn says
                    run = None
            if run is not None:
                status = run.info.status
                m = run.data.metrics
                if "claims_total" in m:
                    headline = f"claims {int(m.get('claims_held', 0))}/{int(m['claims_total'])} hold"
            if ret.status == JobStatus.COMPLETED and objective:
                headline = f"objective {ret.return_value:.6g}" if isinstance(ret.return_value, float) \
                    else f"objective {ret.return_value}"
            elif ret.status != JobStatus.COMPLETED:
                err = str(ret._return_value).splitlines()[0] if ret._return_value is not None else ""
                headline = (headline + "  " if headline else "") + err[:100]
            rows.append({"idx": idx, "overrides": short_overrides(filter_overrides(overrides)) or "-",
                         "status": status, "headline": headline, "parent": parent})
        print("\n".join(summary_lines(rows)), flush=True)

    @staticmethod
    def _interrupted(e, refs, tracker, experiments, idxs, t0_ms, beacons) -> None:
        """Cancel the jobs still running, wait for their workers' processes to exit (``beacons``: job task ->
        the file the job, once started, wrote its driver tag to), end their open runs KILLED."""
        import ray

        from components.core.interrupts import interrupt_reason
        from hydra_plugins.dtlab_ray_launcher.open_runs import end_open_runs, wait_gone

        reason = interrupt_reason(e)
        try:   # a job already done keeps its (idle, reusable) worker: only the cancelled ones' exits are awaited
            done = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0]) if refs else set()
        except Exception:  # noqa: BLE001
            done = set()
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished
                pass
        try:
            ray.wait(refs, num_returns=len(refs), timeout=15)
        except Exception:  # noqa: BLE001
            pass
        # Ray answers a forced cancel before the worker exits: a job in that window can still create a run
        left = wait_gone([beacons[r].read_text() for r in refs if r not in done and beacons[r].exists()], timeout=15)
        if left:
            log.warning(f"{len(left)} cancelled job process(es) still running after 15 s: {', '.join(left)}")
        client = tracker.client
        exp_ids = [x.experiment_id for x in (client.get_experiment_by_name(n) for n in experiments) if x]
        ended = end_open_runs(client, exp_ids, lambda r: r.data.tags.get("hydra.job") in idxs
                              and r.info.start_time >= t0_ms, f"{reason} (multirun interrupted)")
        log.warning(f"multirun {reason}: {len(ended)} open run(s) ended KILLED")
