"""The SpecReason loop: judge scoring, the exact fallback limits, and the debug experiment end to end."""
from __future__ import annotations

import math

import pytest
import torch

from components.data import reasoning as R
from components.models.gpt import GPT, GPTConfig
from components.serving.cost import Usage
from components.serving.specreason.loop import SpecReasonConfig, judge_score, spec_reason
from components.serving.specreason.session import LMSession

CTX = 64


def _model(seed: int, n_layer: int, d: int) -> GPT:
    torch.manual_seed(seed)
    m = GPT(GPTConfig(vocab_size=len(R.ALPHABET), n_layer=n_layer, n_head=2, d_model=d, context=CTX))
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(8.0)
    return m.double().eval()


@pytest.fixture(scope="module")
def pair():
    return _model(3, 1, 16), _model(4, 2, 32)


PROMPTS = ["17|+1|*9|-7>", "05|-3|*7|+2|*4>", "88|*2>"]


def _run(small, base, prompt, **kw):
    usage = Usage()
    cfg = SpecReasonConfig(max_tokens=40, repeat_guard=False, **kw).check()
    tr = spec_reason(LMSession(small, "small", usage), LMSession(base, "base", usage), prompt, cfg, CTX,
                     R.Problem.parse(R.decode(prompt)), seed=1)
    return tr, usage


@pytest.mark.parametrize("scoring", ["greedy", "average", "loglik"])
@pytest.mark.parametrize("stack_sd", [False, True])
def test_threshold_above_max_score_equals_base_only(pair, scoring, stack_sd):
    small, base = pair
    for text in PROMPTS:
        prompt = R.encode(text)
        tr, usage = _run(small, base, prompt, threshold=10.0, scoring=scoring, stack_sd=stack_sd)
        ref = base.generate(prompt, 40, stop={R.STOP_ID})
        assert tr.text == R.decode(ref)
        assert tr.judged and not any(r.accepted for r in tr.judged) and set(tr.sources) == {"base"}
        assert all(0.0 <= r.score <= 9.0 for r in tr.judged)
        if not stack_sd:   # every base token was decoded by the base model itself
            assert usage.decode["base"] == len(ref) + (len(tr.judged) if scoring != "loglik" else 0)


def test_threshold_zero_keeps_every_small_step(pair):
    small, base = pair
    prompt = R.encode(PROMPTS[0])
    tr, usage = _run(small, base, prompt, threshold=0.0, small_temperature=0.0)
    assert set(tr.sources) == {"small"} and all(r.accepted for r in tr.judged)
    assert tr.text == R.decode(small.generate(prompt, 40, stop={R.STOP_ID}))
    assert usage.decode["base"] == len(tr.judged)          # the judge: one scoring decode per step


def test_first_n_steps_come_from_the_base_model(pair):
    small, base = pair
    tr, _ = _run(small, base, R.encode(PROMPTS[1]), threshold=0.0, first_n=2)
    assert tr.sources[:2] == ["base", "base"] and set(tr.sources[2:]) <= {"small"}


def test_judge_scores_follow_the_paper():
    logits = torch.full((len(R.ALPHABET),), -20.0)
    logits[R.DIGIT_IDS[9]], logits[R.DIGIT_IDS[1]] = 2.0, 2.0 - math.log(3.0)   # p(9)=3/4, p(1)=1/4
    assert judge_score(logits, "greedy") == 9.0
    assert judge_score(logits, "average") == pytest.approx(0.75 * 9 + 0.25 * 1, abs=1e-6)
    logits[R.ALPHABET.index("A")] = 5.0                     # a non-digit argmax is a reject
    assert judge_score(logits, "greedy") == 0.0
    assert judge_score(logits, "average") == pytest.approx(7.0, abs=1e-6)   # digits in the top-10 renormalised


def test_debug_experiment_end_to_end(run_experiment, mlflow_client):
    out = run_experiment("specreason")
    assert not out.failed, {n: out.variants[n].error[:500] for n in out.failed}
    assert {"base_only", "small_only", "sd", "sr_t3", "sr_t7", "sr_t9", "sr_sd_t7"} <= set(out.variants)
    children = mlflow_client.search_runs([out.experiment_id], f"tags.mlflow.parentRunId = '{out.parent_run_id}'")
    assert {c.data.tags["variant"] for c in children} == set(out.variants)
    for v in out.variants.values():
        m = v.result.metrics
        for k in ("accuracy", "sim_latency_s", "wall_s", "base_tokens", "small_tokens"):
            assert k in m and math.isfinite(m[k]), (v.name, k)
    m = {n: v.result.metrics for n, v in out.variants.items()}
    assert m["sd"]["matches_base"] == 1.0 and m["sd"]["accuracy"] == m["base_only"]["accuracy"]
    assert m["small_only"]["base_tokens"] == 0 and m["base_only"]["small_tokens"] == 0
    for n in ("sr_t3", "sr_t7", "sr_sd_t7"):
        assert 0 <= m[n]["acceptance_rate"] <= 1 and m[n]["judged_steps"] > 0
    assert {c.name for c in out.claims} >= {"speedup_with_little_accuracy_loss", "threshold_raises_fallbacks",
                                            "stacking_beats_sd", "semantic_beats_token_acceptance"}
    undefined_auroc = not math.isfinite(m["sr_t7"]["judge_auroc"])   # tiny S: every judged step one class
    for c in out.claims:   # computed (true or false) from this run's metrics, never an evaluation error
        assert not c.error or (c.name == "judge_separates_steps" and undefined_auroc), (c.name, c.error)


@pytest.mark.parametrize("override, key", [
    ("++experiment.variants.sr_t7.params.threshold=12", "threshold"),
    ("++experiment.variants.sr_t7.params.scoring=vote", "scoring"),
    ("++experiment.variants.sd.params.gamma=0", "gamma"),
    ("experiment.common.specreason.n_problems=5000", "n_problems"),
])
def test_bad_config_is_a_config_error_before_ray(override, key):
    from components.core.errors import ConfigError
    from pipelines import config, dag

    cfg = config.compose(["experiment=specreason", override])
    with pytest.raises(ConfigError) as e:
        dag.validate(cfg)
    assert key in str(e.value)
