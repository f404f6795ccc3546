"""Megatron TP of the shared GPT: TP-2 (and TP-4) equals the single-process model forward and
backward for every block; all-reduces per forward / backward / step; sharding round trip; the
simulated step on the Link; bad input before Ray; the ranks on Ray actors over gloo (and a dying one)."""
import subprocess
import sys

import pytest
import torch

from components.core.errors import ConfigError
from components.core.netsim import Link
from components.models.gpt import GPT, GPTConfig
from components.training.tensor_parallel import simtime
from components.training.tensor_parallel.check import tp_exactness
from components.training.tensor_parallel.model import gather_grads, shard_state
from components.training.tensor_parallel.ranks import RankTimer, TPActorDied
from components.training.tensor_parallel.technique import TPParams

L = 6
#: (forward, backward, param) all-reduces per step, L layers
COUNTS = {"pre_ln": (2 * L, 2 * L, 0), "parallel": (L, L, 1), "fal": (L + 1, L + 1, 1), "fal_plus": (2 * L, 2 * L, 0)}


def _model(block, n_layer=L, n_head=2, d=16, seed=0):
    torch.manual_seed(seed)
    m = GPT(GPTConfig(vocab_size=29, n_layer=n_layer, n_head=n_head, d_model=d, context=8, block=block))
    with torch.no_grad():                      # LayerNorms and biases off their identity init
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m


def _batch(seed=1, B=2, T=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 29, (B, T), generator=g), torch.randint(0, 29, (B, T), generator=g)


@pytest.mark.parametrize("block", list(COUNTS))
def test_tp2_equals_single_process_forward_and_backward_and_counts_allreduces(block):
    # Prepare: a 6-layer model with non-trivial LayerNorms and biases, one batch
    m = _model(block)
    x, y = _batch()
    # Execute: both ranks as threads (the same rank code the actors run), against the single process
    out = tp_exactness(m, x, y, 2, use_actors=False)
    # Assert: logits, loss and every gradient within 1e-5; the sheet's counts (7 vs 12 per forward)
    assert out["tp_fwd_abs_err"] < 1e-5 and out["tp_grad_abs_err"] < 1e-5 and out["tp_replica_spread"] == 0.0, out
    fwd, bwd, param = COUNTS[block]
    assert (out["allreduces_per_forward"], out["allreduces_per_backward"], out["param_allreduces_per_step"]) == \
        (fwd, bwd, param), out
    act = 2 * 8 * 16 * 4                       # one (B, T, d) fp32 activation
    ln = 2 * 2 * 16 * 4 * L * param            # LayerNorm weight + bias of ln1, ln2, every layer
    assert out["allreduce_bytes_per_step"] == (fwd + bwd) * act + ln and out["counts_equal_across_ranks"] == 1


def test_tp4_fal_equals_single_process():
    m = _model("fal", n_layer=3, n_head=4)
    out = tp_exactness(m, *_batch(), 4, use_actors=False)
    assert out["max_tp_abs_err"] < 1e-5 and out["allreduces_per_forward"] == 4, out


def test_sharding_round_trip_rebuilds_every_parameter():
    # Prepare: a full state; Execute: shard over 2 ranks and gather back
    m = _model("fal_plus", n_layer=2)
    full = {n: p.detach() for n, p in m.named_parameters()}
    back = gather_grads([shard_state(full, m.cfg, r, 2) for r in range(2)], m.cfg, 2)
    # Assert: identical tensors, and rank shards hold half of the sharded matrices
    assert set(back) == set(full) and all(torch.equal(back[n], full[n]) for n in full)
    assert shard_state(full, m.cfg, 1, 2)["blocks.0.attn.qkv.weight"].shape == (3 * 8, 16)


def test_simulated_step_charges_every_allreduce_and_fal_is_faster_when_comm_bound():
    # Prepare: one rank's measured compute and all-reduce log for pre_ln and FAL
    x, y = _batch(B=4)
    link = Link.from_config({"bandwidth": "1Gbps", "latency": "50us"})
    sims = {}
    for block in ("pre_ln", "fal"):
        r = RankTimer(_model(block), 2)
        r.sample(x, y, 2)
        res = r.result()
        # Execute: the simulated step with compute taken as equal
        sims[block] = simtime.sim_step(1e-3, res["sizes"], link, 2)
        # Assert: each all-reduce is one ring all-reduce over 2 ranks: 2 latencies + 8 bytes / bandwidth
        assert sims[block]["comm_s"] == pytest.approx(sum(2 * 50e-6 + 8 * n / 1e9 for n in res["sizes"]))
        assert 0 < res["compute_s"] < 10
    assert sims["fal"]["sim_step_s"] < sims["pre_ln"]["sim_step_s"]
    assert sims["fal"]["comm_s"] / sims["pre_ln"]["comm_s"] < 15 / 24 + 0.01


