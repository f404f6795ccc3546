"""Foresight / Static-N composed with the patch-parallel runner: with a lossless exchange it equals the
policy on one device bit for bit, and a skipped block sends nothing; the debug experiment end to end."""
import pytest
import torch

from components.core.errors import ConfigError
from components.diffusion.compactfusion.composed import ComposedRunner
from components.diffusion.compactfusion.exchange import ExchangeSpec
from components.diffusion.compactfusion.technique import CFParams
from components.diffusion.foresight.policies import Foresight, StaticN
from components.diffusion.sampling import draw, sample
from components.models.dit import DiT, DiTConfig


def _model(seed=0) -> DiT:
    torch.manual_seed(seed)
    m = DiT(DiTConfig(img_size=8, patch=2, d=32, heads=4, depth=3))    # 16 tokens, 3 blocks
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m.eval()


@pytest.mark.parametrize("make", [lambda: StaticN(2), lambda: Foresight(lam=5.0, warmup=2, interval=3, last_full=1)],
                         ids=["static2", "foresight"])
def test_lossless_composition_equals_the_policy_on_one_device_and_skipped_blocks_send_nothing(make):
    # Prepare: a random DiT, the seed's noise
    m = _model()
    noise, y = draw(0, 2, m)
    # Execute: the policy on one device, and deciding over 4 shards exchanging fp32 K/V
    alone, policy = make(), make()
    want = sample(m, noise, y, 7, runner=alone)
    comp = ComposedRunner(4, ExchangeSpec("sync", "fp32").check(), m, policy)
    got = sample(m, noise, y, 7, runner=comp)
    # Assert: the same bits, the same blocks run; bytes only at steps that ran blocks, in proportion
    assert torch.equal(got, want)
    assert comp.per_step == alone.per_step and 0 < comp.skip_fraction < 1
    per_block = 4 * 3 * 2 * (2 * 2 * 4 * 32 * 4)    # 4 receivers x 3 peers x K,V x (4 rows, 4 tokens, d 32, fp32)
    sent = [sum(r["bytes_steps"][t] for r in comp.reports()) for t in range(7)]
    assert sent == [round(f * 3) * per_block for f in alone.per_step], (sent, alone.per_step)


def test_policy_params_are_checked_under_their_key():
    with pytest.raises(ConfigError) as e:
        CFParams(policy="foresight", policy_params={"lam": -1.0}).check()
    assert e.value.key == "policy_params.lam"
    with pytest.raises(ConfigError) as e:
        CFParams(policy="foresight", policy_params={"R": 2}).check()
    assert e.value.key == "policy_params.R"
    with pytest.raises(ConfigError) as e:
        CFParams(policy="teacache").check()
    assert e.value.key == "policy"


@pytest.mark.slow
def test_debug_experiment_end_to_end(run_experiment):
    out = run_experiment("diffusion_composed")
    runs = out.variants
    assert all(o.status == "FINISHED" for o in runs.values()), {n: (o.status, o.error) for n, o in runs.items()}
    comp, cf = runs["composed"].result.metrics, runs["cf_1bit"].result.metrics
    assert 0 < comp["skip_fraction"] < 1 and comp["bytes_per_step"] < cf["bytes_per_step"]
    assert {c.name: c for c in out.claims}["skipped_blocks_send_nothing"].holds
