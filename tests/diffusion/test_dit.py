"""The shared DiT: the split form (qkv -> attend -> finish) equals forward bit for bit, a token
shard attending over gathered K/V equals the full block, shapes for images and clips."""
import pytest
import torch

from components.core.errors import ConfigError
from components.models.dit import DiT, DiTConfig, attend


def _model(**kw) -> DiT:
    torch.set_num_threads(1)   # tiny tensors: a second thread only adds contention
    torch.manual_seed(0)
    m = DiT(DiTConfig(**{"img_size": 8, "patch": 2, "d": 32, "heads": 4, "depth": 2, **kw}))
    with torch.no_grad():   # adaLN-zero starts every block as the identity: randomise to test
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m.eval()


def _inputs(m: DiT, b: int = 3):
    cfg = m.cfg
    shape = (b, cfg.channels, cfg.img_size, cfg.img_size)
    if cfg.frames > 1:
        shape = (b, cfg.frames) + shape[1:]
    return torch.randn(shape), torch.rand(b), torch.randint(0, cfg.num_classes + 1, (b,))


@pytest.mark.parametrize("frames", [1, 3])
def test_split_form_equals_forward_exactly(frames):
    # Prepare
    m = _model(frames=frames)
    x, t, y = _inputs(m)
    h, c = m.embed(x, t, y)
    # Execute
    outs = []
    for blk in m.blocks:
        q, k, v, state = blk.qkv(h, c)
        split = blk.finish(h, c, attend(q, k, v), state)
        full = blk(h, c)
        parts = blk.forward_parts(h, c)[0]
        outs.append((split, full, parts))
        h = full
    # Assert
    for split, full, parts in outs:
        assert torch.equal(split, full) and torch.equal(parts, full)
    assert torch.equal(m(x, t, y), m.final(m.run_blocks(*m.embed(x, t, y)), m.embed(x, t, y)[1]))
    assert m(x, t, y).shape == x.shape


@pytest.mark.parametrize("frames", [1, 2])
def test_token_shard_with_gathered_kv_equals_full_block(frames):
    # Prepare: 2 shards; a clip shard owns the same spatial positions in every frame
    m = _model(frames=frames)
    x, t, y = _inputs(m, b=2)
    h, c = m.embed(x, t, y)
    blk = m.blocks[0]
    s = h.shape[1] // frames
    idx = torch.arange(h.shape[1]).view(frames, s)
    shards = [idx[:, : s // 2].flatten(), idx[:, s // 2:].flatten()]
    # Execute
    qkvs = [blk.qkv(h[:, sh], c) for sh in shards]
    k_all = torch.cat([kv[1] for kv in qkvs], dim=-2)
    v_all = torch.cat([kv[2] for kv in qkvs], dim=-2)
    out = torch.empty_like(h)
    for sh, (q, _, _, state) in zip(shards, qkvs):
        out[:, sh] = blk.finish(h[:, sh], c, attend(q, k_all, v_all), state)
    # Assert (attention over permuted keys: equal up to float rounding)
    torch.testing.assert_close(out, blk(h, c), atol=1e-5, rtol=1e-5)


def test_reused_attention_increment_is_used():
    # Prepare
    m = _model()
    x, t, y = _inputs(m)
    h, c = m.embed(x, t, y)
    blk = m.blocks[0]
    _, spatial, _ = blk.forward_parts(h, c)
    # Execute: the increment from other tokens, reused on h
    reused, _, _ = blk.forward_parts(h, c, spatial=torch.zeros_like(spatial))
    # Assert
    assert not torch.allclose(reused, blk(h, c))


def test_other_resolution_runs_and_bad_config_is_one_error():
    m = _model()
    x = torch.randn(2, 1, 12, 12)
    assert m(x, torch.rand(2), torch.tensor([0, 10])).shape == x.shape
    with pytest.raises(ConfigError, match="heads"):
        DiTConfig(d=30, heads=4).check()
