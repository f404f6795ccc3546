"""MeCeFO without Ray: full rank and no attention skip is exact; each approximation changes the
gradients only where it should; saved-activation accounting; the failure schedule and ring takeover;
the virtual clock; bad input (one line, exit 2 before Ray)."""
import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F

from components.core.errors import ConfigError
from components.models.gpt import GPT, GPTConfig
from components.training.mecefo import simtime
from components.training.mecefo.approx import (Approx, Bases, LowRankLinear, SavedBytes, ffn_linears, grad_of,
                                               microbatch_loss, projection)
from components.training.mecefo.schedule import failure_schedule, fixed_schedule, recoveries, takeover
from components.training.mecefo.technique import MeCeFOParams

D = 16


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models: one thread (two threads on a loaded 2-core machine run these 10x slower)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _model_and_batch(n_layer=2, seed=0):
    torch.manual_seed(seed)
    m = GPT(GPTConfig(vocab_size=40, n_layer=n_layer, n_head=2, d_model=D, context=16))
    g = torch.Generator().manual_seed(seed + 1)
    return m, torch.randint(0, 40, (4, 16), generator=g), torch.randint(0, 40, (4, 16), generator=g)


def _grads(m, x, y, a, seed=0):
    m.zero_grad(set_to_none=True)
    microbatch_loss(m, x, y, a, torch.Generator().manual_seed(seed)).backward()
    out = {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in m.named_parameters()}
    m.zero_grad(set_to_none=True)
    return out


def _ffn_weight(name):
    return name.endswith(("mlp.0.weight", "mlp.2.weight"))


def test_full_rank_without_attention_skip_equals_exact_gradients():
    # Prepare: a 2-layer GPT, one micro-batch
    m, x, y = _model_and_batch()
    # Execute: exact, and MeCeFO with r = FFN width (P = I through the low-rank backward) + recomputation
    exact = grad_of(m, x, y, None)
    full = grad_of(m, x, y, Approx(skip_attn=False, recompute_ffn=True, lowrank=True, rank=4 * D))
    # Assert: equal within 1e-6 (sheet acceptance 5)
    assert float((full - exact).abs().max()) < 1e-6


def test_attention_skip_changes_only_what_is_upstream_of_attention():
    # Prepare
    m, x, y = _model_and_batch()
    # Execute: attention skipped in backward, nothing else
    ex = _grads(m, x, y, None)
    sk = _grads(m, x, y, Approx(skip_attn=True, recompute_ffn=False, lowrank=False))
    # Assert: downstream of the last attention (head, final LN, last FFN) is exact; attention weights get
    # nothing from this micro-batch; gradient still reaches the embeddings through the residual path
    for n in ("ln_f.weight", "blocks.1.mlp.0.weight", "blocks.1.mlp.2.weight", "blocks.1.ln2.weight"):
        assert torch.allclose(sk[n], ex[n], atol=1e-7), n
    for n in ("blocks.0.attn.qkv.weight", "blocks.1.attn.proj.weight", "blocks.1.ln1.weight"):
        assert float(sk[n].abs().max()) == 0.0 and float(ex[n].abs().max()) > 0, n
    assert float(sk["pos.weight"].abs().max()) > 0
    assert float((sk["blocks.0.mlp.0.weight"] - ex["blocks.0.mlp.0.weight"]).abs().max()) > 1e-6


def test_low_rank_changes_only_ffn_weight_gradients_and_is_unbiased():
    # Prepare
    m, x, y = _model_and_batch(n_layer=1)
    a = Approx(skip_attn=False, recompute_ffn=False, lowrank=True, rank=2, basis="gaussian")
    ex = _grads(m, x, y, None)
    # Execute: many projection draws
    draws = [_grads(m, x, y, a, seed=s) for s in range(80)]
    # Assert: every gradient but the FFN weights' is exact (input gradients G W stay exact) ...
    for n in ex:
        if not _ffn_weight(n):
            assert torch.allclose(draws[0][n], ex[n], atol=1e-6), n
    # ... the FFN weights' differ per draw, and their mean approaches the exact gradient (E[P P^T] = I)
    w = "blocks.0.mlp.2.weight"
    one = float((draws[0][w] - ex[w]).norm() / ex[w].norm())
    mean = float((torch.stack([d[w] for d in draws]).mean(0) - ex[w]).norm() / ex[w].norm())
    assert one > 0.5 and mean < one / 5, (one, mean)


