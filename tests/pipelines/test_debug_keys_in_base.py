"""Every key an experiment's debug flavour sets is a key of its base config, so a user can override it on
the command line in either flavour (a key that exists only in the debug block is "not in the config"
without ``++``: training_composed's ``takeover.kills`` was one)."""
import pytest

from pipelines import config

# Keys found by this test in YAMLs owned elsewhere, listed so the suite passes while they stand (each must
# still reproduce, else remove it): experiment -> dotted keys of its debug block missing from its base.
KNOWN_DEBUG_ONLY: dict[str, set[str]] = {
    "adaptive_beam_search": {
        "common.abs_sweep.gammas", "common.abs_sweep.widths", "common.faiss_hnsw.ef_search", "prepare.emb.params.d",
        "prepare.emb.params.n_clusters", "prepare.emb.params.spread", "prepare.passages.params.stdlib",
        "variants.passages_ood_vamana.params.L", "variants.passages_ood_vamana.params.R",
        "variants.passages_vamana.params.L", "variants.passages_vamana.params.R",
    },
    "arnold": {
        "common.arnold_placement.plots", "common.arnold_placement.topology.levels", "variants.arnold.params.plots",
    },
    "context_parallel_compression": {
        "common.context_parallel.timeout_s",
    },
    "diffusion_composed": {
        "common.compactfusion.actor_samples", "common.compactfusion.grid_samples", "common.compactfusion.timeout_s",
        "prepare.calibration.params.reps",
    },
    "duo": {
        "common.ddp_train.eval_batch", "common.ddp_train.timeout_s", "common.duo.eval_batch", "common.duo.timeout_s",
    },
    "error_feedback": {
        "variants.dist_cgd_logreg.params.iters", "variants.dist_ef21_logreg.params.iters",
        "variants.theory.params.n_eps", "variants.theory.params.n_kappa",
    },
    "fal": {
        "common.tensor_parallel.timeout_s", "common.tensor_parallel.timing_repeats",
    },
    "foresight": {
        "common.foresight.calib_iters", "common.foresight.calib_samples", "common.reuse_baseline.calib_iters",
        "common.reuse_baseline.calib_samples",
    },
    "hybrid_einsum": {
        "prepare.calibration.params.cost_max_bits", "prepare.calibration.params.cost_min_s",
        "prepare.calibration.params.cost_reps", "prepare.calibration.params.densities",
        "variants.gap_grid.params.n_values", "variants.libraries.params.warmup", "variants.suite.params.warmup",
    },
    "mecefo": {
        "common.mecefo.actor_down", "common.mecefo.actor_kills", "common.mecefo.actor_steps",
        "common.mecefo.eval_batch", "common.mecefo.timeout_s",
    },
    "mozart": {
        "common.mozart_moe.chunk_sweep", "common.mozart_moe.plots", "common.mozart_moe_lm.chunk_sweep",
        "common.mozart_moe_lm.plots", "variants.full.params.plots",
    },
    "plan_cache": {
        "common.agent_baseline.curve_every", "common.agent_baseline.warm_requests", "common.plan_cache.curve_every",
        "common.plan_cache.warm_requests", "prepare.lms.params.batch",
    },
    "specreason": {
        "prepare.lms.params.n_eval",
    },
}


def _leaves(prefix: str, value):
    """Dotted paths of every leaf below ``prefix`` (a mapping in the debug block merges key by key)."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _leaves(f"{prefix}.{k}", v)
    else:
        yield prefix


def _has(node, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def debug_only_keys(exp: dict) -> set[str]:
    """Keys the ``debug`` block sets (variants dropped with ``variants.X: null`` aside) that the base lacks."""
    missing = set()
    for dotted, value in (exp.get("debug") or {}).items():
        if value is None and dotted.startswith("variants.") and dotted.count(".") == 1:
            continue
        missing.update(p for p in _leaves(dotted, value) if not _has(exp, p))
    return missing


def test_the_check_finds_a_debug_only_key():
    # Prepare / Execute: a base without the key the debug block sets (the training_composed defect)
    exp = {"variants": {"fp32": {"params": {"takeover": {"down_steps": 20}}}, "gd": {}},
           "debug": {"variants.fp32.params.takeover": {"down_steps": 6, "kills": [[5, 1]]}, "variants.gd": None}}
    # Assert
    assert debug_only_keys(exp) == {"variants.fp32.params.takeover.kills"}


@pytest.mark.parametrize("name", config.experiment_names())
def test_debug_keys_exist_in_the_base_config(name, tmp_path):
    # Prepare: the composed base config (Hydra defaults included), debug not applied
    exp = config.compose([f"experiment={name}", f"runs_dir={tmp_path}"])["experiment"]
    # Execute
    missing = debug_only_keys(exp)
    # Assert
    known = KNOWN_DEBUG_ONLY.get(name, set())
    assert missing - known == set(), f"{name}: set these in the base config (with their defaults)"
    assert known <= missing, f"{name}: no longer missing, remove from KNOWN_DEBUG_ONLY: {sorted(known - missing)}"


def test_training_composed_kills_can_be_overridden_in_both_flavours(tmp_path):
    # Execute / Assert: the override composes and validates, full and debug
    from pipelines import dag

    for debug in ("false", "true"):
        cfg = config.compose(["experiment=training_composed", f"debug={debug}", f"runs_dir={tmp_path}",
                              "experiment.variants.fp32.params.takeover.kills=[]"])
        assert dag.validate(cfg).variant("fp32").params_resolved["takeover"]["kills"] == []
