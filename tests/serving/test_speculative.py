"""Token-level speculative decoding returns exactly the base model's greedy output."""
from __future__ import annotations

import pytest
import torch

from components.data import reasoning as R
from components.models.gpt import GPT, GPTConfig
from components.serving.cost import Usage
from components.serving.specreason.session import LMSession
from components.serving.speculative import speculative_generate


def _model(seed: int, n_layer: int, d: int, context: int = 48) -> GPT:
    torch.manual_seed(seed)
    m = GPT(GPTConfig(vocab_size=len(R.ALPHABET), n_layer=n_layer, n_head=2, d_model=d, context=context))
    with torch.no_grad():  # larger weights than the default init: peaked, varied greedy choices
        for p in m.parameters():
            p.mul_(8.0)
    return m.double().eval()


@pytest.fixture(scope="module")
def pair():
    return _model(1, 1, 16), _model(2, 2, 32)


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_sd_equals_base_greedy(pair, gamma):
    small, base = pair
    for i, text in enumerate(["17|+1|*9>", "05|-3|*7|+2|*4>", "9", "42|*2>17+1=18\n"]):
        prompt = R.encode(text)
        ref = base.generate(prompt, 30, stop={R.STOP_ID})
        usage = Usage()
        out, st = speculative_generate(LMSession(small, "small", usage), LMSession(base, "base", usage), prompt,
                                       30, {R.STOP_ID}, gamma, base.cfg.context)
        assert out == ref
        assert st.drafted > 0 and 0 <= st.accepted <= st.drafted
        # every round the base model emits one token of its own and decodes nothing else
        assert usage.decode["base"] == st.rounds
        assert usage.decode["small"] == st.drafted


def test_sd_with_sampled_drafts_and_context_cap(pair):
    small, base = pair
    prompt = R.encode("17|+1|*9|-7|+3|*2|-6>17+1=18\n18*9=62\n")   # 40 of 48 context tokens
    ref = base.generate(prompt, base.cfg.context - len(prompt))   # sessions keep the whole output in context
    out, _ = speculative_generate(LMSession(small, "small"), LMSession(base, "base"), prompt, 100, set(), 4,
                                  base.cfg.context, draft_temperature=1.0, seed=3)
    assert out == ref and len(prompt) + len(out) == base.cfg.context


def test_sd_accepts_everything_when_draft_is_the_base(pair):
    _, base = pair
    prompt = R.encode("17|+1>")
    out, st = speculative_generate(LMSession(base, "a"), LMSession(base, "b"), prompt, 20, set(), 4)
    assert out == base.generate(prompt, 20)
    assert st.accepted == st.drafted and st.rounds == 4   # 4 rounds x (4 drafted + 1 bonus)


def test_session_reuses_prefix_and_counts_tokens(pair):
    _, base = pair
    usage = Usage()
    s = LMSession(base, "base", usage)
    p = R.encode("17|+1|*9>")
    a = s.generate(p, 5)
    assert usage.prefill["base"] == len(p) and usage.decode["base"] == 5
    b = s.generate(p + a, 3)                                # only the last emitted token is new
    assert usage.prefill["base"] == len(p) + 1
    assert a + b == base.generate(p, 8)
    s.generate(p, 2)                                        # back to a shorter prefix: crop, re-feed 1 token
    assert usage.prefill["base"] == len(p) + 2
