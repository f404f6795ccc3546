"""Foresight's schedule invariants and reuse rules, the baselines' schedules, the quality
metrics on known cases, and bad input (one line, before Ray starts)."""
import math

import pytest
import torch

from components.core.errors import ConfigError
from components.diffusion import quality
from components.diffusion.foresight.policies import PAB, Foresight, StaticN, TeaCache
from components.diffusion.foresight.technique import BaselineParams, ForesightParams, is_monotone
from components.diffusion.sampling import BlockRunner, draw, sample
from components.models.dit import DiT, DiTConfig

STEPS = 24


def _run(model, runner, steps=STEPS):
    noise, y = draw(0, 4, model)
    return sample(model, noise, y, steps, 2.0, runner), runner


@pytest.mark.parametrize("warmup, interval, last_full", [(4, 2, 3), (6, 3, 0), (2, 1, 5)])
def test_foresight_schedule_invariants(model, warmup, interval, last_full):
    # Prepare: a huge lambda, so every candidate step that may skip does skip
    runner = Foresight(lam=1e12, warmup=warmup, interval=interval, last_full=last_full)
    # Execute
    _, r = _run(model, runner)
    # Assert
    for t, frac in enumerate(r.per_step):
        if t < warmup or t >= STEPS - last_full or t % interval == 0:
            assert frac == 1.0, (t, r.decisions[t])       # no skip before W, at t mod R == 0, last steps
        else:
            assert frac == 0.0, (t, r.decisions[t])       # the rule does skip where it may
    assert (r.skip_fraction > 0) == (interval > 1)


def test_lambda_zero_never_skips_and_equals_full(model):
    # Execute
    full, _ = _run(model, BlockRunner())
    fs, r = _run(model, Foresight(lam=0.0, warmup=4, interval=2, last_full=0))
    # Assert: thresholds 0 and changes > 0: nothing reused, the same samples
    assert r.skip_fraction == 0.0
    assert torch.equal(full, fs)


def _at_candidate_step(model, mode, delta, theta):
    """A runner past warm-up with random caches and the given changes and thresholds."""
    r = Foresight(lam=1.0, warmup=2, interval=2, last_full=0, mode=mode)
    r.start(10, model)
    h, c = model.embed(torch.randn(2, 1, 8, 8), torch.rand(2), torch.tensor([0, 1]))
    r.cache = [torch.randn_like(h) for _ in range(4)]
    r.delta, r.theta = list(delta), list(theta)
    return r, h, c, list(r.cache)


def test_prefix_rule_output_and_full_skip(model):
    # Prepare: block 1 (not 0, not 2-3) under its threshold
    r, h, c, caches = _at_candidate_step(model, "prefix", [5.0, 1.0, 5.0, 5.0], [1.0, 2.0, 1.0, 1.0])
    # Execute
    out = r(3, h, c, model)
    r.delta, r.theta = [5.0, 5.0, 5.0, 0.5], [1.0, 1.0, 1.0, 1.0]
    skipped = r(5, h, c, model)
    # Assert: L* = 1 -> blocks 2, 3 run from c_1 (half the units); L* = last -> c_last, nothing runs
    assert torch.equal(out, model.blocks[3](model.blocks[2](caches[1], c), c))
    assert r.decisions[0] == "reuse:1" and r.per_step[0] == 0.5
    assert r.decisions[-1] == "reuse:3" and r.per_step[-1] == 0.0
    assert torch.equal(skipped, r.cache[3])


def test_per_layer_mode_reuses_only_blocks_under_threshold(model):
    # Prepare
    r, h, c, caches = _at_candidate_step(model, "per_layer", [5.0, 0.5, 5.0, 5.0], [1.0] * 4)
    # Execute
    out = r(3, h, c, model)
    # Assert: block 1 outputs c_1, blocks 0, 2, 3 recompute from their current input
    assert torch.equal(out, model.blocks[3](model.blocks[2](caches[1], c), c))
    assert r.per_step[-1] == 0.75 and r.decisions[-1] == "layers:3"


@pytest.mark.parametrize("n", [2, 3])
def test_static_n_schedule(model, n):
    # Execute
    _, r = _run(model, StaticN(n))
    # Assert
    assert r.per_step == [1.0 if t % n == 0 else 0.0 for t in range(STEPS)]
    assert math.isclose(r.skip_fraction, 1 - 1 / n)


def test_teacache_threshold_controls_whole_model_skips(model):
    # Execute
    full, _ = _run(model, BlockRunner())
    never, r0 = _run(model, TeaCache(delta=0.0))
    _, r1 = _run(model, TeaCache(delta=1e9))
    # Assert: delta 0 never skips; a huge delta skips all but the first and last steps
    assert r0.skip_fraction == 0.0 and torch.equal(never, full)
    assert r1.per_step == [1.0] + [0.0] * (STEPS - 2) + [1.0]


def test_pab_reuses_attention_inside_its_window(model):
    # Execute
    _, r = _run(model, PAB(spatial=2, window=(0.25, 0.75)))
    # Assert: half the units (attention) skipped on every other step of the window, MLP always runs
    lo, hi = int(0.25 * STEPS), int(0.75 * STEPS)
    assert r.per_step == [0.5 if lo <= t < hi and (t - lo) % 2 else 1.0 for t in range(STEPS)]