@pytest.mark.parametrize("kw,key", [
    (dict(tp=3), "tp"),                          # 3 does not divide 4 heads
    (dict(tp=8), "tp"),                          # 8 heads needed
    (dict(tp=2, n_head=4, d_model=66), "n_head"),  # heads do not divide the width
    (dict(tp=1), "tp"),
    (dict(block="fal_pluss"), "block"),
    (dict(fail_rank=2), "fail_rank"),
    (dict(timed_against="pre_lnn"), "timed_against"),
    (dict(timing_rounds=2), "timing_rounds"),
    (dict(links={"comm_bound": {"bandwidth": "fast"}, "dc": {}}), "links.comm_bound.bandwidth"),
])
def test_bad_input_is_one_config_error(kw, key):
    with pytest.raises(ConfigError) as e:
        TPParams(**kw).check()
    assert e.value.key == key and "\n" not in str(e.value)


def test_cli_rejects_a_tp_degree_that_does_not_divide_the_heads_before_ray(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "experiment=fal", "debug=true",
                        "experiment.common.tensor_parallel.tp=3", f"runs_dir={tmp_path}"],
                       capture_output=True, text=True, timeout=120)
    err = (r.stdout + r.stderr).strip()
    assert r.returncode == 2, err
    last = err.splitlines()[-1]
    assert "tp" in last and "3" in last and "divisor" in last and "Ray" not in last


def test_ranks_on_ray_actors_over_gloo_equal_single_process_and_a_dead_rank_fails(ray_session):
    # Prepare: a FAL model and one batch
    m = _model("fal", n_layer=3)
    x, y = _batch()
    # Execute: 2 rank actors with a gloo group between them
    out = tp_exactness(m, x, y, 2, use_actors=True, timeout_s=60)
    # Assert: equal within 1e-5, the counts of the thread ranks (L+1 per forward)
    assert out["max_tp_abs_err"] < 1e-5 and out["allreduces_per_forward"] == 4 and out["tp_check_comm_s"] > 0, out
    # Execute: rank 1's process exits at the step; Assert: Ray's reason, no hang
    with pytest.raises(TPActorDied, match=r"TP rank (actor died|failed) during the TP step: \w+"):
        tp_exactness(m, x, y, 2, use_actors=True, timeout_s=60, fail_rank=1)


def test_step_timed_against_another_block_gives_ratios_with_a_noise_floor():
    # Prepare: FAL's rank timer (as training leaves it) and a link without communication cost
    from components.training.tensor_parallel.technique import _step_against

    x, y = _batch(B=4)
    own = RankTimer(_model("fal"), 2)
    own.sample(x, y, 1)
    p = TPParams(block="fal", n_layer=L, n_head=2, d_model=16, context=8, timed_against="pre_ln", timing_rounds=5)
    links = {"comm_bound": Link.from_config({"bandwidth": "1Gbps", "latency": "50us"}),
             "free": Link.from_config({"bandwidth": "1000000Gbps", "latency": "0us"})}
    # Execute
    m, info = _step_against(p, 29, own, x, y, links, seed=0)
    # Assert: the ratio over a free link is the compute ratio; every figure carries a finite floor
    assert m["step_ratio_free"] == pytest.approx(m["compute_ratio"], rel=1e-6)
    assert m["compute_ratio_rounds"] == 5 and m["compute_ratio_thread_clock"] == 1.0
    for k in ("compute_ratio", "step_ratio", "step_ratio_free"):
        assert m[k] > 0 and 0 <= m[f"{k}_noise"] < float("inf")
    assert info["against"] == "pre_ln" and info["compute_ref_s"] > 0
    # FAL issues 15 of pre-LN's 24 all-reduces: on the 1 Gbps link its step ratio sits below its compute ratio
    # whenever the compute ratio is above the all-reduce ratio
    assert m["step_ratio"] < max(m["compute_ratio"], 15 / 24 + 0.01)
