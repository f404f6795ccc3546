"""The Hydra application behind `dtlab run`: one DAG invocation per (multirun) job."""
from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from pipelines.config import CONF_DIR  # also registers the dtlab_root resolver


FAILED_JOBS: list[str] = []


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> float:
    """Run one job; returns the number of claims that hold (a sweeper can maximise it)."""
    from hydra.core.hydra_config import HydraConfig
    from rich.console import Console

    from pipelines import dag

    plain = OmegaConf.to_container(cfg, resolve=True)
    multirun = HydraConfig.get().mode.name == "MULTIRUN"
    plain["_job"] = HydraConfig.get().job.num if multirun else ""
    outcome = dag.run(plain, console=Console())
    if outcome.failed:
        FAILED_JOBS.append(f"{plain['_job']}:{','.join(outcome.failed)}")
        if not multirun:  # a multirun goes on with its other jobs; the CLI exits 1 at the end
            raise SystemExit(1)
    return float(outcome.claims_held)


if __name__ == "__main__":
    main()
