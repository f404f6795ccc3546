"""GPT blocks of the registry beside ``pre_ln``: the GPT-J parallel block, FAL and FAL+ (their
equations written out by hand), where FAL's later MLPs read from, the KV cache with the first-attention
signal, the per-forward block context under activation checkpointing, copies of a model, and the
parameter counts."""
import copy
import pickle

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from components.core.errors import ConfigError
from components.models.gpt import GPT, BlockContext, GPTConfig

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
    # Assert: bit for bit (the same operations in the same order; held before the block context too)
    assert torch.equal(got, want)


# train-mode loss of _model(block, n_layer=4) on its own tokens, measured before the per-forward block
# context replaced the shared first-attention object (2026-12-02)
LOSS_BEFORE = {"pre_ln": 2.893026113510132, "parallel": 2.8798024654388428, "fal": 2.8767144680023193,
               "fal_plus": 3.009546995162964}


@pytest.mark.parametrize("block", BLOCKS)
def test_loss_is_the_one_measured_before_the_block_context(block):
    # Prepare
    m = _model(block, n_layer=4).train()
    idx = torch.randint(0, 23, (2, 24), generator=torch.Generator().manual_seed(1))
    # Execute
    loss = m(idx, idx)[1].item()
    # Assert
    assert loss == pytest.approx(LOSS_BEFORE[block], abs=1e-6)


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


@pytest.mark.parametrize("block", ["fal", "fal_plus"])
def test_copies_after_a_training_step_compute_the_same(block):
    # Prepare: a FAL model after a forward with autograd (its a1 was a non-leaf tensor)
    m = _model(block).train()
    idx = torch.randint(0, 23, (2, 24), generator=torch.Generator().manual_seed(5))
    m(idx, idx)[1].backward()
    # Execute: deepcopy and pickle (what Ray does to a returned model; a kept non-leaf a1 would fail both)
    for c in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        # Assert: the same outputs
        assert torch.equal(c.eval()(idx), m.eval()(idx))


class _Checkpointed(nn.Module):
    """A block run under non-reentrant activation checkpointing: recomputed in backward."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x, cache=None, ctx=None):
        return checkpoint(self.block, x, cache, ctx, use_reentrant=False)


@pytest.mark.parametrize("block", ["fal", "fal_plus"])
@pytest.mark.parametrize("first", [False, True], ids=["later_blocks", "all_blocks"])
def test_checkpointed_blocks_recompute_with_their_own_forwards_a1(block, first):
    # Prepare: the model and a copy with checkpointed blocks; two batches, so two different a1
    m = _model(block).train()
    c = copy.deepcopy(m)
    c.blocks = nn.ModuleList(_Checkpointed(b) if (i > 0 or first) else b for i, b in enumerate(c.blocks))
    g = torch.Generator().manual_seed(6)
    a, b = (torch.randint(0, 23, (2, 24), generator=g) for _ in range(2))
    # Execute: both forwards first, then one backward: the recomputation of the first forward's later
    # blocks happens after the second forward (a shared a1 would then hold the second forward's)
    grads = []
    for model in (m, c):
        (model(a, a)[1] + model(b, b)[1]).backward()
        grads.append([p.grad for p in model.parameters()])
    # Assert: the checkpointed model's gradients are the plain model's, bit for bit
    assert all(torch.equal(x, y) for x, y in zip(*grads))


def test_a_later_fal_block_outside_a_forward_is_one_error():
    # Prepare: layer 1 of a FAL model, called alone with and without a context that layer 0 filled
    m = _model("fal")
    x = torch.randn(2, 5, 16)
    ctx = BlockContext()
    m.blocks[0](x, None, ctx)
    # Execute / Assert: with layer 0's a1 it runs; without a context it says what it needs
    assert m.blocks[1](x, None, ctx).shape == x.shape
    with pytest.raises(ValueError, match="BlockContext"):
        m.blocks[1](x)


def test_parameter_counts_and_init_are_shared_except_fal_plus_layernorm():
    counts = {b: sum(p.numel() for p in _model(b).parameters()) for b in BLOCKS}
    assert counts["pre_ln"] == counts["parallel"] == counts["fal"]
    assert counts["fal_plus"] == counts["pre_ln"] + 2 * 16                 # one extra LayerNorm (LNf)


def test_unknown_block_is_one_config_error_naming_the_blocks():
    with pytest.raises(ConfigError) as e:
        GPTConfig(vocab_size=11, block="fal_pluss").check()
    assert e.value.key == "block" and all(b in str(e.value) for b in BLOCKS) and "\n" not in str(e.value)
