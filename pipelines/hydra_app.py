"""The Hydra application behind `dtlab run`: one DAG invocation per (multirun) job."""
from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from pipelines.config import CONF_DIR  # also registers the dtlab_root and dtlab_env resolvers


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> float:
    """Run one job; returns the sweep objective (``objective`` expression, else claims held).

    A job whose variants failed raises in a multirun (the launcher records it FAILED, a sweeper
    marks the trial failed) and exits 1 in a single run.
    """
    from hydra.core.hydra_config import HydraConfig
    from rich.console import Console

    from components.core.verbosity import apply_verbose
    from pipelines import dag
    from pipelines.flavours import normalise_flavour

    plain = normalise_flavour(OmegaConf.to_container(cfg, resolve=True))   # preflight has checked it
    apply_verbose(plain)  # Ray and Serve at WARNING unless verbose=true (also for jobs of a multirun)
    multirun = HydraConfig.get().mode.name == "MULTIRUN"
    plain["_job"] = HydraConfig.get().job.num if multirun else ""
    plain["_overrides"] = list(HydraConfig.get().overrides.task)
    # a single run: its line counts the command's start-up, and the Ray it started stops inside it
    outcome = dag.run(plain, console=Console(), started_ago=None if multirun else dag.process_age(),
                      teardown=not multirun)
    if outcome.failed:
        if not multirun:
            raise SystemExit(1)
        raise RuntimeError(f"job {plain['_job']}: variants failed: {', '.join(outcome.failed)}")
    return dag.objective(outcome, plain.get("objective"))


if __name__ == "__main__":
    main()