def test_svd_basis_projects_the_ffn_weight_gradient_on_w_top_right_singular_vectors():
    # Prepare: the paper's basis, rank 4 of 16 / 64
    m, x, y = _model_and_batch(n_layer=1)
    a = Approx(skip_attn=False, recompute_ffn=False, lowrank=True, rank=4, basis="svd")
    ex = _grads(m, x, y, None)
    # Execute: two different generators (the SVD basis draws nothing)
    g1, g2 = _grads(m, x, y, a, seed=1), _grads(m, x, y, a, seed=2)
    # Assert: deterministic; each FFN weight gradient is the exact one times V_r V_r^T of its weight
    for n, p in m.named_parameters():
        assert torch.equal(g1[n], g2[n]), n
        if _ffn_weight(n):
            V = torch.linalg.svd(p.detach(), full_matrices=False).Vh[:4].t()
            assert torch.allclose(g1[n], ex[n] @ V @ V.t(), atol=1e-5), n
            assert not torch.allclose(g1[n], ex[n], atol=1e-4), n
        else:
            assert torch.allclose(g1[n], ex[n], atol=1e-6), n


def test_held_svd_bases_give_the_gradient_of_bases_computed_now():
    # Prepare: the svd bases of the current weights, held
    m, x, y = _model_and_batch(n_layer=2)
    a = Approx(skip_attn=True, recompute_ffn=True, lowrank=True, rank=4, basis="svd", refresh=50)
    bases = Bases(a).at(m, 0)
    # Execute
    held = grad_of(m, x, y, a, bases=bases)
    now = grad_of(m, x, y, a)
    # Assert: the same weights, the same projections, the same gradient bit for bit
    assert torch.equal(held, now) and bases.refreshes == 1 and bases.seconds > 0


def test_svd_bases_are_refreshed_at_window_starts_from_that_steps_weights():
    # Prepare: refresh every 3 steps; the weights move every step
    m, _, _ = _model_and_batch(n_layer=1)
    bases = Bases(Approx(rank=4, refresh=3))
    seen = []
    # Execute
    for step in range(7):
        bases.at(m, step)
        seen.append([P.clone() for P in bases.Ps])
        with torch.no_grad():
            for lin in ffn_linears(m):
                lin.weight.add_(0.05 * torch.randn_like(lin.weight))
    # Assert: refreshed at 0, 3, 6; held between; each P the svd basis of the weights it was refreshed on
    assert bases.refreshes == 3
    same = [all(torch.equal(p, q) for p, q in zip(seen[t], seen[t - 1])) for t in range(1, 7)]
    assert same == [True, True, False, True, True, False]
    for lin, P in zip(ffn_linears(m), bases.Ps):      # step 6's weights moved after the refresh
        assert not torch.allclose(P, projection(lin.weight, 4, None, "svd"), atol=1e-4)


def test_gaussian_or_full_rank_modes_never_use_held_svd_bases():
    # Prepare: held rank-4 svd bases; a gaussian mode and a full-rank mode
    m, x, y = _model_and_batch(n_layer=1)
    bases = Bases(Approx(rank=4)).at(m, 0)
    gauss = Approx(rank=4, basis="gaussian")
    full = Approx(skip_attn=False, rank=4 * D)
    # Execute / Assert: each equals its own computation without bases
    assert torch.equal(grad_of(m, x, y, gauss, torch.Generator().manual_seed(3), bases=bases),
                       grad_of(m, x, y, gauss, torch.Generator().manual_seed(3)))
    assert torch.allclose(grad_of(m, x, y, full, bases=bases), grad_of(m, x, y, None), atol=1e-6)


@pytest.mark.parametrize("block", ["pre_ln", "fal_plus"])
def test_skipped_params_are_exactly_those_a_skipped_micro_batch_leaves_without_gradient(block):
    # Prepare
    from components.training.mecefo.approx import skipped_params

    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=40, n_layer=2, n_head=2, d_model=D, context=16, block=block))
    x, y = torch.randint(0, 40, (4, 16)), torch.randint(0, 40, (4, 16))
    # Execute
    m.zero_grad(set_to_none=True)
    microbatch_loss(m, x, y, Approx(skip_attn=True, lowrank=False)).backward()
    # Assert
    assert {id(p) for p in m.parameters() if p.grad is None} == {id(p) for p in skipped_params(m)}