def test_quality_metrics_on_known_cases():
    # Prepare
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 1, 16, 16, generator=g) - 0.5            # inside [-1, 1]: no clamping
    class Oracle(torch.nn.Module):                           # predicts class 3 always
        def forward(self, z):
            return torch.nn.functional.one_hot(torch.full((len(z),), 3), 10).float()
    # Execute / Assert: a 0.1 shift in [-1, 1] is 0.05 in [0, 1]: PSNR = 10 log10(1 / 0.05^2)
    assert torch.allclose(quality.psnr_db(x + 0.1, x), torch.full((6,), 10 * math.log10(1 / 0.0025)), atol=1e-3)
    assert torch.all(quality.psnr_db(x, x) == quality.PSNR_CAP)
    assert torch.allclose(quality.ssim(x, x), torch.ones(6))
    assert torch.all(quality.ssim(-x, x) < 0)                 # inverted structure
    assert quality.class_accuracy(Oracle(), x, torch.tensor([3, 3, 3, 1, 1, 1])) == 0.5
    assert is_monotone([0.0, 0.1, 0.1, 0.4], True) and not is_monotone([30, 20, 25], False)


@pytest.mark.parametrize("params, key", [
    (lambda: ForesightParams(lam=-0.5), "lam"),
    (lambda: ForesightParams(interval=0), "interval"),
    (lambda: ForesightParams(mode="sideways"), "mode"),
    (lambda: BaselineParams(policy="deepcache"), "policy"),
    (lambda: BaselineParams(target_skip=1.5), "target_skip"),
    (lambda: ForesightParams(timing_rounds=2), "timing_rounds"),       # fewer than the 3 a floor needs
    (lambda: BaselineParams(timing_precision=0.0), "timing_precision"),
])
def test_bad_params_name_the_key(params, key):
    with pytest.raises(ConfigError) as e:
        params().check()
    assert e.value.key == key and "\n" not in str(e.value)


@pytest.mark.parametrize("override, must_name", [
    ("experiment.common.foresight.lam=-1", "lam=-1.0: a non-negative threshold scale (lambda >= 0)"),
    ("experiment.variants.foresight_matched.params.interval=0", "interval=0: R >= 1"),
    ("experiment.variants.static2.params.policy=deepcache", "policy='deepcache': one of full, static, teacache, pab"),
])
def test_bad_experiment_input_is_one_line_before_ray(override, must_name, tmp_path):
    # The validation pass `dtlab run` makes before Ray starts (its exit 2 is pinned in tests/pipelines)
    from pipelines.preflight import check

    with pytest.raises(ConfigError) as e:
        check(["experiment=foresight", override, f"runs_dir={tmp_path}"], False)
    assert must_name in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_pab_on_clips_broadcasts_spatial_and_temporal_attention_on_their_own_ranges():
    # Prepare: a 2-frame clip DiT (each block: spatial attention, temporal attention, MLP = 3 units)
    torch.manual_seed(0)
    clip = DiT(DiTConfig(img_size=8, patch=4, d=16, heads=2, depth=2, frames=2)).eval().requires_grad_(False)
    # Execute
    _, r = _run(clip, PAB(spatial=2, temporal=4, window=(0.0, 1.0)), steps=9)
    # Assert
    expect = [1.0] + [(3 - (t % 2 != 0) - (t % 4 != 0)) / 3 for t in range(1, 9)]
    assert r.per_step == pytest.approx(expect)


def test_calibration_finds_the_lambda_of_a_target_skip_fraction(model):
    from components.diffusion.foresight.technique import calibrate

    # Prepare: reuse may reach 15/24 = 62% of this schedule's units
    p = ForesightParams(warmup=2, interval=3, last_full=0, target_skip=0.3, calib_samples=2, calib_iters=6, batch=2)
    # Execute
    lam, skip = calibrate(model, "foresight", p, {"size": 8, "steps": STEPS, "cfg_scale": 2.0}, seed=0)
    # Assert
    assert abs(skip - 0.3) <= 0.07 and 0 < lam < 1e4


def test_speedup_is_timed_by_the_one_mechanism_and_its_timed_samples_are_the_evaluated_ones(model, prepared_inputs,
                                                                                             monkeypatch):
    from components.diffusion.foresight import technique as tech
    from components.core.context import RunContext

    # Prepare: a reference of 4 samples, the model and a classifier passed through as prepared inputs
    monkeypatch.setattr(tech, "load_dit", lambda m, device="cpu": m)
    monkeypatch.setattr(tech, "load_classifier", lambda c, device="cpu": c)
    ctx = RunContext(seed=0, variant="static2", inputs=prepared_inputs(model, STEPS))
    timed_p = BaselineParams(policy="static", batch=2, timing_batches=1, timing_rounds=3, grid=False)
    untimed_p = BaselineParams(policy="static", batch=2, timing_batches=0, grid=False)
    # Execute
    m, _, files = tech.evaluate_policy("static", timed_p, ctx)
    plain, _, _ = tech.evaluate_policy("static", untimed_p, ctx)
    # Assert: the same samples either way; the speedup with its floor, rounds and clock (never its value)
    for k in ("skip_fraction", "psnr_db", "ssim"):
        assert m[k] == plain[k], k
    assert "speedup_wall" not in plain and m["speedup_wall_rounds"] == 3 and m["speedup_wall_thread_clock"] == 1.0
    assert m["speedup_wall_noise"] >= 0 and m["speedup_wall_lo"] <= m["speedup_wall"] <= m["speedup_wall_hi"]
    import json
    info = json.loads(files["timing/speedup_wall.json"])
    assert info["clock"] == "thread" and info["rounds"] == 3 and len(info["samples_s"]["~self"]) == 3
