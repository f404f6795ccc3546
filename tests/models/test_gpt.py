"""The shared tiny GPT: cached decoding equals the full forward pass; bad configs fail clearly."""
import pytest
import torch

from components.core import registry
from components.core.errors import ConfigError
from components.models.gpt import GPT, SIZES, GPTConfig, PreLNBlock


def _model(**kw):
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=11, **{**SIZES["debug"], **kw}))
    m.eval()
    return m


@pytest.mark.parametrize("n_layer", [1, 3])
def test_incremental_cache_matches_full_forward(n_layer):
    m = _model(n_layer=n_layer)
    idx = torch.randint(0, 11, (2, 20))
    full = m(idx)
    cache = m.new_cache()
    pieces = [m(idx[:, :7], cache=cache), m(idx[:, 7:8], cache=cache), m(idx[:, 8:20], cache=cache)]
    assert cache.length == 20
    assert torch.allclose(torch.cat(pieces, 1), full, atol=1e-5)


def test_crop_rolls_back_the_cache():
    m = _model(n_layer=2)
    idx = torch.randint(0, 11, (1, 12))
    cache = m.new_cache()
    m(idx[:, :10], cache=cache)
    cache.crop(6)
    assert cache.length == 6
    tail = m(idx[:, 6:12], cache=cache)
    assert torch.allclose(tail, m(idx)[:, 6:12], atol=1e-5)


def test_generate_is_greedy_argmax_of_the_full_model():
    m = _model()
    prompt = [1, 2, 3, 4]
    out = m.generate(prompt, max_new=8)
    seq = list(prompt)
    for _ in range(8):
        seq.append(int(m(torch.tensor([seq]))[0, -1].argmax()))
    assert out == seq[len(prompt):]
    # a stop token ends generation and is included
    assert m.generate(prompt, max_new=8, stop={out[2]})[-1] == out[2]


def test_context_overflow_and_bad_config_are_clear_errors():
    m = _model()
    with pytest.raises(ValueError, match="exceeds the model's context"):
        m(torch.zeros(1, SIZES["debug"]["context"] + 1, dtype=torch.long))
    with pytest.raises(ConfigError, match="n_head"):
        GPTConfig(vocab_size=11, d_model=30, n_head=4).check()
    with pytest.raises(ConfigError, match="block") as e:
        GPTConfig(vocab_size=11, block="nope").check()
    assert "pre_ln" in str(e.value)                      # the error names the registered blocks


def test_loss_mask_restricts_the_loss_and_variant_blocks_plug_in(monkeypatch):
    m = _model()
    idx, tgt = torch.randint(0, 11, (2, 10)), torch.randint(0, 11, (2, 10))
    mask = torch.zeros(2, 10)
    mask[:, 5:] = 1
    _, masked = m(idx, tgt, loss_mask=mask)
    logits = m(idx)
    ref = torch.nn.functional.cross_entropy(logits[:, 5:].reshape(-1, 11), tgt[:, 5:].reshape(-1))
    assert torch.allclose(masked, ref, atol=1e-6)

    calls = []
    monkeypatch.setitem(registry._REGISTRY, "block", dict(registry._REGISTRY["block"]))  # undone after the test

    @registry.register("block", "_test_counting")
    def counting(cfg, layer):
        calls.append(layer)
        return PreLNBlock(cfg, layer)

    _model(block="_test_counting", n_layer=3)
    assert calls == [0, 1, 2]
