"""The shared training knobs (components.models.knobs): every technique keeps its defaults and the
key paths users type, the checks are the same everywhere and name the key typed, and an experiment's
override of a knob still reaches the technique's params."""
import dataclasses

import pytest

from components.core.errors import ConfigError
from components.core.params import parse_params
from components.diffusion.prepare import DiTTrainParams
from components.models.knobs import GPTShape, GPTTrainKnobs, Steps
from components.serving.spaceserve.technique import SpaceServeParams
from components.training.context_parallel.technique import CPParams
from components.training.mecefo.technique import MeCeFOParams
from components.training.mecefo.timing import TimingParams
from components.training.subspace_pp.technique import SubspacePPParams
from components.training.tensor_parallel.technique import TPParams

KNOBS = ("n_layer", "n_head", "d_model", "context", "batch", "steps", "lr", "warmup", "final_lr_frac",
         "weight_decay", "eval_every", "eval_batches")

# each technique's knob defaults and all its keys, read before the knobs were shared (2026-12-02)
DEFAULTS_BEFORE = {
    SubspacePPParams: dict(n_layer=4, n_head=4, d_model=64, context=64, batch=32, steps=600, lr=3e-3, warmup=50,
                           final_lr_frac=0.1, weight_decay=0.1, eval_every=50, eval_batches=4, final_eval_batches=16),
    CPParams: dict(n_layer=3, n_head=4, d_model=64, context=256, batch=8, steps=250, lr=3e-3, warmup=30,
                   final_lr_frac=0.1, weight_decay=0.1, eval_every=25, eval_batches=8, threads=1, chunks=4),
    TPParams: dict(n_layer=6, n_head=4, d_model=64, context=64, batch=16, steps=1500, lr=3e-3, warmup=50,
                   final_lr_frac=0.1, weight_decay=0.1, eval_every=100, eval_batches=8, final_eval_batches=40,
                   threads=1),
    MeCeFOParams: dict(replicas=4, n_layer=2, n_head=4, d_model=64, context=64, batch=16, steps=1500, lr=3e-3,
                       warmup=50, final_lr_frac=0.1, weight_decay=0.1, eval_every=100, eval_batch=32, eval_batches=4,
                       final_eval_batches=40, threads=1),
    DiTTrainParams: dict(patch=2, d=64, heads=4, depth=6, steps=1200, batch=64, lr=2e-3, ema=0.999, label_dropout=0.1,
                         seed=0),
    TimingParams: dict(n_layer=4, n_head=4, d_model=128, context=128, batch=16, rank=0, reps=25, warmup=2, threads=1),
    SpaceServeParams: dict(chunk_tokens=2048, max_batch=256, n_requests=200),
}
KEYS_BEFORE = {
    SubspacePPParams: set("actor_check_steps basis_seed batch codec context d_model die_at_step die_stage "
                          "eval_batches eval_every execution final_eval_batches final_lr_frac k links lr "
                          "micro_batches n_head n_layer reference_check stages steps timeout_s topk_keep "
                          "warmup weight_decay wire_dtype".split()),
    CPParams: set("M actor_check balance batch bucket check_batch chunks codec context d_model eval_batches "
                  "eval_every fail_rank final_lr_frac gflops kv links lr n_head n_layer rank_frac steps "
                  "tau_end tau_start threads timeout_s warmup weight_decay".split())
    | {"compute_bound_gflops"},   # added since (issue 32 item 4): a second clock, off by default
    TPParams: set("actor_check batch block check_batch context d_model eval_batches eval_every fail_rank "
                  "final_eval_batches final_lr_frac links lr n_head n_layer steps threads timeout_s "
                  "timing_repeats tp warmup weight_decay".split())
    | {"sweep_links"}             # added since (issue 32 item 2): more links to clock the step on, none by default
    | {"timed_against", "timing_rounds"},   # added since (issue 28): the step timed against another block, off by default
    MeCeFOParams: set("actor_check actor_down actor_kills actor_steps approx_own batch ckpt_every context "
                      "crash_at d_model down_steps eval_batch eval_batches eval_every failure_rate "
                      "final_eval_batches final_lr_frac link lowrank lr n_head n_layer rank recompute_ffn "
                      "recovery replicas restart_penalty_s skip_attn steps threads timeout_s warmup "
                      "weight_decay".split())
    | {"basis", "attn_mean", "refresh"}    # added since (issue 32 item 1): the low-rank basis, the skipped attention's mean, the basis refresh
    | {"clock_only"},                      # added since (issue 28): checkpoint-restart's virtual clock without its training
    DiTTrainParams: set("batch d depth ema heads label_dropout lr patch seed steps".split()),
    SpaceServeParams: set("beta chunk_tokens deadline_s enc_budget encoder_order eps gpu gpu_overrides "
                          "image_counts image_probs max_batch mu n_requests out_mean rate rates sis_rule "
                          "static_enc_share system text_max text_min timeline_plot tokens_max tokens_min "
                          "window_s".split()),
    TimingParams: set("batch context d_model n_head n_layer rank reps threads warmup".split()),
}
GPT_TRAINERS = (SubspacePPParams, CPParams, TPParams, MeCeFOParams)


