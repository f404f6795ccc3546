"""SpaceServe simulator: calibration reproduced, SIS never over-allocates SMs, TWSRFT's order on a
hand-made trace, the systems' scheduling invariants, bad input, and the debug experiment end to end."""
import math

import numpy as np
import pytest

from components.core.context import RunContext
from components.core.errors import ConfigError
from components.serving.spaceserve.calibration import A100_BANDWIDTH_POINTS, A100_COMPUTE_POINTS, GPU
from components.serving.spaceserve.scheduling import encoder_batch, sis_cost_decoder_sms, sis_decoder_sms
from components.serving.spaceserve.sim import SimConfig, simulate
from components.serving.spaceserve.technique import SpaceServeParams, run_spaceserve
from components.serving.spaceserve.workload import Request, stream


@pytest.fixture(scope="module")
def gpu():
    return GPU()


def test_fitted_curves_reproduce_calibration_points(gpu):
    # Prepare: the A100 calibration points; Execute: evaluate the fitted curves there; Assert: within 1 pt
    for share, rel in A100_COMPUTE_POINTS:
        assert abs(gpu.compute_frac(share * gpu.sms) - rel) < 0.01, share
    for share, rel in A100_BANDWIDTH_POINTS:
        assert abs(gpu.bw_frac(share * gpu.sms) - rel) < 0.01, share
    # shapes (sheet): encoder time falls with SMs; a decode step is flat beyond the bandwidth knee
    flops = gpu.enc_flops([1024, 512])
    times = [gpu.enc_time(flops, s) for s in range(2, gpu.sms + 1, 2)]
    assert all(a > b for a, b in zip(times, times[1:]))
    full = gpu.iter_time(gpu.sms, 32, 32 * 1000)
    assert gpu.iter_time(64, 32, 32 * 1000) <= 1.02 * full < gpu.iter_time(20, 32, 32 * 1000) / 1.5
    assert gpu.decoder_saturation_share() <= 0.5


def test_simulated_kernels_take_calibrated_times(gpu):
    # Prepare: one request, one image, on the static split (encoder on a fixed 34-SM partition)
    req = Request(0, 0.0, [1024], text_tokens=100, out_tokens=3)
    res = simulate([req], gpu, SimConfig(system="static"))
    s = gpu.round_sms(0.3 * gpu.sms)
    # Assert: encoder completion = launch overhead + FLOPs / (eta * peak * C(s) * wave efficiency)
    expect = gpu.k_enc + gpu.enc_flops([1024]) / (gpu.eta * gpu.peak_flops * gpu.compute_frac(s) * gpu.wave_eff(1024, s))
    assert res.enc_completion[0] == pytest.approx(expect, rel=1e-9)
    # the encoder's SM-seconds: s SMs for the kernel time (compute scales linearly with SMs)
    assert res.enc_sm_share * res.makespan * gpu.sms == pytest.approx(s * (expect - gpu.k_enc), rel=1e-9)
    # and the first token one prefill step (alone on the decoder's 74 SMs) later
    prompt = req.prompt_tokens
    assert res.ttft[0] == pytest.approx(expect + gpu.iter_time(gpu.sms - s, 0, 0.0, prompt, prompt / 2), rel=1e-9)


def test_sis_never_over_allocates_sms():
    # Prepare: random GPU presets, decoder states and tolerances
    rng = np.random.default_rng(0)
    for i in range(200):
        gpu = GPU.preset(str(rng.choice(["a100", "h100"])), bw_knee=float(rng.uniform(0.1, 1.0)))
        step = (int(rng.integers(0, 257)), float(rng.integers(0, 300_000)), int(rng.integers(0, 2049)),
                float(rng.uniform(0, 4000)))
        eps, pending = float(rng.uniform(0, 0.5)), bool(rng.random() < 0.8)
        # Execute
        s_dec = sis_decoder_sms(gpu, step, eps, pending)
        # Assert: whole TPCs, within the GPU, encoder share non-negative, and the smallest that meets the rule
        assert s_dec % gpu.tpc == 0 and gpu.tpc <= s_dec <= gpu.sms and gpu.sms - s_dec >= 0, (i, s_dec)
        target = (1 + eps) * gpu.iter_time(gpu.sms, *step)
        if not pending:
            assert s_dec == gpu.sms
        else:
            assert gpu.iter_time(s_dec, *step) <= target
            assert s_dec == gpu.tpc or gpu.iter_time(s_dec - gpu.tpc, *step) > target
        # the cost rule J: also whole TPCs within the GPU, and no cheaper split exists
        backlog = float(rng.uniform(0, 1e14)) if pending else 0.0
        mu, d = (0.0 if i % 10 == 0 else float(rng.uniform(0, 10))), float(rng.uniform(0, 0.2))
        s_cost = sis_cost_decoder_sms(gpu, step, backlog, 4096, mu, d)
        assert s_cost % gpu.tpc == 0 and gpu.tpc <= s_cost <= gpu.sms, (i, s_cost)

        def j(s):
            drain = gpu.enc_time(backlog, gpu.sms - s, 4096) if s < gpu.sms else math.inf
            return gpu.iter_time(s, *step) + (mu * max(0.0, drain - d) if mu > 0 else 0.0)
        assert backlog == 0 and s_cost == gpu.sms or all(j(s_cost) <= j(s) + 1e-12 for s in range(gpu.tpc, gpu.sms + 1, gpu.tpc))


