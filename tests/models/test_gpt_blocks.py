"""GPT blocks of the registry beside ``pre_ln``: the GPT-J parallel block, FAL and FAL+ (their
equations written out by hand), where FAL's later MLPs read from, the KV cache with the first-attention
signal, copies of a model, and the parameter counts."""
import copy
import pickle

import pytest
import torch
from torch.nn import functional as F

from components.core.errors import ConfigError
from components.models.gpt import GPT, GPTConfig

BLOCKS = ("pre_ln", "parallel", "fal", "fal_plus")


def _model(block, n_layer=3, seed=0):
    torch.manual_seed(seed)
    m = GPT(GPTConfig(vocab_size=23, n_layer=n_layer, n_head=2, d_model=16, context=24, block=block))
    with torch.no_grad():                      # LayerNorms and biases off their identity init
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return m.eval()


def _by_hand(m, idx):
    """The blocks' equations from the sheet, on the model's own parameters."""
    kind = m.cfg.block
    x = m.tok(idx) + m.pos(torch.arange(idx.shape[1]))
    a1 = None
    for i, b in enumerate(m.blocks):
        attn = lambda h: b.attn(h, i)            # noqa: E731
        a = attn(b.ln1(x))
        if kind == "pre_ln" or i == 0 and kind in ("fal", "fal_plus"):
            if i == 0 and kind == "fal":
                a1 = a
            if i == 0 and kind == "fal_plus":
                a1 = b.ln_first(a)
            h = x + a
            x = h + b.mlp(b.ln2(h))
        elif kind == "parallel":
            x = x + a + b.mlp(b.ln2(x))
        elif kind == "fal":
            x = x + a + b.mlp(b.ln2(x + a1))
        else:
            h = x + a
            x = h + b.mlp(b.ln2(h + a1))
    return F.linear(m.ln_f(x), m.tok.weight)


@pytest.mark.parametrize("block", BLOCKS)
def test_each_block_computes_its_equation(block):
    # Prepare: a 3-layer model of the block, random tokens
    m = _model(block)
    idx = torch.randint(0, 23, (2, 24), generator=torch.Generator().manual_seed(1))
    # Execute: the model, and the sheet's equations by hand
    got, want = m(idx), _by_hand(m, idx)
    # Assert: equal
    assert torch.allclose(got, want, atol=1e-6)


def test_fal_later_mlps_read_the_first_attention_not_their_own():
    # Prepare: record the MLP input of layer 2 for every block kind
    idx = torch.randint(0, 23, (2, 24), generator=torch.Generator().manual_seed(2))
    seen = {}
    for block in BLOCKS:
        m = _model(block)
        ins = []
        m.blocks[2].mlp.register_forward_pre_hook(lambda mod, a: ins.append(a[0].detach().clone()))
        m(idx)
        with torch.no_grad():                   # Execute: change layer 2's own attention
            m.blocks[2].attn.proj.weight.mul_(3.0)
        m(idx)
        seen[block] = float((ins[0] - ins[1]).abs().max())
    # Assert: FAL's and the parallel block's MLP input ignores its own attention; pre_ln and FAL+ see it
    assert seen["fal"] == 0.0 and seen["parallel"] == 0.0, seen
    assert seen["pre_ln"] > 1e-3 and seen["fal_plus"] > 1e-3, seen


def test_fal_differs_from_the_parallel_block_only_by_a1():
    # Prepare: same seed: same weights for both (equal parameter sets)
    idx = torch.randint(0, 23, (2, 24), generator=torch.Generator().manual_seed(3))
    fal, par = _model("fal"), _model("parallel")
    assert all(torch.equal(a, b) for a, b in zip(fal.state_dict().values(), par.state_dict().values()))
    # Execute / Assert: the outputs differ (a1 enters the later MLPs)
    with torch.no_grad():
        assert float((fal(idx) - par(idx)).abs().max()) > 1e-4


@pytest.mark.parametrize("block", ["fal", "fal_plus"])
def test_incremental_cache_carries_the_first_attention(block):
    # Prepare: a model and a sequence decoded in three pieces
    m = _model(block)
    idx = torch.randint(0, 23, (2, 20), generator=torch.Generator().manual_seed(4))
    cache = m.new_cache()
    # Execute
    pieces = [m(idx[:, :7], cache=cache), m(idx[:, 7:8], cache=cache), m(idx[:, 8:], cache=cache)]
    # Assert: equals the full forward
    assert torch.allclose(torch.cat(pieces, 1), m(idx), atol=1e-5)


def test_copies_after_a_training_step_share_one_first_attention():
    # Prepare: a FAL model after a forward with autograd (a1 is a non-leaf tensor)
    m = _model("fal").train()
    idx = torch.randint(0, 23, (2, 24))
    m(idx, idx)[1].backward()
    # Execute: deepcopy and pickle (what Ray does to a returned model)
    for c in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        # Assert: one signal shared by the copy's blocks, not the original's; same outputs
        assert all(b.first is c.blocks[0].first for b in c.blocks) and c.blocks[0].first is not m.blocks[0].first
        assert torch.allclose(c.eval()(idx), m.eval()(idx), atol=1e-6)


def test_parameter_counts_and_init_are_shared_except_fal_plus_layernorm():
    counts = {b: sum(p.numel() for p in _model(b).parameters()) for b in BLOCKS}
    assert counts["pre_ln"] == counts["parallel"] == counts["fal"]
    assert counts["fal_plus"] == counts["pre_ln"] + 2 * 16                 # one extra LayerNorm (LNf)


def test_unknown_block_is_one_config_error_naming_the_blocks():
    with pytest.raises(ConfigError) as e:
        GPTConfig(vocab_size=11, block="fal_pluss").check()
    assert e.value.key == "block" and all(b in str(e.value) for b in BLOCKS) and "\n" not in str(e.value)
