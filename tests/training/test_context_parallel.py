"""Context parallelism with compressed K/V: ring == full attention (forward and backward), what the
codecs make inexact, the bytes each hop carries, the simulated ring phase, bad input, the actor ring
== the training ring, a dying rank actor, and the debug experiment end to end through the DAG."""
import math
import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F

from components.core.errors import ConfigError
from components.core.netsim import Link
from components.training.context_parallel import simtime
from components.training.context_parallel.actors import RingActorDied
from components.training.context_parallel.check import exactness, full_attention, layer0_inputs, vectorised
from components.training.context_parallel.ring import RingSpec, build_model, layer_stats, orthonormal, ring_attention
from components.training.context_parallel.technique import CPParams


def _qkv(B=2, H=3, T=32, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g).requires_grad_(True) for _ in range(3)]


def _tiny(kv="dense", codec="fp32", r=0, M=1, P=4, seed=0):
    torch.manual_seed(seed)
    return build_model(50, 1, 2, 16, 32, RingSpec(chunks=P, kv=kv, codec=codec, r=r, M=M, seed=seed))


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "block_by_block"])
@pytest.mark.parametrize("P", [2, 4, 8])
def test_uncompressed_ring_equals_full_attention_forward_and_backward(P, fused):
    # Prepare: random q, k, v and an upstream gradient
    q, k, v = _qkv()
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    # Execute: the ring over P chunks (each rank's softmax fused, or merged block by block as the rank
    # actors do) and full causal attention in one call
    ring = ring_attention(q, k, v, P, fused=fused)
    g_ring = torch.autograd.grad(ring, (q, k, v), dout)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    g_full = torch.autograd.grad(full, (q, k, v), dout)
    # Assert: outputs and every input gradient within 1e-5
    assert float((ring - full).detach().abs().max()) < 1e-5
    assert max(float((a - b).abs().max()) for a, b in zip(g_ring, g_full)) < 1e-5


def test_compression_is_visible_and_a_subspace_model_travels_exactly():
    # Prepare: the same tiny model's first layer under four wires
    x = torch.randint(0, 50, (2, 32), generator=torch.Generator().manual_seed(0))
    errs = {}
    for name, kw in {"int8": dict(codec="int8"), "randproj": dict(kv="randproj", codec="bf16", r=2),
                     "mix_fp32": dict(kv="subspace", codec="fp32", r=2, M=4),
                     "mix_bf16": dict(kv="subspace", codec="bf16", r=2, M=4)}.items():
        t = layer0_inputs(_tiny(**kw), x)
        dout = torch.randn(t["q"].shape, generator=torch.Generator().manual_seed(2))
        # Execute: the training ring vs full attention on the sender's own (local) K/V
        errs[name] = float((vectorised(t, dout)["out"] - full_attention(t, dout)["out"]).abs().max())
    # Assert: lossy wires are measurably off; a model whose K/V live in the subspaces is exact with
    # fp32 coefficients (the receiver rebuilds U_m a exactly), and only bf16-close with bf16
    assert errs["int8"] > 1e-5 and errs["randproj"] > 1e-3, errs
    assert errs["mix_fp32"] < 1e-5, errs
    assert 1e-6 < errs["mix_bf16"] < errs["randproj"], errs


@pytest.mark.parametrize("kw", [dict(codec="int8"), dict(kv="randproj", codec="bf16", r=2),
                                dict(kv="subspace", codec="bf16", r=1, M=4), dict(kv="randproj", codec="fp32", r=2),
                                dict(kv="subspace", codec="fp32", r=1, M=4), dict(kv="subspace", codec="fp32", r=2, M=4)],
                         ids=["int8", "randproj_bf16", "mix_r1_bf16", "randproj_fp32", "mix_r1_fp32", "mix_r2_fp32"])
