"""Gatekeeper: the loss by hand, its gradient, the deferral metrics, and the arms' fairness."""
import math

import numpy as np
import pytest
import torch

from components.core.context import RunContext
from components.core.errors import ConfigError
from components.serving.gatekeeper import metrics as M
from components.serving.gatekeeper.loss import gatekeeper_loss, kl_to_uniform


def _batch():
    # rows: p = (0.7, 0.2, 0.1) correct (target 0); the same p wrong (target 1); uniform, wrong (target 2)
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1], [0.7, 0.2, 0.1], [1 / 3, 1 / 3, 1 / 3]]))
    return logits, torch.tensor([0, 1, 2])


def test_loss_matches_hand_computed_value():
    logits, target = _batch()
    # L_corr = -ln 0.7 / 3 = 0.118891; KL((.7,.2,.1) || U) = .7 ln 2.1 + .2 ln .6 + .1 ln .3 = 0.296794
    # L_incorr = (0.296794 + 0) / 3 = 0.098931; L = 0.3 * 0.118891 + 0.7 * 0.098931 = 0.104919
    got = gatekeeper_loss(logits, target, alpha=0.3).item()
    assert got == pytest.approx(0.104919, abs=2e-6)
    kl = 0.7 * math.log(2.1) + 0.2 * math.log(0.6) + 0.1 * math.log(0.3)
    assert got == pytest.approx(0.3 * -math.log(0.7) / 3 + 0.7 * kl / 3, rel=1e-6)


def test_both_terms_divide_by_full_batch_and_mask_sets_n():
    logits, target = _batch()
    only_correct = gatekeeper_loss(logits[:1], target[:1], alpha=0.5).item()
    assert only_correct == pytest.approx(0.5 * -math.log(0.7), rel=1e-6)          # N = 1
    # per-token shape (B, T, K) with a mask: the masked row does not count in N
    lt = logits.reshape(1, 3, 3)
    mask = torch.tensor([[True, True, False]])
    got = gatekeeper_loss(lt, target.reshape(1, 3), alpha=0.5, mask=mask).item()
    kl = kl_to_uniform(torch.log(torch.tensor([0.7, 0.2, 0.1]))).item()
    assert got == pytest.approx(0.5 * -math.log(0.7) / 2 + 0.5 * kl / 2, rel=1e-6)
    empty = gatekeeper_loss(lt, target.reshape(1, 3), alpha=0.5, mask=torch.zeros(1, 3, dtype=torch.bool))
    assert empty.item() == 0.0 and torch.isfinite(empty)


def test_kl_direction_is_p_to_uniform():
    logp = torch.log(torch.tensor([0.5, 0.25, 0.25]))
    entropy = -(logp.exp() * logp).sum()
    assert kl_to_uniform(logp).item() == pytest.approx(math.log(3) - entropy.item(), rel=1e-6)


def test_gradient_pushes_wrong_predictions_toward_uniform_and_correct_toward_target():
    # float64: the loss is a mean over 64 rows, so one step moves each row's KL by ~1e-4, which float32
    # resolves on one CPU and rounds to a tie on another (seen on an AVX2 host)
    torch.manual_seed(0)
    logits = torch.randn(64, 10, dtype=torch.float64) * 3
    target = torch.randint(0, 10, (64,))
    wrong = logits.argmax(1) != target
    assert wrong.any() and (~wrong).any()
    z = logits.clone().requires_grad_(True)
    gatekeeper_loss(z, target, alpha=0.5).backward()
    stepped = (z - 0.5 * z.grad).detach()
    kl0, kl1 = kl_to_uniform(torch.log_softmax(logits, 1)), kl_to_uniform(torch.log_softmax(stepped, 1))
    assert (kl1[wrong] < kl0[wrong]).all()                      # every mistake got flatter
    p0, p1 = torch.softmax(logits, 1), torch.softmax(stepped, 1)
    ok = ~wrong
    assert (p1[ok, target[ok]] > p0[ok, target[ok]]).all()     # correct ones more confident
    assert torch.allclose(z.grad[wrong].sum(1), torch.zeros(int(wrong.sum()), dtype=z.dtype), atol=1e-6)