def test_simulated_partitions_stay_within_the_gpu(gpu):
    # Execute: SIS (both rules) and the static split under load; Assert: whole TPCs, and the encoder's
    # running kernel plus the decoder's step never hold more SMs than the GPU has
    for seed, rate in [(1, 15.0), (2, 20.0)]:
        reqs = stream(seed, rate, 60)
        for cfg in (SimConfig(system="sis"), SimConfig(system="sis", sis_rule="cost", mu=5.0, deadline_s=0.01),
                    SimConfig(system="static"), SimConfig(system="mask"), SimConfig(system="mask", static_enc_share=0.7)):
            res = simulate(reqs, gpu, cfg, keep_timeline=True)
            assert all(0 <= s <= gpu.sms and s % gpu.tpc == 0 for _, s in res.timeline)
            assert gpu.sms // 2 < res.peak_sms <= gpu.sms, (cfg.system, cfg.sis_rule, res.peak_sms)
            assert res.unfinished == 0
        assert len(res.timeline) >= 1


def test_twsrft_orders_by_remaining_work_with_aging():
    # Prepare: A arrived first with 4 images (4000 patches), B one of 300, C two of 500
    queue = [(0, 0.00, [(0, 1000), (1, 1000), (2, 1000), (3, 1000)]), (1, 0.01, [(0, 300)]), (2, 0.02, [(0, 500), (1, 500)])]
    # Execute / Assert: shortest remaining first, whole images up to the 2000-patch budget
    assert encoder_batch(queue, 0.05, "twsrft", 2000, beta=0.0) == [(1, 0), (2, 0), (2, 1)]
    assert encoder_batch(queue, 0.05, "srpt", 2000, beta=0.0) == [(1, 0), (2, 0), (2, 1)]
    # FCFS (the released scheduler): the oldest request alone, within the budget
    assert encoder_batch(queue, 0.05, "fcfs", 2000, beta=0.0) == [(0, 0), (0, 1)]
    # aging: r - beta * wait puts the long-waiting A first once beta is large
    assert encoder_batch(queue, 0.05, "twsrft", 2000, beta=1e6) == [(0, 0), (0, 1)]
    # an image larger than the budget still runs alone
    assert encoder_batch([(5, 0.0, [(0, 3000)])], 0.0, "twsrft", 2000, beta=0.0) == [(5, 0)]


def test_every_system_serves_every_request_and_prefills_after_encoding(gpu):
    reqs = stream(2, 10.0, 50)
    for system, order in [("tm", "fcfs"), ("static", "fcfs"), ("mask", "fcfs"), ("sis", "fcfs"), ("sis", "twsrft")]:
        res = simulate(reqs, gpu, SimConfig(system=system, encoder_order=order))
        assert np.all(np.isfinite(res.ttft)) and np.all(np.isfinite(res.tpot)), system
        assert res.tokens == sum(r.out_tokens for r in reqs)
        # the first token comes after the request's last image is encoded
        assert np.all(res.ttft >= res.enc_completion - 1e-12), system