@pytest.mark.parametrize("cls", list(KEYS_BEFORE), ids=lambda c: c.__name__)
def test_defaults_and_keys_are_the_ones_of_before(cls):
    # Execute
    got = dataclasses.asdict(cls())
    # Assert: the same defaults, and no key added or lost
    assert {k: got[k] for k in DEFAULTS_BEFORE[cls]} == DEFAULTS_BEFORE[cls]
    assert set(got) == KEYS_BEFORE[cls]


def test_the_knobs_come_from_one_base():
    # Execute / Assert: the four GPT trainers take every knob from GPTTrainKnobs, the DiT trainer its
    # optimizer loop from Steps, MeCeFO's timing step its size from GPTShape
    assert all(issubclass(c, GPTTrainKnobs) for c in GPT_TRAINERS)
    assert issubclass(DiTTrainParams, Steps) and issubclass(TimingParams, GPTShape)
    base = {f.name for f in dataclasses.fields(GPTTrainKnobs)}
    assert base == set(KNOBS)


@pytest.mark.parametrize("cls", GPT_TRAINERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("key, bad", [("n_layer", 0), ("n_head", 3), ("d_model", 0), ("batch", 0), ("steps", 0),
                                      ("lr", 0.0), ("warmup", 10_000), ("final_lr_frac", 1.5),
                                      ("weight_decay", -0.1), ("eval_batches", 0)])
def test_a_bad_knob_is_one_error_naming_the_key_typed(cls, key, bad):
    # Execute / Assert: the same range for every technique, the error names params.<key>
    with pytest.raises(ConfigError) as e:
        parse_params(cls, {key: bad})
    assert e.value.key == f"params.{key}" and "\n" not in str(e.value)


def test_eval_every_zero_means_final_only_where_the_loop_supports_it():
    # Execute / Assert: tensor_parallel accepts 0 (final evaluation only); the others need an interval
    assert parse_params(TPParams, {"eval_every": 0}).eval_every == 0
    for cls in (SubspacePPParams, CPParams, MeCeFOParams):
        with pytest.raises(ConfigError) as e:
            parse_params(cls, {"eval_every": 0})
        assert e.value.key == "params.eval_every" and "positive integer" in e.value.allowed


@pytest.mark.parametrize("cls, bad", [(DiTTrainParams, {"steps": 0}), (TimingParams, {"n_head": 3}),
                                      (SpaceServeParams, {"max_batch": 0}), (SpaceServeParams, {"chunk_tokens": 0})],
                         ids=["dit_steps", "timing_n_head", "spaceserve_max_batch", "spaceserve_chunk_tokens"])
def test_the_other_params_use_the_same_checks(cls, bad):
    (key, value), = bad.items()
    with pytest.raises(ConfigError) as e:
        parse_params(cls, bad)
    assert e.value.key == f"params.{key}"


@pytest.mark.parametrize("experiment, path, attr", [
    ("fal", "experiment.common.tensor_parallel", "variants"),
    ("subspace_model_parallel", "experiment.common.subspace_pp", "variants"),
    ("context_parallel_compression", "experiment.common.context_parallel", "variants"),
    ("mecefo", "experiment.common.mecefo", "variants"),
    ("compactfusion", "experiment.prepare.model.params", "prepare"),
])
def test_override_paths_users_type_still_reach_the_params(experiment, path, attr):
    from pipelines import config
    from pipelines.experiment import build_spec

    # Prepare / Execute: a knob overridden on the command line, the way users type it
    cfg = config.compose([f"experiment={experiment}", f"{path}.steps=1234", f"++{path}.lr=0.001"])
    spec = build_spec(cfg["experiment"])
    # Assert: every variant (or the DiT prepare step) runs with it
    if attr == "variants":              # those that do not set the knob themselves
        own = {n: set((v or {}).get("params") or {}) for n, v in cfg["experiment"]["variants"].items()}
        parsed = [v.params for v in spec.variants if not {"steps", "lr"} & own[v.base]]
    else:
        parsed = [p.params for p in spec.prepare if p.name == "model"]
    assert parsed and all(p.steps == 1234 and p.lr == 0.001 for p in parsed)