def test_alpha_must_be_inside_unit_interval():
    logits, target = _batch()
    for a in (0.0, 1.0, -0.1):
        with pytest.raises(ConfigError):
            gatekeeper_loss(logits, target, alpha=a)


def test_deferral_curves_and_scores():
    rng = np.random.default_rng(0)
    small_ok = rng.random(400) < 0.8
    large_ok = np.where(small_ok, rng.random(400) < 0.97, rng.random(400) < 0.8)
    oracle = small_ok + 0.01 * rng.random(400)                   # confidence that knows the answer
    c = M.deferral_curves(oracle, small_ok, large_ok)
    assert c["real"][0] == pytest.approx(small_ok.mean()) and c["real"][-1] == pytest.approx(large_ok.mean())
    assert c["random"][0] == pytest.approx(small_ok.mean()) and c["random"][-1] == pytest.approx(large_ok.mean())
    assert np.all(c["ideal"] >= c["real"] - 1e-12) and c["ideal"].max() >= c["real"].max()
    assert 0.5 < M.deferral_performance(c) < 1.0
    # confidence in the ideal order (small mistakes the large model fixes first) scores exactly 1
    perfect = 2.0 * small_ok + ~large_ok + 0.01 * rng.random(400)
    assert M.deferral_performance(M.deferral_curves(perfect, small_ok, large_ok)) == pytest.approx(1.0)
    anti = M.deferral_performance(M.deferral_curves(-oracle, small_ok, large_ok))
    noise = M.deferral_performance(M.deferral_curves(rng.random(400), small_ok, large_ok))
    assert anti < -0.5 and abs(noise) < 0.25
    assert M.auroc(oracle, small_ok) == 1.0 and M.overlap(oracle, small_ok) == 0.0
    assert M.auroc(-oracle, small_ok) == 0.0 and M.overlap(np.full(400, 0.5), small_ok) == pytest.approx(1.0)
    both = np.ones(400, bool)           # nothing to gain from any order: s_d undefined
    assert math.isnan(M.deferral_performance(M.deferral_curves(oracle, both, both)))


def test_calibration_metrics_by_hand():
    # correct items g = 0.95, 0.65, 0.62; wrong items g = 0.90, 0.25
    conf = np.array([0.95, 0.90, 0.65, 0.62, 0.25])
    ok = np.array([True, False, True, True, False])
    # 15 bins of width 1/15: 0.95 -> bin 14, 0.90 -> 13, 0.65 and 0.62 -> 9, 0.25 -> 3
    # ECE = (|1 - .95| + |0 - .9| + 2 |1 - .635| + |0 - .25|) / 5 = (.05 + .9 + .73 + .25) / 5 = 0.386
    assert M.ece(conf, ok) == pytest.approx(0.386, abs=1e-12)
    # 5 bins of width 0.2: {.95, .90} -> bin 4 (acc .5, conf .925), {.65, .62} -> 3, .25 -> 1
    # ECE = (2 * .425 + 2 * .365 + .25) / 5 = 0.366
    assert M.ece(conf, ok, bins=5) == pytest.approx(0.366, abs=1e-12)
    # mean g - accuracy = 3.37 / 5 - 3 / 5 = 0.074 (over-confident)
    assert M.overconfidence(conf, ok) == pytest.approx(0.074, abs=1e-12)
    # AUROC: 4 of the 6 (correct, wrong) pairs ranked right (.95 > .9, .25; .65 > .25; .62 > .25)
    assert M.auroc(conf, ok) == pytest.approx(4 / 6)
    # g == 1 falls in the top bin; a calibrated confidence has ECE 0, an under-confident one a negative gap
    assert M.ece(np.array([1.0, 1.0]), np.array([True, True])) == 0.0
    assert M.overconfidence(np.full(4, 0.5), np.array([True, True, True, False])) == pytest.approx(-0.25)
    rep = M.evaluate_cascade(conf, conf, ok, np.ones(5, bool))
    m = rep.metrics(1.0, 10.0)
    assert m["ece"] == pytest.approx(0.386) and m["overconf"] == pytest.approx(0.074) and m["auroc"] == pytest.approx(4 / 6)
    # ECE and the gap measure ``calib_test`` when g is not a probability (e.g. negative entropy)
    other = M.evaluate_cascade(-conf, -conf, ok, np.ones(5, bool), calib_test=conf)
    assert other.ece == pytest.approx(0.386) and other.auroc == pytest.approx(0.0 + 2 / 6)


