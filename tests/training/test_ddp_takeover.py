"""MeCeFO's takeover inside the DDP loop (2 gloo workers, no Ray): exact neighbour-do-both gives the
fault-free weights, MeCeFO at full rank without the attention skip does too, the approximations change
them; FAL + DUO + MeCeFO compose in one job; MeCeFO's rules on every block of the shared GPT."""
import json
import math

import pytest
import torch
import torch.multiprocessing as mp

from components.core.errors import ConfigError
from components.models.gpt import GPT, GPTConfig
from components.training.ddp.takeover import TakeoverSpec
from components.training.ddp.technique import DDPParams
from components.training.mecefo.approx import Approx, approximated, flat_grad
from tests.training import dp_workers
from tests.training.test_ddp_hooks import _port


@pytest.fixture(scope="module")
def takeover_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("takeover") / "runs.json"
    mp.spawn(dp_workers.takeover_worker, args=(2, _port(), str(out)), nprocs=2, join=True)
    return json.loads(out.read_text())


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-4 * max(1.0, abs(b))


def test_exact_takeover_equals_fault_free(takeover_runs):
    # Prepare: rank 0 carried replica 1's micro-batch at steps 3..7 (5 takes), rank 1 sent zeros
    r0, r1 = takeover_runs
    # Execute / Assert: the same weights as fault-free on both ranks, for NDB and exact-mode MeCeFO
    for name in ("ndb", "mecefo_exact"):
        assert r0[name]["takes"] == 5 and r1[name]["takes"] == 0
        assert _close(r0[name]["param_checksum"], r0["none"]["param_checksum"]), name
        assert r0[name]["param_checksum"] == r1[name]["param_checksum"], name
    assert r0["none"]["takes"] == 0


def test_approximate_takeover_changes_weights_and_ranks_agree(takeover_runs):
    r0, r1 = takeover_runs
    for name in ("mecefo", "fal_duo_mecefo"):
        assert not _close(r0[name]["param_checksum"], r0["none"]["param_checksum"]), name
        assert r0[name]["param_checksum"] == r1[name]["param_checksum"], name
        assert r0[name]["takes"] == 5 and math.isfinite(r0[name]["final_val_loss"])
        assert 0.2 < r0[name]["take_cost_ratio"] < 5, name       # a CPU-time ratio, measured
        assert r0[name]["refresh_cost_ratio"] > 0, name          # one refresh of the svd bases, measured
    assert r0["ndb"]["take_cost_ratio"] == 1.0                   # the exact micro-batch, by definition
    assert r0["ndb"]["refresh_cost_ratio"] == 0.0                # no bases to refresh


@pytest.mark.parametrize("block", ["pre_ln", "parallel", "fal", "fal_plus"])
def test_mecefo_rules_on_every_block(block):
    # Prepare: a 3-layer GPT of each block and one batch
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, n_layer=3, n_head=2, d_model=16, context=8, block=block))
    x = torch.randint(0, 11, (2, 8))
    y = torch.randint(0, 11, (2, 8))

    def grad(a):
        model.zero_grad(set_to_none=True)
        with approximated(model, a, torch.Generator().manual_seed(1)):
            loss = model(x, y)[1]
        loss.backward()
        return float(loss.detach()), flat_grad(model)

    # Execute
    loss0, g0 = grad(None)
    loss_exact, g_exact = grad(Approx(skip_attn=False, lowrank=False))    # recomputed FFN only
    _, g_skip = grad(Approx(skip_attn=True, lowrank=False))
    # Assert: recomputation is exact; the attention skip leaves every attention weight without gradient
    assert abs(loss_exact - loss0) < 1e-6 and torch.allclose(g_exact, g0, atol=1e-6)
    off = 0
    for name, p in model.named_parameters():
        part = g_skip[off:off + p.numel()]
        off += p.numel()
        if ".attn." in name or "ln1" in name or "ln_first" in name:
            assert part.abs().max() == 0, name
        elif "mlp" in name:
            assert part.abs().max() > 0, name


def test_bad_takeover_input_is_one_line():
    # Prepare / Execute / Assert: every bad key names itself
    with pytest.raises(ConfigError, match="takeover.failure_rate"):
        TakeoverSpec.parse({"recovery": "mecefo", "failure_rate": 1.0}, 4, 64)
    with pytest.raises(ConfigError, match="takeover.recovery"):
        TakeoverSpec.parse({"recovery": "retry"}, 4, 64)
    with pytest.raises(ConfigError, match="takeover.rank"):
        TakeoverSpec.parse({"recovery": "mecefo", "rank": 10_000}, 4, 64)
    with pytest.raises(ConfigError, match="takeover.refresh"):
        TakeoverSpec.parse({"recovery": "mecefo", "refresh": 0}, 4, 64)
    with pytest.raises(ConfigError, match="takeover"):
        TakeoverSpec.parse({"recover": "ndb"}, 4, 64)
    with pytest.raises(ConfigError, match="block"):
        DDPParams(block="moe", workers=2).check()