def test_a_skipped_attention_gets_the_mean_over_the_micro_batches_that_computed_it():
    # Prepare: 4 replicas, replica 0 down and carried by replica 1 (one of 4 micro-batches skips attention)
    from components.training.mecefo.approx import skipped_mask
    from components.training.mecefo.train import finish_grad

    m, _, _ = _model_and_batch()
    mask = skipped_mask(m)
    g = torch.ones(mask.numel())
    loads = {1: [1, 0], 2: [2], 3: [3]}
    # Execute
    mean = finish_grad(g.clone(), mask, loads, "mecefo", Approx(), False, 4)
    summed = finish_grad(g.clone(), mask, loads, "mecefo", Approx(attn_mean=False), False, 4)
    exact = finish_grad(g.clone(), mask, loads, "ndb", Approx(), False, 4)
    # Assert: attention entries x 4/3 (3 computed it), the rest as reduced
    assert 0 < int(mask.sum()) < mask.numel()
    assert torch.allclose(mean[mask], torch.full((int(mask.sum()),), 4 / 3)) and torch.equal(mean[~mask], g[~mask])
    assert torch.equal(summed, g) and torch.equal(exact, g)


def test_recomputation_changes_memory_not_gradients():
    m, x, y = _model_and_batch()
    plain = Approx(skip_attn=True, recompute_ffn=False, lowrank=False)
    rec = Approx(skip_attn=True, recompute_ffn=True, lowrank=False)
    g_plain, g_rec = grad_of(m, x, y, plain), grad_of(m, x, y, rec)
    sizes = {}
    for name, a in (("exact", None), ("plain", plain), ("rec", rec)):
        with SavedBytes(m) as sb:
            microbatch_loss(m, x, y, a)
        sizes[name] = sb.nbytes
    assert float((g_plain - g_rec).abs().max()) < 1e-6
    assert sizes["rec"] < sizes["plain"] < sizes["exact"], sizes


def test_saved_bytes_count_activations_not_weights():
    # Prepare: one linear layer's input (a parameter weight must not be counted)
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(5, 8, requires_grad=True)
    P = projection(lin.weight, 2, torch.Generator().manual_seed(0), "gaussian")
    # Execute
    with SavedBytes(lin) as exact:
        F.linear(x, lin.weight, lin.bias)
    with SavedBytes(lin) as low:
        LowRankLinear.apply(x, lin.weight, lin.bias, P)
    # Assert: exact keeps x (5 x 8 floats); the sketch keeps x P (5 x 2) and P (8 x 2)
    assert exact.nbytes == 5 * 8 * 4
    assert low.nbytes == (5 * 2 + 8 * 2) * 4


def test_schedule_is_seeded_keeps_one_replica_and_rings_takeover():
    a = failure_schedule(4, 300, 0.05, 50, seed=1)
    b = failure_schedule(4, 300, 0.05, 50, seed=1)
    assert a == b and a != failure_schedule(4, 300, 0.05, 50, seed=2)
    sets, events = a
    assert events and all(len(s) <= 3 for s in sets)
    t, i = events[0]
    assert all(i in sets[s] for s in range(t, min(t + 50, 300)))           # down for 50 steps
    assert failure_schedule(4, 300, 0.0, 50, seed=1)[1] == []
    assert takeover(frozenset({1, 2}), 4) == {0: [0], 3: [3, 1, 2]}
    assert takeover(frozenset({3}), 4) == {0: [0, 3], 1: [1], 2: [2]}      # the ring wraps
    sets, _ = fixed_schedule(4, 10, [(2, 1)], 3)
    assert [bool(s) for s in sets] == [False, False, True, True, True] + [False] * 5
    assert recoveries(sets) == [(5, 1)]


def test_virtual_clock_is_the_slowest_live_replica_plus_the_allreduce():
    sets = [frozenset(), frozenset({1}), frozenset({1, 2})]
    st = simtime.step_times(sets, 4, t_exact=1.0, t_take=0.5, t_own=1.0, allreduce_s=0.1)
    assert st == pytest.approx([1.1, 1.6, 2.1])          # none down; own + one taken; own + two taken
    total, lost = simtime.checkpoint_restart_s(100, [(10, 0), (75, 2)], 1.0, 30.0, 50)
    assert lost == pytest.approx(30 + 10 + 30 + 25) and total == pytest.approx(100 + lost)


@pytest.mark.parametrize("kw,key", [
    (dict(failure_rate=1.0), "failure_rate"),
    (dict(failure_rate=-0.1), "failure_rate"),
    (dict(rank=4 * 64 + 1), "rank"),                    # above the FFN width (4 x d_model)
    (dict(rank=-1), "rank"),
    (dict(actor_kills=[[30, 1]], actor_steps=24), "actor_kills"),
    (dict(n_head=3), "n_head"),
    (dict(refresh=0), "refresh"),
    (dict(recovery="ndb", clock_only=True), "clock_only"),   # only checkpoint-restart replays fault_free's run
])
def test_bad_input_is_one_config_error(kw, key):
    with pytest.raises(ConfigError) as e:
        MeCeFOParams(**kw).check()
    assert e.value.key == key and "\n" not in str(e.value)


