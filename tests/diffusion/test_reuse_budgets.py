"""Reuse at equal skip budgets (issue 32 item 6): the static schedule at a budget, the blocks' change
rates, the curve technique's figures on a tiny DiT, and bad budgets named in one line."""
import math

import pytest
import torch

from components.core.errors import ConfigError
from components.diffusion.foresight import budgets as bud
from components.diffusion.foresight.policies import StaticN
from components.diffusion.sampling import BlockRunner, draw, sample

STEPS = 20


def _run(model, runner):
    noise, y = draw(0, 4, model)
    return sample(model, noise, y, STEPS, 2.0, runner), runner


@pytest.mark.parametrize("fraction", [0.2, 0.25, 0.4])
def test_static_budget_skips_its_fraction_evenly(model, fraction):
    # Execute
    _, r = _run(model, bud.StaticBudget(fraction))
    # Assert: the budget's share of steps skipped, never two in a row below 50%, the first step computed
    assert math.isclose(r.skip_fraction, round(fraction * STEPS) / STEPS)
    assert r.per_step[0] == 1.0
    assert all(a + b >= 1.0 for a, b in zip(r.per_step, r.per_step[1:]))


def test_static_budget_at_one_half_is_static_2(model):
    # Execute
    x_half, r_half = _run(model, bud.StaticBudget(0.5))
    x_two, r_two = _run(model, StaticN(2))
    # Assert
    assert r_half.per_step == r_two.per_step and torch.equal(x_half, x_two)


def test_layer_rates_measure_full_compute_and_change_nothing(model):
    # Execute
    x_probe, probe = _run(model, bud.LayerRates(skip_first=2))
    x_full, _ = _run(model, BlockRunner())
    # Assert: the samples of full compute; one rate per block and step after the first two, all positive
    assert torch.equal(x_probe, x_full) and probe.skip_fraction == 0.0
    assert [len(r) for r in probe.rates] == [STEPS - 2] * 4
    assert all(v > 0 for r in probe.rates for v in r)


def test_lockstep_is_one_for_blocks_whose_change_moves_together_at_any_scale():
    # Prepare: three blocks, the second a scaled copy of the first, the third moving against them
    first = [0.1, 0.05, 0.02, 0.04]
    scaled, against = [10 * v for v in first], [0.02, 0.04, 0.1, 0.05]
    # Execute / Assert
    assert bud.lockstep([first, scaled]) == pytest.approx(1.0)
    assert bud.lockstep([first, scaled, against]) < 0
    assert math.isnan(bud.lockstep([first])) and math.isnan(bud.lockstep([[0.1, 0.2], [0.3, 0.1]]))


def test_curve_reports_every_policy_at_every_budget(model, prepared_inputs, monkeypatch):
    from components.core.context import RunContext

    # Prepare: a reference of 4 samples; the model and an oracle classifier passed through as prepared inputs
    monkeypatch.setattr(bud, "load_dit", lambda m, device="cpu": m)
    monkeypatch.setattr(bud, "load_classifier", lambda c, device="cpu": c)
    ctx = RunContext(seed=0, variant="budget_curve", inputs=prepared_inputs(model, STEPS))
    p = bud.BudgetParams(warmup=2, interval=3, last_full=0, batch=2, budgets=[20, 40], calib_samples=2, calib_iters=5,
                         rate_samples=2)
    # Execute
    res = bud.run_budget_curve(p, ctx)
    m = res.metrics
    # Assert: each policy's PSNR and skip at each budget; the leads are the mean differences over the budgets
    for pol in bud.POLICIES:
        for b in (20, 40):
            assert math.isfinite(m[f"{pol}_psnr_b{b}"]) and 0 <= m[f"{pol}_skip_b{b}"] < 1
    assert m["static_skip_b20"] == pytest.approx(0.2) and m["static_skip_b40"] == pytest.approx(0.4)
    for rival in ("static", "teacache"):
        gaps = [m[f"foresight_psnr_b{b}"] - m[f"{rival}_psnr_b{b}"] for b in (20, 40)]
        assert m[f"psnr_gap_{rival}"] == pytest.approx(sum(gaps) / 2)
        assert m[f"ahead_{rival}"] == sum(g > 0 for g in gaps)
    devs = [abs(m[f"{pol}_skip_b{b}"] - b / 100) for pol in bud.POLICIES for b in (20, 40)]
    assert m["max_skip_dev"] == pytest.approx(max(devs))
    rates = [m[f"layer_rate_{l}"] for l in range(4)]
    assert m["layer_rate_spread"] == pytest.approx(max(rates) / min(rates))
    assert -1.0 <= m["layer_rate_corr"] <= 1.0
    assert "plots/budget_curve.png" in res.files


@pytest.mark.parametrize("kwargs", [{"budgets": [0.2, 0.4]}, {"budgets": [20, 20]}, {"budgets": [100]},
                                    {"policies": ["static"]}])
def test_bad_budget_params_name_the_key(kwargs):
    with pytest.raises(ConfigError) as e:
        bud.BudgetParams(**kwargs).check()
    assert e.value.key == next(iter(kwargs)) and "\n" not in str(e.value)
