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
        import ray

        from components.core.raytools import init_ray
        from components.core.tracker import Tracker, resolve_tracking_uri

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        # create/migrate the tracking store once here, before jobs race to do it (and fail fast if down)
        Tracker(resolve_tracking_uri(self.config.tracking.uri)).check_reachable()
        cluster = OmegaConf.to_container(self.config.cluster, resolve=True)
        info = init_ray(cluster)
        log.info(f"Launching {len(job_overrides)} jobs as Ray tasks ({info['num_cpus']:.0f} CPUs, {info['nodes']} nodes)")
        task = ray.remote(num_cpus=self.job_cpus, max_retries=0)(_run_remote)
        state = Singleton.get_state()
        refs: list[Any] = []
        results: list[JobReturn] = []
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
                sweep_config.hydra.job.num = idx
            refs.append(task.options(name=f"hydra-job-{idx}").remote(self.hydra_context, self.task_function,
                                                                       sweep_config, state))
            if self.max_parallel and len(refs) >= self.max_parallel:
                results.append(ray.get(refs.pop(0)))
        results.extend(ray.get(refs))
        return results
