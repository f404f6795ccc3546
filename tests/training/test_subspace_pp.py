"""subspace_pp: SSN round trip, a gradient check across one boundary, bytes per codec, the pipelined
model equal to one process, the GPipe clock, bad input, a dying stage actor, the debug flavour."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from components.compression.torch_topk import TorchRowTopK
from components.core.errors import ConfigError
from components.core.netsim import Link
from components.core.params import parse_params
from components.data.char_corpus import build_corpus, sample_batch
from components.models.gpt import GPTConfig
from components.training.subspace_pp.codecs import CODECS, BoundaryCodec
from components.training.subspace_pp.model import build_stages
from components.training.subspace_pp.schedule import gpipe_step_s
from components.training.subspace_pp.stage import StageWorker
from components.training.subspace_pp.technique import SubspacePPParams, reference_errors

V, D, K, CTX = 40, 32, 4, 16


def _cfg(n_layer=4):
    return GPTConfig(vocab_size=V, n_layer=n_layer, n_head=2, d_model=D, context=CTX, tie_embeddings=False)


def _pipeline(codec: str, stages: int = 4, micro: int = 2, seed: int = 0, k: int = K):
    st, const = build_stages(_cfg(stages), stages, seed, k, ssn=codec == "ssn")
    ref = copy.deepcopy(st)
    cod = [BoundaryCodec(codec, D, const["basis"], const["table"], 4, "fp32", V) for _ in range(stages - 1)]
    workers = [StageWorker(s, stages, st[s], cod[s - 1] if s else None, cod[s] if s < stages - 1 else None,
                           1e-3, 0.0, micro) for s in range(stages)]
    return workers, ref, const


def _run_step(workers, x, y, micro):
    """The GPipe order in one process: every forward, then every backward."""
    losses = []
    for m, (xm, ym) in enumerate(zip(x.chunk(micro), y.chunk(micro))):
        o = xm
        for s, w in enumerate(workers):
            o = w.forward(0, m, o, ym if s == len(workers) - 1 else None)
        losses.append(o)
    for m in range(micro):
        g = None
        for w in reversed(workers):
            g = w.backward(m, g)
    return float(np.mean(losses))


def _batch(seed=0, b=4):
    data = np.random.default_rng(seed).integers(0, V, 5000).astype(np.int16)
    return sample_batch(data, b, CTX, np.random.default_rng(seed))


def test_ssn_round_trip_is_exact_and_naive_projection_is_not():
    # Prepare: an SSN stage-0 output (embedding + one constrained block) and the same for the dense model
    x, _ = _batch()
    for codec, exact in (("ssn", True), ("naive", False)):
        st, const = build_stages(_cfg(), 4, 0, K, ssn=codec == "ssn")
        for p in st[0].parameters():   # non-zero (not zero-init) projections: the stream really moves
            if p.dim() > 1:
                torch.nn.init.normal_(p, 0.0, 0.1)
        with torch.no_grad():
            y = st[0](x)
        c = BoundaryCodec(codec, D, const["basis"], const["table"], vocab=V)
        # Execute
        rebuilt, nbytes = c.roundtrip(y, x)
        err = float((rebuilt - y).norm() / y.norm())
        # Assert: SSN rebuilds x within 1e-5 relative (fp32); the fixed projection of a free model loses most of it
        assert (err < 1e-5) if exact else (err > 0.1), (codec, err)
        assert nbytes == x.numel() * (4 * K + (1 if codec == "ssn" else 0))


def test_gradient_across_one_ssn_boundary_equals_direct_autograd():
    # Prepare: y in T_fix[tok] + span(U), a loss on the far side of the boundary
    _, const = build_stages(_cfg(), 4, 0, K, ssn=True)
    c = BoundaryCodec("ssn", D, const["basis"], const["table"], vocab=V)
    tok = torch.randint(0, V, (2, CTX))
    y = (torch.randn(2, CTX, K) @ const["basis"].T + const["table"][tok]).requires_grad_(True)
    w = torch.randn(D)
    # Execute: through the boundary (send k coordinates, rebuild, send dL/dt back) and directly
    t = c.pre(y, tok)
    t_hat, tok_rx = c.decode(c.encode(t, tok), (2, CTX))
    leaf = t_hat.requires_grad_(True)
    (torch.tanh(c.post(leaf, tok_rx)) @ w).sum().backward()
    gmsg = c.encode_grad(leaf.grad)
    t.backward(c.decode_grad(gmsg, (2, CTX)))
    y2 = y.detach().clone().requires_grad_(True)
    (torch.tanh(y2) @ w).sum().backward()
    # Assert: the token ids survive; the gradient reaching y is the exact one projected on span(U)
    assert torch.equal(tok_rx, tok)
    proj = y2.grad @ const["basis"] @ const["basis"].T
    assert float((y.grad - proj).norm() / proj.norm()) < 1e-5
    assert gmsg.numel() == 2 * CTX * K * 4


@pytest.mark.parametrize("codec, fwd, bwd", [("fp32", 4 * D, 4 * D), ("bf16", 2 * D, 2 * D), ("int8", D + 4, D + 4),
                                             ("topk", 4 * 5, 4 * 5), ("naive", 4 * K, 4 * K), ("ssn", 4 * K + 1, 4 * K)])
def test_bytes_per_token_of_each_codec(codec, fwd, bwd):
    # Prepare: a 2-stage pipeline, one micro-batch of 4 x 16 tokens
    workers, _, _ = _pipeline(codec, stages=2, micro=1)
    x, y = _batch()
    # Execute
    _run_step(workers, x, y, 1)
    out = workers[0].step(1e-3), workers[1].step(1e-3)
    # Assert: the payloads really produced, per token (top-k: 4 fp32 values + 4 uint8 indices)
    assert out[0]["fwd_bytes"] == [x.numel() * fwd] and out[1]["bwd_bytes"] == [x.numel() * bwd]


def test_topk_codec_keeps_the_largest_and_sizes_its_payload():
    c = TorchRowTopK(2, 300)
    x = torch.zeros(3, 300)
    x[0, 7], x[0, 299], x[1, 0], x[1, 5], x[2, 1] = 5.0, -6.0, 1.0, 2.0, 3.0
    p = c.encode(x)
    assert p.numel() == c.payload_bytes(3) == 3 * 2 * (4 + 2)   # int16 indices above 256 columns
    assert torch.equal(c.decode(p, 3), x)


@pytest.mark.parametrize("codec", ["fp32", "ssn"])
def test_pipelined_loss_and_gradients_equal_one_process(codec):
    # Prepare: 4 stages of one block each, 2 micro-batches; the same model in one process
    workers, ref, _ = _pipeline(codec, stages=4, micro=2)
    x, y = _batch(b=4)
    # Execute
    loss = _run_step(workers, x, y, 2)
    lerr, gerr = reference_errors(ref, x, y, loss, [w.grads() for w in workers])
    # Assert: equal within 1e-5 (micro-batching only reorders the float sums)
    assert lerr < 1e-5 and gerr < 1e-5, (lerr, gerr)
    assert max(w.max_rel_err for w in workers) < 1e-5


def test_lossy_codecs_do_not_equal_one_process():
    workers, ref, _ = _pipeline("topk", stages=4, micro=2)
    x, y = _batch(b=4)
    loss = _run_step(workers, x, y, 2)
    _, gerr = reference_errors(ref, x, y, loss, [w.grads() for w in workers])
    assert gerr > 1e-3 and max(w.max_rel_err for w in workers) > 0.1


def test_gpipe_clock_overlaps_transfers_with_compute():
    # Prepare: 2 stages, 2 micro-batches, 1 s compute each, a link taking 1 s per message
    link = Link(8.0, 0.0)                       # 8 bit/s: one byte per second
    f = [[1.0, 1.0], [1.0, 1.0]]
    one = [[1, 1]]
    # Execute / Assert: F(0,0) 0-1, send 1-2, F(1,0) 2-3, F(1,1) 3-4 (m1 arrived at 3), B(1,0) 4-5,
    # send 5-6, B(1,1) 5-6, send 6-7; stage 0: F(0,1) 1-2, B(0,0) 6-7, B(0,1) 7-8
    assert gpipe_step_s(link, f, f, one, one) == pytest.approx(8.0)
    # no transfer time: the plain GPipe bubble, (M + S - 1) forwards + the same backwards
    assert gpipe_step_s(Link(math.inf), f, f, one, one) == pytest.approx(6.0)
    # latency is paid per message but overlaps: 0.5 s latency adds it once per hop on the critical path
    assert gpipe_step_s(Link(8.0, 0.5), f, f, one, one) > 8.0


@pytest.mark.parametrize("raw, key", [({"k": 64}, "k"), ({"stages": 3}, "stages"), ({"codec": "zip"}, "codec"),
                                      ({"micro_batches": 3}, "micro_batches"), ({"topk_keep": 0}, "topk_keep"),
                                      ({"links": {"l": {"bandwidth": "fast"}}}, "links.l.bandwidth"),
                                      ({"execution": "in_process", "steps": 5, "warmup": 1, "actor_check_steps": 6}, "actor_check_steps"),
                                      ({"execution": "in_process", "actor_check_steps": -1}, "actor_check_steps"),
                                      ({"execution": "in_process", "die_stage": 1, "die_at_step": 8}, "die_at_step")])
def test_bad_input_is_one_config_error(raw, key):
    with pytest.raises(ConfigError) as e:
        parse_params(SubspacePPParams, raw)
    assert key in str(e.value)


def test_every_codec_is_constructible():
    _, const = build_stages(_cfg(), 4, 0, K, ssn=True)
    for name in CODECS:
        assert BoundaryCodec(name, D, const["basis"], const["table"], vocab=V).name == name


def test_a_dying_stage_actor_ends_the_call_with_the_reason(ray_session):
    from components.core.context import RunContext
    from components.training.subspace_pp.technique import StageDied, run_subspace_pp

    # Prepare: a tiny 2-stage pipeline whose stage 1 process exits at step 1
    corpus = build_corpus(max_chars=20_000)
    p = parse_params(SubspacePPParams, {"n_layer": 2, "n_head": 2, "d_model": 16, "context": 16, "stages": 2,
                                        "micro_batches": 2, "batch": 4, "steps": 3, "warmup": 0, "k": 2,
                                        "topk_keep": 2, "eval_every": 10, "eval_batches": 1, "final_eval_batches": 1,
                                        "die_stage": 1, "die_at_step": 1, "timeout_s": 60, "codec": "ssn"})
    # Execute / Assert: Ray's actor-death error, naming the stage, no hang
    with pytest.raises(StageDied, match=r"pipeline stage \[1\] actor died at step 1: .*Actor"):
        run_subspace_pp(p, RunContext(seed=0, inputs={"corpus": corpus}))


def test_in_process_without_actor_check_starts_no_actor_and_reuses_the_last_evaluation():
    from components.core.context import RunContext
    from components.training.subspace_pp.technique import run_subspace_pp

    # Prepare: a tiny 2-stage pipeline in process, no actor check, the curve on the final loss's windows
    corpus = build_corpus(max_chars=20_000)
    raw = {"n_layer": 2, "n_head": 2, "d_model": 16, "context": 16, "stages": 2, "micro_batches": 2, "batch": 4,
           "steps": 4, "warmup": 0, "k": 2, "eval_every": 3, "eval_batches": 2, "final_eval_batches": 2,
           "codec": "ssn", "execution": "in_process", "actor_check_steps": 0}
    # Execute: no Ray session exists, so a stage actor would fail the call
    res = run_subspace_pp(parse_params(SubspacePPParams, raw), RunContext(seed=0, inputs={"corpus": corpus}))
    more = run_subspace_pp(parse_params(SubspacePPParams, {**raw, "final_eval_batches": 3}),
                           RunContext(seed=0, inputs={"corpus": corpus}))
    # Assert: the actor figures say "not checked"; the curve ends on the final loss (steps 0, 3, 4)
    m = res.metrics
    assert all(math.isnan(m[k]) for k in ("actor_vs_local_loss_err", "actor_vs_local_weight_err", "actor_bytes_match"))
    steps, vals = res.series["val_loss"]
    assert list(steps) == [0, 3, 4] and m["final_val_loss"] == vals[-1] == m["last_eval_loss"]
    # with more final windows than the curve's, the final loss is its own evaluation of the same weights
    assert more.series["val_loss"][1][-1] == vals[-1] and more.metrics["final_val_loss"] != vals[-1]


def test_debug_experiment_end_to_end(run_experiment):
    out = run_experiment("subspace_model_parallel")
    for name in ("dense_fp32", "topk", "ssn_k4"):
        v = out.variants[name]
        assert v.status == "FINISHED", (name, v.status, v.error)
    m = out.variants["ssn_k4"].result.metrics
    assert m["max_boundary_rel_err"] < 1e-5 and m["grad_rel_err"] < 1e-5
    # in_process training: its first steps also ran on the stage actors, bitwise equal
    assert out.variants["ssn_k4"].result.info["execution"] == "in_process"
    assert m["actor_vs_local_loss_err"] == 0 and m["actor_vs_local_weight_err"] == 0 and m["actor_bytes_match"] == 1
    assert m["bytes_per_step"] < out.variants["dense_fp32"].result.metrics["bytes_per_step"] / 4
    assert "val_loss_vs_sim_s_link80" in out.variants["ssn_k4"].result.series
    # reach: time to dense's own last loss, per seed; dense gets there by its last evaluation at the latest
    d = out.variants["dense_fp32"].result
    assert 0 < d.metrics["sim_time_to_target_s_link80"] <= d.series_xy("val_loss_vs_sim_s_link80")[0][-1]
    assert "sim_time_to_target_s_link80" in m and "steps_to_target" in m
    # bandwidth share of boundary time: dense's messages are all one size n, so it is (8n/B) / (latency + 8n/B);
    # SSN's smaller messages are latency-bound sooner
    n = d.metrics["bytes_per_step"] / (2 * 1 * 2)   # debug: 1 boundary, 2 micro-batches, both directions
    for link, bw, lat in (("b80_l5", 80e6, 5e-3), ("b300_l50", 300e6, 50e-3)):
        ser = 8 * n / bw
        assert d.metrics[f"bandwidth_share_{link}"] == pytest.approx(ser / (ser + lat))
    assert m["bandwidth_share_b80_l5"] < d.metrics["bandwidth_share_b80_l5"]


@pytest.mark.slow
def test_a_dying_stage_actor_ends_the_variant_failed_through_the_dag(run_experiment, mlflow_client):
    out = run_experiment("subspace_model_parallel", "only=[ssn_k4]", "++experiment.variants.ssn_k4.params.die_stage=1")
    v = out.variants["ssn_k4"]
    assert v.status == "FAILED" and "pipeline stage [1] actor died" in v.error, (v.status, v.error)
    run = mlflow_client.get_run(v.run_id)
    assert run.info.status == "FAILED" and "actor died" in run.data.tags.get("error", "")


def test_peak_rss_counts_each_process_once():
    # Prepare: in in_process mode every stage reports the driver's pid; in actor mode, its own
    import os

    from components.training.subspace_pp.technique import peak_rss_mb

    me = os.getpid()
    local = [{"pid": me, "peak_rss_mb": 1.0} for _ in range(4)]
    actors = [{"pid": 10_000_000 + i, "peak_rss_mb": 100.0} for i in range(4)]
    # Execute
    driver_only, with_actors = peak_rss_mb(local), peak_rss_mb(actors)
    # Assert: the driver once (its own figure, not the stages' 4 copies), plus each actor
    assert driver_only == peak_rss_mb([])
    assert with_actors == driver_only + 400.0
