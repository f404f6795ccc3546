"""Agentic Plan Caching without Ray: the workload's plans and template induction, the cache's rules,
and the agent policies driven by oracle LMs (exact outputs), so each rule is checked in isolation."""
from types import SimpleNamespace

import numpy as np
import pytest

from components.data import agent_tasks as A
from components.serving.plan_cache.agent import Agent, AgentConfig
from components.serving.plan_cache.cache import PlanCache, induce_template, leaked_literals, normalise_keyword
from components.data.text_embeddings import bow_embed
from components.serving.plan_cache.prepare import CONTEXT, adapt_prompt


class OracleLM:
    """Answers every prompt exactly (keyword, plan, or the given template filled from the question);
    ``shift_year`` makes its plans wrong but executable (a planner error)."""

    cfg = SimpleNamespace(context=CONTEXT)

    def __init__(self, tasks: list, shift_year: bool = False):
        self.by_q, self.shift = {t.question: t for t in tasks}, shift_year

    def generate(self, prompt, max_new, stop=None):
        words = A.decode(prompt).split()[1:]                  # drop <bos>
        marker = next(w for w in words if w in (A.KW, A.TPL, A.PLAN))
        t = self.by_q[" ".join(words[:words.index(marker)])]
        if marker == A.KW:
            out = t.keyword
        elif marker == A.TPL:
            out = A.fill(" ".join(words[words.index(A.TPL) + 1:-1]), t.slots)
        else:
            out = t.plan
        if self.shift and marker != A.KW:
            out = out.replace(t.slots["<Y1>"], "2023" if t.slots["<Y1>"] != "2023" else "2019") if "<Y1>" in t.slots else out
        return A.encode(out) + [A.EOS_ID]


@pytest.fixture(scope="module")
def work():
    return A.make_workload(A.AgentTaskParams(n_requests=150, n_companies=10), seed=0)


def _replay(work, method, large=None, **cfg):
    tasks = A.tasks_of(work)
    models = {"large": large or OracleLM(tasks), "small": OracleLM(tasks)}
    agent = Agent(models, work["tables"], AgentConfig(method=method, **cfg), dim=256)
    vecs = bow_embed(work["questions"])
    outs = [agent.step(q, a, v) for q, a, v in zip(work["questions"], work["answers"], vecs)]
    correct = [A.same_answer(o["answer"], a) for o, a in zip(outs, work["answers"])]
    return agent, outs, np.array(correct)


def test_canonical_plans_execute_and_induce_to_their_template():
    rng = np.random.default_rng(0)
    for k, intent in enumerate(A.INTENTS):
        for _ in range(15):
            t = A.sample_task(rng, k)
            assert A.in_vocab(t.question) and A.in_vocab(t.plan)
            assert A.answer_of(t.plan, A.make_tables(40, 1)) is not None
            task, template = induce_template(t.question, t.plan)
            assert template == intent.template, (t.question, template)
            assert leaked_literals(t.question, template) == []
            assert len(adapt_prompt(t.question, template)) + len(t.plan.split()) + 1 <= CONTEXT


def test_leaked_literal_is_detected():
    t = A.sample_task(np.random.default_rng(1), 0)
    assert leaked_literals(t.question, t.plan) == sorted([t.slots["<C>"], t.slots["<Y1>"]])


def test_keyword_normalisation_and_cache_rules():
    assert normalise_keyword("  Current-Ratio (liquidity)  ") == "current ratio"
    c = PlanCache(capacity=2)
    c.put("a", "t", "x")
    c.put("A.", "t", "y")                                # same key: last writer wins, still one entry
    assert len(c) == 1 and c.get("a")["template"] == "y"
    c.put("b", "t", "z")
    c.get("a")                                           # a is now most recently used
    c.put("c", "t", "w")
    assert c.get("b") is None and c.get("a") is not None and c.evictions == 1


def test_apc_misses_once_per_intent_then_adapts(work):
    agent, outs, correct = _replay(work, "apc")
    first = {i: work["intents"].index(i) for i in set(work["intents"])}
    hits = np.array([o["hit"] for o in outs])
    assert correct.all()
    assert not hits[list(first.values())].any() and hits.sum() == len(outs) - len(first)
    assert sum(o["usage"].calls.get("large", 0) for o in outs) == len(first) == len(agent.cache)


def test_unverified_runs_are_not_cached_but_executes_policy_poisons(work):
    tasks = A.tasks_of(work)
    agent, outs, correct = _replay(work, "apc", large=OracleLM(tasks, shift_year=True))
    unshifted = {A.INTENTS[i].keyword for i in work["intents"] if A.INTENTS[i].pattern == "c"}  # no year to shift
    assert set(agent.cache.entries) == unshifted                       # L's wrong plans were never admitted
    assert all(correct[i] for i, o in enumerate(outs) if o["hit"])
    agent, outs, correct = _replay(work, "apc", large=OracleLM(tasks, shift_year=True), insert_if="executes")
    assert len(agent.cache) > 0 and any(o["hit"] for o in outs)


def test_answer_cache_reuses_answers_across_entities(work):
    agent, outs, correct = _replay(work, "answer_cache", sim_threshold=0.7)
    hit_correct = [c for o, c in zip(outs, correct) if o["hit"]]
    assert hit_correct and np.mean(hit_correct) < 0.5          # a cached answer of another entity is wrong
    assert all(not o["usage"].calls for o in outs if o["hit"])  # a hit calls no LM


def test_query_plan_cache_reuses_templates_or_plans(work):
    _, outs_a, corr_a = _replay(work, "query_plan_cache", sim_threshold=0.7, reuse="adapt")
    _, outs_v, corr_v = _replay(work, "query_plan_cache", sim_threshold=0.7, reuse="verbatim")
    assert any(o["hit"] for o in outs_a) and corr_v.mean() < corr_a.mean()


def test_replay_prices_every_call_against_the_large_reference(work, monkeypatch):
    from components.core.context import RunContext
    from components.models.gpt import GPT, GPTConfig
    from components.serving.plan_cache import technique as T

    tasks = A.tasks_of(work)
    monkeypatch.setattr(T, "load_models", lambda lms: {"large": OracleLM(tasks), "small": OracleLM(tasks)})
    lms = {n: {"config": GPT(GPTConfig(vocab_size=len(A.VOCAB), context=CONTEXT, n_layer=1, n_head=2, d_model=d)).cfg.to_dict(),
               "stats": {}} for n, d in (("large", 64), ("small", 16))}
    ctx = RunContext(inputs={"tasks": work, "lms": lms})
    large = T.run_agent_baseline(T.BaselineParams(method="large"), ctx).metrics
    apc = T.run_plan_cache(T.APCParams(), ctx).metrics
    assert large["accuracy"] == 1.0 and large["cost_ratio_vs_large"] == pytest.approx(1.0)   # oracle L = reference
    assert large["cache_hit_ratio"] == 0.0 and large["large_calls"] == len(tasks)
    n_intents = len(set(work["intents"]))
    assert apc["large_calls"] == n_intents and apc["small_calls"] == 2 * len(tasks) - n_intents
    assert apc["cache_hit_ratio"] == pytest.approx(1 - n_intents / len(tasks))
    assert 0 < apc["overhead_share"] < 1 and apc["cost_ratio_vs_large"] < 1 and apc["leaked_templates"] == 0
