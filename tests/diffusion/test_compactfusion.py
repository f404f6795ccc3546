"""CompactFusion: error feedback keeps both bases bit-identical (and bounds the error), bytes counted
from the payload of every codec, the lossless exchange equals one device bit for bit, actors equal
the in-process runner, a dying shard actor fails with the reason, bad input, the debug experiment."""
import math
import subprocess
import sys

import pytest
import torch

from components.compression.residual import ResidualReceiver, ResidualSender, StreamSpec, make_matrix_codec
from components.core.errors import ConfigError
from components.core.netsim import Link
from components.diffusion.compactfusion import simtime
from components.diffusion.compactfusion.exchange import ActorRunner, ExchangeSpec, InProcessRunner, ShardActorDied
from components.diffusion.compactfusion.technique import CFParams, growth, validate
from components.diffusion.sampling import draw, sample
from components.models.dit import DiT, DiTConfig


def _walk(steps=25, shape=(2, 64, 32), drift=0.05, seed=0):
    """A slowly changing stream: x_t = x_{t-1} + drift * noise (like adjacent denoising steps)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    out = [x]
    for _ in range(steps - 1):
        x = x + drift * torch.randn(shape, generator=g)
        out.append(x)
    return out


def _model(seed=0) -> DiT:
    torch.manual_seed(seed)
    m = DiT(DiTConfig(img_size=8, patch=2, d=32, heads=4, depth=2))    # 16 tokens
    with torch.no_grad():                     # adaLN-zero starts as the identity: randomise
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m.eval()


@pytest.mark.parametrize("codec", ["binary", "int2", "lowrank", "sign"])
def test_error_feedback_keeps_both_bases_bit_identical_and_without_it_they_drift(codec):
    # Prepare: one stream with EF and one without, over a slowly drifting tensor
    xs = _walk()
    pairs = {ef: (ResidualSender(StreamSpec(codec=codec, ef=ef)), ResidualReceiver(StreamSpec(codec=codec, ef=ef)))
             for ef in (True, False)}
    errs = {True: [], False: []}
    for x in xs:
        for ef, (snd, rcv) in pairs.items():
            # Execute: send, rebuild
            x_hat = rcv.receive(snd.send(x))
            errs[ef].append(float((x_hat - x).norm() / x.norm()))
            # Assert: with EF the sender's base is the receiver's, bit for bit, at every step
            if ef:
                assert torch.equal(snd.base, rcv.base)
    # Assert: without EF the bases drift and the error accumulates; with EF it stays bounded
    assert not torch.equal(pairs[False][0].base, pairs[False][1].base)
    assert errs[False][-1] >= 2 * errs[True][-1], (errs[False][-1], errs[True][-1])
    assert growth(errs[True][5:]) <= 1.2 and growth(errs[False][5:]) > 1.5


def test_naive_compression_pays_the_full_activation_error():
    xs = _walk()
    snd, rcv = ResidualSender(StreamSpec(order=0)), ResidualReceiver(StreamSpec(order=0))
    err = [float((rcv.receive(snd.send(x)) - x).norm() / x.norm()) for x in xs]
    res_s, res_r = ResidualSender(StreamSpec()), ResidualReceiver(StreamSpec())
    res = [float((res_r.receive(res_s.send(x)) - x).norm() / x.norm()) for x in xs]
    assert err[0] < 1e-3 and min(err[1:]) > 0.5                   # warm-up fp16, then 1-bit of x itself
    assert max(res[1:]) < 0.25 * min(err[1:])


@pytest.mark.parametrize("name,expected", [
    ("fp32", 4 * 2 * 64 * 32),
    ("fp16", 2 * 2 * 64 * 32),
    ("int8", 2 * 64 * 32 + 4 * 2 * 64),                 # a code per value + a float32 scale per token
    ("sign", 2 * 64 * 32 // 8 + 4 * 2 * 64),            # a bit per value + a float32 scale per token
    ("binary", 2 * 64 * 32 // 8 + 2 * 2 * (64 + 32)),   # a bit per value + fp16 m_c and u_n per stream
    ("int2", 2 * 64 * 32 // 4 + 2 * 2 * (64 + 32)),
    ("lowrank", 2 * 2 * 8 * (64 + 32)),                 # fp16 U (N x 8) and V (8 x C) per stream
])
def test_bytes_are_the_payload_of_every_codec(name, expected):
    # Prepare: two streams of 64 tokens x 32 channels
    x = torch.randn(2, 64, 32)
    c = make_matrix_codec(name)
    # Execute
    x_hat, nbytes = c.roundtrip(x)
    # Assert: the payload is the expected size, the codec says so, the decode has the shape
    assert nbytes == expected == c.payload_bytes(tuple(x.shape))
    assert x_hat.shape == x.shape and (torch.equal(x_hat, x) == c.lossless)


def test_lossless_exchange_equals_one_device_bit_for_bit_and_compression_does_not():
    # Prepare: a random DiT, the seed's noise, the single-device samples
    m = _model()
    noise, y = draw(0, 2, m)
    ref = sample(m, noise, y, 3)
    # Execute: 4 shards exchanging fp32 K/V, and 1-bit residuals with EF
    exact = InProcessRunner(4, ExchangeSpec("sync", "fp32").check(), m)
    out = sample(m, noise, y, 3, runner=exact)
    lossy = sample(m, noise, y, 3, runner=InProcessRunner(4, ExchangeSpec().check(), m))
    # Assert: bit for bit; every shard got the other 3 shards' K and V at every block and step
    assert torch.equal(out, ref)
    assert not torch.equal(lossy, ref)
    per_block = 2 * (2 * 2) * 4 * 32 * 4                  # K+V, 4 CFG rows, 4 tokens, d 32, fp32
    assert [r["bytes_in"] for r in exact.reports()] == [3 * 2 * 3 * per_block] * 4   # 3 steps, 2 blocks, 3 peers


def test_link_presets_are_calibrated_on_the_sync_allgather():
    link = simtime.calibrated_link({"ratio": 3.0, "latency": "10us"}, 1e-3, 50_000, 4)
    assert math.isclose(link.allgather_s(50_000, 4), 3e-3)
    sync = simtime.step_latency_s("sync", 5, 1, 6, 1e-3, link, 50_000, 4)
    stale = simtime.step_latency_s("stale", 5, 1, 6, 1e-3, link, 50_000, 4)
    warm = simtime.step_latency_s("stale", 0, 1, 6, 1e-3, link, 50_000, 4)
    assert math.isclose(sync, 6 * 4e-3) and math.isclose(stale, 6 * 3e-3) and warm == sync
    fast = Link(bandwidth_bps=1e15)
    assert math.isclose(simtime.step_latency_s("stale", 5, 1, 6, 1e-3, fast, 50_000, 4), 6e-3)   # hidden


@pytest.mark.parametrize("kw,key", [
    (dict(codec="zstd"), "codec"),
    (dict(system="stale", codec="binary"), "codec"),       # stale sends the exact K/V
    (dict(system="ring"), "system"),
    (dict(order=2), "order"),
    (dict(warmup=0), "warmup"),                            # a residual stream starts from an uncompressed send
    (dict(shards=1), "shards"),
    (dict(fail_rank=4), "fail_rank"),
    (dict(presets={"eth": {"ratio": -1}}), "presets.eth.ratio"),
])
def test_bad_input_is_one_config_error(kw, key):
    with pytest.raises(ConfigError) as e:
        CFParams(**kw).check()
    assert e.value.key == key and "\n" not in str(e.value)


def test_batch_must_be_the_reference_batch():
    with pytest.raises(ConfigError) as e:
        validate(CFParams(batch=8), {"prepare": {"reference": {"params": {"batch": 16}},
                                                 "calibration": {"params": {"batch": 8}}}})
    assert e.value.key == "batch" and "reference" in str(e.value)


def test_shards_must_divide_the_tokens():
    with pytest.raises(ConfigError) as e:
        validate(CFParams(shards=3), {"prepare": {"data": {"params": {"size": 16}}, "model": {"params": {"patch": 2}},
                                                  "calibration": {"params": {"shards": 3}}}})
    assert e.value.key == "shards" and "64 tokens" in str(e.value)


def test_shards_beyond_the_node_pool_are_rejected_naming_the_fix():
    # Prepare: 8 shards (they divide 64 tokens, calibrated at 8) on a pool of 4 node actors
    prep = {"calibration": {"params": {"shards": 8, "batch": 16}}, "reference": {"params": {"batch": 16}}}
    # Execute / Assert: the actor check needs a node per shard
    with pytest.raises(ConfigError) as e:
        validate(CFParams(shards=8), {"resources": {"nodes": 4}, "prepare": prep})
    assert e.value.key == "shards" and "experiment.resources.nodes=4" in str(e.value)
    assert "set experiment.resources.nodes=8" in str(e.value)
    # a pool that large, no pool (the runner starts its own actors), no actor check, one device: accepted
    validate(CFParams(shards=8), {"resources": {"nodes": 8}, "prepare": prep})
    validate(CFParams(shards=8), {"resources": {"nodes": 0}, "prepare": prep})
    validate(CFParams(shards=8, actor_check=False), {"resources": {"nodes": 4}, "prepare": prep})
    validate(CFParams(shards=8, system="single"), {"resources": {"nodes": 4}, "prepare": prep})


def test_issue_command_with_8_shards_is_rejected_before_ray():
    # Prepare: the composed debug config of the issue's command (validation only: nothing starts)
    from pipelines import config, dag

    over = ["experiment=compactfusion", "debug=true", "experiment.common.compactfusion.shards=8",
            "experiment.prepare.calibration.params.shards=8", "only=[cf_1bit]"]
    # Execute / Assert
    with pytest.raises(ConfigError, match=r"shards=8: at most experiment.resources.nodes=4"):
        dag.validate(config.compose(over))
    assert dag.validate(config.compose(over + ["experiment.resources.nodes=8"]))


@pytest.mark.slow          # a fresh interpreter (~10 s); validate() is unit-tested above
def test_cli_rejects_shards_that_do_not_divide_the_tokens_before_ray(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "experiment=compactfusion", "debug=true",
                        "experiment.common.compactfusion.shards=3", f"runs_dir={tmp_path}"],
                       capture_output=True, text=True, timeout=120)
    err = (r.stdout + r.stderr).strip()
    assert r.returncode == 2, err
    assert "shards" in err and "3" in err and len(err.splitlines()) == 1 and "Ray" not in err


def test_actors_equal_in_process_and_a_dead_shard_fails_with_the_reason(ray_session):
    # Prepare: a random DiT (as a prepared dict), 4 shard actors, the seed's noise
    from components.core.raytools import start_nodes

    m = _model(1)
    prepared = {"config": m.cfg.to_dict(), "state": m.state_dict()}
    noise, y = draw(1, 2, m)
    nodes = start_nodes(4, 0.0, "cf-test")
    try:
        for spec in (ExchangeSpec(), ExchangeSpec("stale", "fp16")):
            # Execute: the same sampling on the actors and in this process
            local = InProcessRunner(4, spec, m)
            want = sample(m, noise, y, 3, runner=local)
            actors = ActorRunner(4, spec, prepared, nodes=nodes, key=f"t-{spec.system}", timeout_s=120)
            try:
                got = sample(m, noise, y, 3, runner=actors)
                reps = actors.reports()
            finally:
                actors.close()
            # Assert: the same bits and the same bytes per step on every device
            assert torch.equal(got, want), spec
            assert [r["bytes_steps"] for r in reps] == [r["bytes_steps"] for r in local.reports()]
        # Execute: shard 2 dies at step 1; Assert: Ray's reason, no hang
        dying = ActorRunner(4, ExchangeSpec(), prepared, nodes=nodes, key="t-die", fail_rank=2, fail_step=1,
                            timeout_s=120)
        with pytest.raises(ShardActorDied, match=r"a shard actor died during denoising step 1: \w+Error"):
            try:
                sample(m, noise, y, 3, runner=dying)
            finally:
                dying.close()
    finally:
        for n in nodes:
            ray_session.kill(n)


@pytest.mark.slow
def test_debug_experiment_end_to_end(run_experiment, mlflow_client):
    out = run_experiment("compactfusion")
    runs = out.variants
    assert all(o.status == "FINISHED" for o in runs.values()), {n: (o.status, o.error) for n, o in runs.items()}
    cf, sync, noef = (runs[n].result.metrics for n in ("cf_1bit", "sync", "res_1bit_noef"))
    assert cf["bytes_per_step_steady"] < 0.2 * sync["bytes_per_step"] and cf["base_mismatch"] == 0
    assert noef["base_mismatch"] > 0 and runs["exact_fp32"].result.metrics["max_abs_err_vs_ref"] == 0
    for name, o in runs.items():
        if name != "single_device":
            assert o.result.metrics["actor_bits_equal"] == 1 and o.result.metrics["actor_bytes_match"] == 1, name
            assert "recon_rel_err" in o.result.series
    judged = {c.name: c for c in out.claims}
    assert judged["lossless_exchange_equals_one_device"].holds and judged["actors_equal_in_process"].skipped
    assert mlflow_client.get_run(runs["cf_1bit"].run_id).data.metrics["bytes_per_step"] > 0


@pytest.mark.slow
def test_a_dead_shard_actor_ends_the_variant_failed(run_experiment):
    out = run_experiment("compactfusion", "only=[cf_1bit]", "++experiment.variants.cf_1bit.params.fail_rank=1")
    v = out.variants["cf_1bit"]
    assert v.status == "FAILED" and "shard actor died" in v.error, (v.status, v.error)


def test_calibration_times_each_shard_size_on_its_own_tokens():
    # Prepare: record the token counts the timed block is run on (behaviour, not timings: which of two
    # sizes is faster depends on the machine's load, so no order between the times is asserted)
    import math

    from components.diffusion.compactfusion.prepare import time_blocks

    m = _model()
    h, c = torch.randn(8, 16, 32), torch.randn(8, 32)
    blk, seen = m.blocks[0], []
    qkv = blk.qkv
    blk.qkv = lambda x, cond: (seen.append(x.shape[1]), qkv(x, cond))[1]
    # Execute
    times = time_blocks(m, h, c, [4, 16], reps=3)
    # Assert: one positive time per size; the keys/values once over all tokens, then every repetition
    # (2 warm-up + 3 timed) runs the shard and the full size, interleaved
    assert len(times) == 2 and all(0 < t < math.inf for t in times)
    assert seen == [16] + [4, 16] * 5


def test_matrix_codecs_and_reuse_policies_are_registered():
    # Prepare / Execute
    from components.compression.residual import CODECS
    from components.core.registry import entries
    from components.diffusion.foresight import policies

    codecs, runners = entries("matrix_codec"), entries("reuse_policy")
    # Assert: `dtlab list` shows every codec the experiments accept, and every reuse policy's class
    assert set(codecs) == set(CODECS) and all(codecs[n].obj is CODECS[n] for n in CODECS)
    assert runners["foresight"].obj is policies.Foresight and set(runners) == {"foresight", "static", "teacache", "pab"}