def test_threshold_from_validation_hits_target_ratio():
    conf = np.linspace(0, 1, 1000)
    for r in (0.1, 0.2, 0.3):
        assert (conf < M.threshold_for_ratio(conf, r)).mean() == pytest.approx(r, abs=2e-3)
    rep = M.evaluate_cascade(conf, conf, conf > 0.2, np.ones(1000, bool))
    assert rep.joint_acc[0.2] == pytest.approx(1.0, abs=2e-3) and rep.deferral[0.2] == pytest.approx(0.2, abs=2e-3)


@pytest.fixture(scope="module")
def tiny_prep():
    from components.serving.gatekeeper.prepare import DigitsCascadeParams, prepare_digits_cascade

    return prepare_digits_cascade(DigitsCascadeParams(small_epochs=5, large_epochs=2), RunContext(seed=0))


def test_prepare_is_built_for_the_calls_seed(tiny_prep):
    from components.serving.gatekeeper.prepare import DigitsCascadeParams, prepare_digits_cascade

    other = prepare_digits_cascade(DigitsCascadeParams(small_epochs=1, large_epochs=1), RunContext(seed=1))
    assert tiny_prep["seed"] == 0 and other["seed"] == 1
    assert not np.array_equal(tiny_prep["split"].x_test, other["split"].x_test)


def test_settings_that_differ_only_in_the_small_model_share_one_large_model(tiny_prep):
    from components.serving.gatekeeper.prepare import DigitsCascadeParams, prepare_digits_cascade

    # Execute: the *_overconf setting's small model (wider, longer stage 1) on the same seed and large-model params
    wide = prepare_digits_cascade(DigitsCascadeParams(small_hidden=32, small_epochs=1, large_epochs=2), RunContext(seed=0))
    # Assert: the same large CNN, weight for weight, and a different small model
    assert all(torch.equal(a, wide["large_state"][k]) for k, a in tiny_prep["large_state"].items())
    assert tiny_prep["small_state"]["net.0.weight"].shape != wide["small_state"]["net.0.weight"].shape


def test_arms_share_one_schedule(tiny_prep):
    from components.serving.gatekeeper.technique import (BaselineParams, GatekeeperParams, SweepParams,
                                                         run_alpha_sweep, run_cascade_baseline, run_gatekeeper)

    ctx = RunContext(seed=0, inputs={"digits": tiny_prep})
    gk = run_gatekeeper(GatekeeperParams(epochs=2, alpha=0.3), ctx)
    ce = run_cascade_baseline(BaselineParams(epochs=2, method="ce_continued"), ctx)
    again = run_cascade_baseline(BaselineParams(epochs=2, method="ce_continued"), ctx)
    ts = run_cascade_baseline(BaselineParams(epochs=2, method="temperature"), ctx)
    # one seed's arm is deterministic, so the DAG's per-seed pairing of variants is sound
    assert [again.metrics[k] for k in ("s_d", "auroc", "small_acc")] == [ce.metrics[k] for k in ("s_d", "auroc", "small_acc")]
    assert gk.metrics["s_d"] != ce.metrics["s_d"] or gk.metrics["small_acc"] != ce.metrics["small_acc"]   # the loss matters
    # temperature scaling never changes the argmax
    assert ts.metrics["small_acc"] == ce.metrics["small_acc"] and ts.metrics["temperature"] != 1.0
    for k in ("s_d", "s_o", "auroc", "small_acc", "joint_acc_r20", "cost_rel_r20"):
        assert math.isfinite(gk.metrics[k]), k
    assert "plots/deferral_curves.png" in gk.files and len(gk.series["acc_vs_deferral"][0]) == len(tiny_prep["split"].y_test) + 1
    # the sweep's arm at an alpha is the gatekeeper technique at that alpha; the pick is among alphas <= 0.5
    sw = run_alpha_sweep(SweepParams(epochs=2, alphas=[0.1, 0.3, 0.9]), ctx)
    assert sw.metrics["s_d_a30"] == gk.metrics["s_d"] and sw.metrics["small_acc_a30"] == gk.metrics["small_acc"]
    best = sw.metrics["best_alpha"]
    assert best in (0.1, 0.3) and sw.metrics["best_s_d"] == sw.metrics[f"s_d_a{int(round(100 * best)):02d}"]
    assert -1 <= sw.metrics["spearman_s_d"] <= 1 and "plots/alpha_tradeoff.png" in sw.files