def test_fused_rank_attention_equals_the_block_by_block_merge_on_every_wire(kw):
    # Prepare: a tiny model's first layer, its wire variables as leaves, one upstream gradient
    from components.training.context_parallel.ring import make_expand
    from components.training.context_parallel.wire import make_codec

    t = layer0_inputs(_tiny(**kw), torch.randint(0, 50, (2, 32), generator=torch.Generator().manual_seed(3)))
    dout = torch.randn(t["q"].shape, generator=torch.Generator().manual_seed(4))
    spec, T = t["spec"], t["q"].shape[2]

    def run(fused):
        leaves = [t[n].clone().requires_grad_(True) for n in ("q", "k", "v", "wk", "wv")]
        sink: list = []
        out = ring_attention(*leaves[:3], spec.chunks, *leaves[3:],
                             make_expand(spec.kv, t["basis_k"], t["basis_v"], t["idx"], T // spec.chunks),
                             make_codec(spec.codec, spec.bucket), sink, fused=fused)
        return out, torch.autograd.grad(out, leaves, dout, allow_unused=True), sink

    # Execute: the training ring's fused softmax and the actors' block-by-block merge
    (o1, g1, s1), (o2, g2, s2) = run(True), run(False)
    # Assert: the same output (fp32 rounding) and payloads on every hop; the same gradients where the wire is
    # exact (a lossy codec re-encodes the travelling gradient, so a rounding difference can flip one step)
    assert float((o1 - o2).detach().abs().max()) < 1e-5
    if spec.codec == "fp32":
        assert max(float((a - b).abs().max()) for a, b in zip(g1, g2) if a is not None) < 1e-5
    assert s1 == s2


def test_bases_are_orthonormal():
    U = orthonormal(torch.randn(3, 4, 16, 2))
    assert torch.allclose(U.transpose(-1, -2) @ U, torch.eye(2).expand(3, 4, 2, 2), atol=1e-5)


@pytest.mark.parametrize("kw,per_block", [
    (dict(codec="fp32"), 2 * 2 * 2 * 8 * 8 * 4),                        # K+V: B2 H2 Tc8 d_h8, 4 bytes
    (dict(codec="bf16"), 2 * 2 * 2 * 8 * 8 * 2),
    (dict(codec="int8"), 2 * (256 + 4 * 2)),                            # 256 codes + 2 bucket scales, each of K, V
    (dict(kv="subspace", codec="bf16", r=1, M=4), 2 * 2 * 2 * 8 * 1 * 2 + 2 * 2 * 8 * 2 // 8),  # + 2-bit index
    (dict(kv="subspace", codec="bf16", r=2, M=1), 2 * 2 * 2 * 8 * 2 * 2),                       # M=1: no index
])
def test_bytes_of_every_hop_are_counted(kw, per_block):
    # Prepare: d 16 with 2 heads (d_h 8), 32 tokens as 4 chunks of 8, batch 2
    m = _tiny(**kw)
    x = torch.randint(0, 50, (2, 32))
    # Execute: one training step
    m(x, x)[1].backward()
    st = layer_stats(m)[0]
    # Assert: one block's payload; causal ring: 3 + 2 + 1 hops each way, every hop charged
    assert st["fwd_block"] == per_block
    assert st["fwd_hops"] == 6 and st["bwd_hops"] == 6
    assert st["fwd_bytes"] == 6 * per_block
    assert st["bwd_bytes"] == 6 * (per_block - st["idx_block"])      # gradients need no index


def test_ring_phase_overlaps_hops_with_block_compute():
    assert simtime.ring_phase_s(1.0, 0.0, 4) == 4.0           # nothing to wait for: 4 blocks
    assert simtime.ring_phase_s(1.0, 0.5, 4) == 4.0           # hops hidden behind the blocks
    assert simtime.ring_phase_s(1.0, 3.0, 4) == 3 * 3.0 + 1   # last block arrives after 3 hops
    layers = [{"fwd_block": 10_000, "bwd_block": 10_000}]
    fl = simtime.flops(2, 8, 16, 2, 1, 50)
    slow = simtime.sim_step(layers, fl, 4, Link.from_config({"bandwidth": "1Mbps", "latency": "1ms"}), 1.0)
    fast = simtime.sim_step(layers, fl, 4, Link.from_config({"bandwidth": "100Gbps"}), 1.0)
    assert slow["sim_step_s"] > fast["sim_step_s"] >= fast["compute_s"] == slow["compute_s"]
    assert math.isclose(fast["sim_step_s"], fast["compute_s"], rel_tol=1e-3)


@pytest.mark.parametrize("kw,key", [
    (dict(context=250), "context"),                     # 4 chunks do not divide 250 tokens
    (dict(kv="subspace", rank_frac=0.3), "rank_frac"),  # r = 4.8
    (dict(kv="subspace", rank_frac=1.0), "rank_frac"),  # r = d_h: nothing saved
    (dict(kv="dense", rank_frac=0.125), "rank_frac"),
    (dict(codec="zstd"), "codec"),
    (dict(kv="lowrank"), "kv"),
    (dict(M=4), "M"),                                   # a mixture needs kv=subspace
    (dict(fail_rank=4), "fail_rank"),
    (dict(links={"wan": {"bandwidth": "fast"}, "dc": {}}), "links.wan.bandwidth"),
])
def test_bad_input_is_one_config_error(kw, key):
    with pytest.raises(ConfigError) as e:
        CPParams(**kw).check()
    assert e.value.key == key and "\n" not in str(e.value)


def test_cli_rejects_an_unknown_codec_before_ray(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "experiment=context_parallel_compression",
                        "debug=true", "experiment.variants.ring_int8.params.codec=zstd", f"runs_dir={tmp_path}"],
                       capture_output=True, text=True, timeout=120)
    err = (r.stdout + r.stderr).strip()
    assert r.returncode == 2, err
    assert "codec" in err and "zstd" in err and "Ray" not in err.splitlines()[-1]


def test_actor_ring_equals_training_ring_and_a_dead_rank_fails_with_the_reason(ray_session):
    # Prepare: a mixture model (M=4, r=1, bf16 coefficients + 2-bit indices), one batch, 4 rank actors
    from components.core.raytools import start_nodes

    m = _tiny(kv="subspace", codec="bf16", r=1, M=4)
    x = torch.randint(0, 50, (2, 32), generator=torch.Generator().manual_seed(3))
    nodes = start_nodes(4, 0.0, "cp-test")
    try:
        # Execute: layer 0 on the rank actors and in the training path
        out = exactness(m, x, seed=0, nodes=nodes, timeout_s=120)
        # Assert: same outputs and gradients, the same bytes counted by the actors
        assert out["actor_vs_vec_err"] < 1e-6 and out["actor_bytes_match"] == 1.0, out
        # Execute: rank 2 dies when its first block arrives; Assert: Ray's reason, no hang
        with pytest.raises(RingActorDied, match=r"ring actor died during the forward hops: \w+Error"):
            exactness(m, x, seed=0, nodes=nodes, fail_rank=2, timeout_s=120)
    finally:
        for n in nodes:
            ray_session.kill(n)


def test_debug_experiment_end_to_end(run_experiment, mlflow_client):
    out = run_experiment("context_parallel_compression")
    runs = {n: o for n, o in out.variants.items()}
    assert all(o.status == "FINISHED" for o in runs.values()), {n: (o.status, o.error) for n, o in runs.items()}
    fp, mix = runs["ring_fp32"].result.metrics, runs["mix_m4_r1"].result.metrics
    assert fp["max_ring_abs_err"] < 1e-5 and fp["max_ring_grad_abs_err"] < 1e-5
    assert math.isfinite(fp["sim_time_to_target_s"]) and fp["sim_time_to_target_s_dc"] < fp["sim_time_to_target_s"]
    assert mix["kv_bytes_per_hop"] < 0.05 * fp["kv_bytes_per_hop"] and mix["idx_bytes_per_hop"] > 0
    for o in runs.values():
        # the actors and the training ring make the same calls on the same layouts: equal bit for bit (a
        # lossy codec would turn any rounding difference in a gradient into a whole quantisation step)
        assert o.result.metrics["actor_bytes_match"] == 1.0 and o.result.metrics["actor_vs_vec_err"] == 0.0
        assert "val_loss_vs_sim_s" in o.result.series and o.result.metrics["peak_rss_mb"] > 0
    judged = {c.name: c for c in out.claims}
    assert judged["ring_exact"].holds and not judged["mixture_cuts_kv_bytes"].error
    assert judged["mixture_not_worse_than_one_subspace"].skipped          # the r=2 variants are not in debug
    # the compute-bound clock of the same run: block compute scales with the rate, hops do not, the step is slower
    assert mix["block_compute_s_cb"] == pytest.approx(mix["block_compute_s"] * 15.0 / 1.5)
    assert mix["sim_step_s_cb"] > mix["sim_step_s"] and math.isfinite(fp["sim_time_to_target_s_cb"])
    assert not judged["mixture_300mbps_matches_100gbps_compute_bound"].skipped
    assert mlflow_client.get_run(runs["mix_m4_r1"].run_id).data.metrics["kv_bytes_per_hop"] > 0


@pytest.mark.slow
def test_a_dead_rank_actor_ends_the_variant_failed(run_experiment):
    out = run_experiment("context_parallel_compression", "only=[ring_int8]",
                         "++experiment.variants.ring_int8.params.fail_rank=1")
    v = out.variants["ring_int8"]
    assert v.status == "FAILED" and "ring actor died" in v.error, (v.status, v.error)