def test_released_mask_leaves_the_decoder_unmasked(gpu):
    # Prepare: one stream, the encoder at the same 30% share as a hard split and as the released code's mask
    reqs = stream(3, 10.0, 80)

    # Execute
    split = simulate(reqs, gpu, SimConfig(system="static", encoder_order="fcfs"))
    mask = simulate(reqs, gpu, SimConfig(system="mask", encoder_order="fcfs"))
    alone = simulate(reqs[:1], gpu, SimConfig(system="mask", encoder_order="fcfs"))
    alone_sis = simulate(reqs[:1], gpu, SimConfig(system="sis", encoder_order="fcfs"))

    # Assert: the same encoder share (its kernels never take more than the mask) ...
    assert mask.enc_sm_share <= 0.3 + 1e-9 and split.enc_sm_share <= 0.3 + 1e-9
    # ... but the unmasked decoder takes what the encoder leaves: every decode step of a request served
    # alone runs on the whole GPU (the encoder is done before its prefill), as under SIS with nothing to encode
    assert alone.tpot[0] == pytest.approx(alone_sis.tpot[0], rel=1e-12)
    # while the hard split caps the decoder at 70% even with the encoder idle: slower decode under load
    assert np.mean(mask.tpot) < np.mean(split.tpot)


def test_technique_load_curve_and_bad_input():
    p = SpaceServeParams(system="sis", rates=[2.0, 10.0], rate=10.0, n_requests=20)
    r = run_spaceserve(p, RunContext(seed=0))
    for k in ("mean_tpot_s", "p99_tpot_s", "mean_ttft_s", "encoder_completion_s", "mean_tpot_s_r2", "dec_sat_share"):
        assert math.isfinite(r.metrics[k]), k
    assert r.metrics["mean_tpot_s"] == r.metrics["mean_tpot_s_r10"]
    xs, ys = r.series_xy("mean_tpot_vs_rate")
    assert list(xs) == [2.0, 10.0] and xs.name == "arrival rate (req/s)"
    for bad, key in [({"rate": 7.0}, "rate"), ({"rates": []}, "rates"),
                     ({"enc_budget": 100}, "enc_budget"), ({"gpu_overrides": {"nope": 1}}, "gpu_overrides"),
                     ({"image_probs": [0.5, 0.5, 0.5]}, "image_probs"), ({"gpu_overrides": {"gamma": "x"}}, "gpu_overrides.gamma"),
                     ({"gpu_overrides": {"sms": 107}}, "gpu_overrides.sms")]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            SpaceServeParams(**bad).check()


def test_spaceserve_debug_flavour(run_experiment, mlflow_client):
    o = run_experiment("spaceserve")
    assert not o.failed, {n: v.error[-500:] for n, v in o.variants.items() if v.status != "FINISHED"}
    for c in o.claims:
        assert not c.error, (c.name, c.error)
    m = {n: v.result.metrics for n, v in o.variants.items()}
    assert m["tm"]["enc_stall_share"] > 0 and m["spaceserve"]["enc_stall_share"] == 0
    plots = {a.path for a in mlflow_client.list_artifacts(o.parent_run_id, "plots")}
    assert any("tpot_vs_rate" in p for p in plots), plots


def test_twsrft_in_the_simulator_hand_trace(gpu):
    # Prepare: A (4 x 1280 patches) alone at t=0, then B (4 x 1280) and the small C (256) while A encodes
    reqs = [Request(0, 0.0, [1280] * 4, 50, 3), Request(1, 0.001, [1280] * 4, 50, 3), Request(2, 0.002, [256], 50, 3)]
    cfg = dict(system="static", enc_budget=5120)
    tw = simulate(reqs, gpu, SimConfig(encoder_order="twsrft", beta=0.0, **cfg)).enc_completion
    fc = simulate(reqs, gpu, SimConfig(encoder_order="fcfs", **cfg)).enc_completion
    # Assert: after A, TWSRFT serves the shortest (C) first; FCFS serves B (older) first
    assert tw[2] < tw[1] and fc[2] > fc[1]
    assert tw[0] == pytest.approx(fc[0])                      # A was alone in the first batch either way


def test_twsrft_forms_batches_once_per_window(gpu):
    # Prepare: two small requests 5 ms apart on an idle GPU; A's encoding takes ~1 ms
    reqs = [Request(0, 0.0, [256], 50, 3), Request(1, 0.005, [256], 50, 3)]
    tw = simulate(reqs, gpu, SimConfig(system="sis", encoder_order="twsrft", window_s=0.03)).enc_completion
    sr = simulate(reqs, gpu, SimConfig(system="sis", encoder_order="srpt")).enc_completion
    # Assert: TWSRFT's second decision waits for the window (t >= 30 ms); SRPT starts B on arrival
    assert tw[1] + reqs[1].arrival >= 0.03 and sr[1] + reqs[1].arrival < 0.03
