"""Launch each Hydra job as a Ray task and gather the JobReturns."""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

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


def _run_remote(hydra_context: HydraContext, task_function: TaskFunction, sweep_config: DictConfig,
                singleton_state: dict) -> JobReturn:
    Singleton.set_state(singleton_state)
    setup_globals()
    HydraConfig.instance().set_config(sweep_config)
    ret = run_job(hydra_context=hydra_context, task_function=task_function, config=sweep_config,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    if ret.status.name == "FAILED":  # keep the exception picklable and readable on the driver
        err = ret._return_value
        ret._return_value = RuntimeError(f"{type(err).__name__}: {err}")
    return ret


class DtlabRayLauncher(Launcher):
    def __init__(self, max_parallel: Optional[int] = None, job_cpus: float = 0.0):
        self.max_parallel, self.job_cpus = max_parallel, job_cpus

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Run the jobs as Ray tasks. Ctrl-C, SIGTERM or SIGHUP cancels them and ends every run
        they left open KILLED with the reason, then re-raises (the multirun stops)."""
        from pipelines.dag import terminate_as_interrupt

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
                refs.append(task.options(name=f"hydra-job-{idx}").remote(self.hydra_context, self.task_function,
                                                                           sweep_config, state))
                if self.max_parallel and len(refs) >= self.max_parallel:
                    results.append(ray.get(refs.pop(0)))
            results.extend(ray.get(refs))
            return results
        except KeyboardInterrupt as e:
            self._interrupted(e, refs, tracker, experiments, idxs, t0_ms)
            raise

    @staticmethod
    def _interrupted(e, refs, tracker, experiments, idxs, t0_ms) -> None:
        """Cancel the jobs still running, wait for their workers to stop, end their open runs KILLED."""
        import ray

        from hydra_plugins.dtlab_ray_launcher.open_runs import end_open_runs, interrupt_reason

        reason = interrupt_reason(e)
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished
                pass
        try:
            ray.wait(refs, num_returns=len(refs), timeout=15)
        except Exception:  # noqa: BLE001
            pass
        client = tracker.client
        exp_ids = [x.experiment_id for x in (client.get_experiment_by_name(n) for n in experiments) if x]
        ended = end_open_runs(client, exp_ids, lambda r: r.data.tags.get("hydra.job") in idxs
                              and r.info.start_time >= t0_ms, f"{reason} (multirun interrupted)")
        log.warning(f"multirun {reason}: {len(ended)} open run(s) ended KILLED")