def test_fresh_noise_stage2_is_deterministic_and_shared(tiny_prep):
    from components.serving.gatekeeper.cascade import Stage2, evaluate_arm

    fixed, _, _ = evaluate_arm(tiny_prep, "ce_continued", Stage2(epochs=2))
    fresh, _, _ = evaluate_arm(tiny_prep, "ce_continued", Stage2(epochs=2, fresh_noise=True))
    again, _, _ = evaluate_arm(tiny_prep, "ce_continued", Stage2(epochs=2, fresh_noise=True))
    keys = ("s_d", "auroc", "ece", "overconf", "small_acc", "joint_acc_r20")
    assert [fresh[k] for k in keys] == [again[k] for k in keys]    # one seed's arm stays deterministic
    assert fresh["small_acc"] != fixed["small_acc"] or fresh["s_d"] != fixed["s_d"]
    for k in ("ece", "overconf", "auroc"):
        assert math.isfinite(fresh[k]) and 0 <= fresh["ece"] <= 1, k
    untuned, _, _ = evaluate_arm(tiny_prep, "untuned", Stage2(epochs=2, fresh_noise=True))
    plain = evaluate_arm(tiny_prep, "untuned", Stage2(epochs=2))[0]
    assert [untuned[k] for k in keys] == [plain[k] for k in keys]          # no stage 2: nothing to redraw


def test_bad_params_are_config_errors():
    from components.serving.gatekeeper.prepare import DigitsCascadeParams
    from components.serving.gatekeeper.technique import GatekeeperParams, SweepParams

    for bad in (lambda: GatekeeperParams(alpha=1.0).check(), lambda: SweepParams(alphas=[0.5, 0.1, 0.9]).check(),
                lambda: DigitsCascadeParams(occlusion=9).check(), lambda: GatekeeperParams(ratios=[1.5]).check()):
        with pytest.raises(ConfigError):
            bad()


def test_lm_batch_masks_exactly_the_solution_tokens():
    from components.data import reasoning as R
    from components.serving.gatekeeper.lm import lm_batch

    x, y, m = lm_batch(np.random.default_rng(0), 4, "medium", excluded=set())
    for i in range(4):
        target_text = R.decode(y[i][m[i]].tolist())
        prompt = R.decode(x[i][: int(np.argmax(m[i].numpy()))].tolist() + [int(x[i][int(np.argmax(m[i].numpy()))])])
        assert prompt.endswith(">") and target_text.endswith(".")
        steps = R.split_steps(target_text)
        assert len(steps) >= 2 and R.is_answer(steps[-1])