def test_cli_rejects_a_failure_rate_of_one_before_ray(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "experiment=mecefo", "debug=true",
                        "experiment.common.mecefo.failure_rate=1.0", f"runs_dir={tmp_path}"],
                       capture_output=True, text=True, timeout=120)
    err = (r.stdout + r.stderr).strip()
    assert r.returncode == 2, err
    last = err.splitlines()[-1]
    assert "failure_rate" in last and "1.0" in last and "Ray" not in last


def test_batched_exact_pass_equals_the_per_replica_arithmetic():
    # Prepare: a schedule with takeovers, a tiny setup
    from components.data.char_corpus import build_corpus
    from components.training.mecefo.train import TrainSetup, params_vector, train

    c = build_corpus(max_chars=20_000)
    s = TrainSetup(n_layer=1, n_head=2, d_model=16, context=16, batch=2, steps=8, warmup=1)
    sets, _ = fixed_schedule(4, 8, [(1, 2), (3, 0)], 3)
    # Execute: the training path (exact micro-batches batched) and the actors' per-replica arithmetic
    w = {g: params_vector(train(s, c, 0, sets, "mecefo", Approx(), steps=8, evaluate=False, grouped=g)["model"])
         for g in (True, False)}
    # Assert: the same weights up to float summation order
    assert float((w[True] - w[False]).abs().max()) < 1e-5


def test_recovery_modes_on_one_schedule():
    # Prepare: a tiny setup, a timing table where a MeCeFO micro-batch costs 0.6 of an exact one and one refresh
    # of the svd bases 2 (every 10 steps: 0.2 a step)
    from components.core.context import RunContext
    from components.data.char_corpus import build_corpus
    from components.training.mecefo.technique import run_mecefo
    from components.training.mecefo.timing import all_modes

    c = build_corpus(max_chars=20_000)
    timing = {"modes": {k: {"s": 1.0 if a is None else 0.6, "saved_bytes": 100 if a is None else 10}
                        for k, a in all_modes(0).items()}, "svd_refresh_s": 2.0}
    kw = dict(n_layer=1, n_head=2, d_model=16, context=16, batch=2, steps=30, warmup=2, eval_every=10,
              eval_batch=4, eval_batches=1, final_eval_batches=1, failure_rate=0.1, down_steps=5, refresh=10)
    # Execute: every recovery mode on seed 0 (the same failure draws)
    ctx = lambda: RunContext(seed=0, inputs={"corpus": c, "timing": timing})  # noqa: E731
    m = {r: run_mecefo(MeCeFOParams(recovery=r, **kw), ctx()).metrics for r in ("fault_free", "ndb", "mecefo", "ckpt_restart")}
    clock = run_mecefo(MeCeFOParams(recovery="ckpt_restart", clock_only=True, **kw), ctx()).metrics
    # Assert: exact takeover = fault-free math; MeCeFO's approximations change the loss; the clock charges
    # NDB 2x and MeCeFO 1.6x per overloaded replica plus its refresh share (0.2), checkpoint-restart its restarts
    assert m["ndb"]["final_val_loss"] == m["fault_free"]["final_val_loss"] == m["ckpt_restart"]["final_val_loss"]
    assert m["mecefo"]["final_val_loss"] != m["fault_free"]["final_val_loss"]
    assert m["ndb"]["overloaded_step_ratio"] == 2.0 and m["mecefo"]["overloaded_step_ratio"] == pytest.approx(1.8)
    assert m["mecefo"]["refresh_share"] == pytest.approx(0.2) and m["mecefo"]["basis_refreshes"] == 3
    assert m["ndb"]["refresh_share"] == 0.0
    assert m["mecefo"]["saved_activation_ratio_timing"] == pytest.approx(1.1)
    assert abs(m["fault_free"]["throughput_loss"]) < 1e-12
    assert 0 < m["mecefo"]["throughput_loss"] < m["ndb"]["throughput_loss"]
    assert m["ckpt_restart"]["sim_lost_s"] >= 30.0 * m["ckpt_restart"]["failures"] > 0
    # checkpoint-restart's clock without its training (which replays fault_free's): the same clock, no loss
    assert "final_val_loss" not in clock
    assert {k: clock[k] for k in ("sim_step_s", "sim_lost_s", "throughput_loss", "failures", "saved_activation_ratio")} \
        == {k: m["ckpt_restart"][k] for k in ("sim_step_s", "sim_lost_s", "throughput_loss", "failures", "saved_activation_ratio")}
    assert 0 < m["mecefo"]["down_frac"] < 1 and -1 <= m["mecefo"]["grad_cosine"] <= 1
    assert m["mecefo"]["exact_mode_grad_err"] < 1e-6