def test_lm_cascade_arms_run_on_tiny_models():
    from components.models.gpt import GPT, GPTConfig
    from components.data import reasoning as R
    from components.serving.gatekeeper.lm import LMCascadeParams, greedy_answers, run_gatekeeper_lm
    from components.serving.gatekeeper.large_answers import LargeAnswersParams, prepare_large_answers

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=len(R.ALPHABET), n_layer=1, n_head=2, d_model=16, context=R.max_len("medium"))
    lms = {"level": "medium", "heldout_seed": 12345, "n_heldout": 40}
    for name in ("small", "base"):
        m = GPT(cfg)
        lms[name] = {"config": cfg.to_dict(), "state": m.state_dict(), "stats": {}}
    probs = R.held_out_problems(6)
    out = greedy_answers(GPT(cfg).eval(), probs)
    assert out["ok"].shape == (6,) and np.all((out["conf_mean"] > 0) & (out["conf_mean"] <= 1))
    assert np.all(out["conf_min"] <= out["conf_mean"]) and np.all(out["n_gen"] >= 1)
    large = prepare_large_answers(LargeAnswersParams(n_val=10, n_test=10), RunContext(seed=0, inputs={"lms": lms}))
    res = run_gatekeeper_lm(LMCascadeParams(method="gatekeeper", steps=2, batch=4, n_val=10, n_test=10),
                            RunContext(seed=0, inputs={"lms": lms, "large": large}))
    assert {"small_acc", "large_acc", "s_d", "joint_acc_r20", "cost_rel_r20", "ece", "overconf", "auroc",
            "token_acc", "token_ece", "token_overconf"} <= set(res.metrics)
    assert 0 <= res.metrics["token_acc"] <= 1 and 0 <= res.metrics["token_ece"] <= 1
    assert res.metrics["cost_rel_r20"] > res.metrics["deferral_r20"] > 0     # small always runs, large on deferrals
    # the large model's accuracy is the prepared answers' (the base model decodes the test slice once)
    assert large["ok"].shape == (10,) and res.metrics["large_acc"] == pytest.approx(float(large["ok"].mean()))


def test_experiment_validates_and_lm_form_mix_must_match_prepare():
    from pipelines import config, dag

    dag.validate(config.compose(["experiment=gatekeeper"]))
    with pytest.raises(ConfigError, match="small_style_b"):
        dag.validate(config.compose(["experiment=gatekeeper", "experiment.common.gatekeeper_lm.style_b=0.5"]))
    with pytest.raises(ConfigError, match="alpha"):
        dag.validate(config.compose(["experiment=gatekeeper", "experiment.common.gatekeeper.alpha=1.5"]))
    with pytest.raises(ConfigError, match=r"experiment.prepare.digits_overconf.step='gatekeeper_digits'"):
        dag.validate(config.compose(["experiment=gatekeeper", "++experiment.variants.lm_gatekeeper.inputs={lms: digits_overconf}"]))


def test_lm_validation_reads_the_entry_the_variant_binds():
    # Prepare: lm_* bind input lms to entry lms, lm60_* to lms_mid (no param naming the entry)
    from pipelines import config, dag

    def error(*overrides):
        with pytest.raises(ConfigError) as e:
            dag.validate(config.compose(["experiment=gatekeeper", *overrides]))
        return str(e.value)

    # Execute: change one entry's training mix at a time
    bad_lms = error("experiment.prepare.lms.params.small_style_b=0.3")
    bad_mid = error("experiment.prepare.lms_mid.params.small_style_b=0.3")
    # Assert: each is caught against the entry the variants bind (lm_* first for lms, lm60_* for lms_mid)
    assert "style_b=0.0: 0.3 (" in bad_lms and "prepare lms small_style_b" in bad_lms
    assert "style_b=0.0: 0.3 (" in bad_mid and "prepare lms_mid small_style_b" in bad_mid


def test_lm_arms_read_base_answers_made_from_their_own_models_and_split():
    # Prepare / Execute / Assert: the answers of the other model pair, or of another split, are one line before Ray
    from pipelines import config, dag

    with pytest.raises(ConfigError, match=r"experiment.prepare.large.inputs.lms='lms_mid'"):
        dag.validate(config.compose(["experiment=gatekeeper", "experiment.prepare.large.inputs.lms=lms_mid"]))
    with pytest.raises(ConfigError, match=r"n_test=500: 400 \(prepare large_mid n_test"):
        dag.validate(config.compose(["experiment=gatekeeper", "experiment.prepare.large_mid.params.n_test=400"]))
