"""Every DDP comm hook trains the debug GPT for a few steps on 2 gloo workers, counting its bytes;
the functional AdamW equals torch's; a dying Ray Train worker ends the run with its reason."""
import json
import socket
import time

import pytest
import torch
import torch.multiprocessing as mp

from components.compression.torch_codecs import make_torch_codec
from components.training.ddp.optim import AdamW, lr_at
from tests.training import dp_workers


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def hook_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("hooks") / "runs.json"
    mp.spawn(dp_workers.hooks_worker, args=(2, _port(), str(out)), nprocs=2, join=True)
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", list(dp_workers.METHODS))
def test_hook_trains_and_ranks_agree(hook_runs, name):
    r0, r1 = hook_runs[0][name], hook_runs[1][name]
    loss = r0["train_loss"]
    assert all(map(lambda v: v == v and v < 10, loss))
    assert sum(loss[-3:]) / 3 < sum(loss[:3]) / 3 - 0.05          # it learns in 12 steps
    assert abs(r0["param_checksum"] - r1["param_checksum"]) < 1e-6 * max(1, abs(r0["param_checksum"]))


@pytest.mark.parametrize("name", list(dp_workers.METHODS))
def test_hook_counts_its_bytes(hook_runs, name):
    r = hook_runs[0][name]
    n, steps = r["n_params"], dp_workers.BASE_CFG["steps"]
    cfg = {**dp_workers.BASE_CFG, **dp_workers.METHODS[name]}
    fast = r["paths"]["fast"]
    assert fast["calls"] == steps
    if name == "fp32":
        assert fast["bytes"] == steps * 4 * n
    elif name == "powersgd":  # plain all-reduce before start_powerSGD_iter, then low-rank factors
        start = cfg["powersgd_start"]
        assert fast["bytes"] < steps * 4 * n
        assert fast["bytes"] > start * 4 * n
    else:
        per = make_torch_codec(cfg["bits"], cfg["bucket"]).payload_bytes(n)
        assert fast["bytes"] == steps * per
        assert fast["collectives"] == (0 if cfg["bits"] == 0 else steps)
    if name.startswith("duo"):  # the slow path: one fp32 all-reduce of the cached gradient per step
        assert r["paths"]["slow"]["bytes"] == steps * 4 * n
        assert r["paths"]["slow"]["calls"] == steps


def test_plain_1bit_differs_from_fp32_and_duo_tracks_fp32(hook_runs):
    r = hook_runs[0]
    fp = r["fp32"]["param_checksum"]
    assert abs(r["plain1"]["param_checksum"] - fp) > 1e-4      # compression really changed the update
    # DUO commits the exact gradients: final weights close to fp32's (Adam one step late), far from plain 1-bit's
    assert abs(r["duo1"]["final_val_loss"] - r["fp32"]["final_val_loss"]) < 0.05


def test_functional_adamw_equals_torch():
    torch.manual_seed(0)
    ps = [torch.randn(5, 3), torch.randn(4)]
    mine = [p.clone() for p in ps]
    ref = [torch.nn.Parameter(p.clone()) for p in ps]
    topt = torch.optim.AdamW([{"params": [ref[0]], "weight_decay": 0.1}, {"params": [ref[1]], "weight_decay": 0.0}],
                             lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    opt = AdamW(mine, weight_decay=0.1)
    for step in range(5):
        gs = [torch.randn_like(p) for p in ps]
        lr = lr_at(step, 5, 1e-2, 2, 0.1)
        for g in topt.param_groups:
            g["lr"] = lr
        for p, g in zip(ref, gs):
            p.grad = g.clone()
        topt.step()
        preview = [torch.empty_like(p) for p in mine]
        opt.update(mine, gs, lr, preview, write=False)  # a preview leaves the state alone
        assert opt.k == step
        opt.update(mine, gs, lr, mine, write=True)
        assert all(torch.allclose(a, b) for a, b in zip(preview, mine))
    assert all(torch.allclose(a, b.detach(), atol=1e-6) for a, b in zip(mine, ref))


def test_dead_worker_fails_the_run_with_reason(ray_session, tmp_path):
    from components.data.char_corpus import build_corpus
    from components.training.ddp.loop import train_worker
    from components.training.ddp.runner import DataParallelFailed, fit

    corpus = build_corpus(max_chars=20_000)
    cfg = {**dp_workers.BASE_CFG, "method": "fp32", "seed": 0, "steps": 50, "fail_at": [1, 3],
           "vocab_size": corpus.vocab_size, "train": corpus.train, "val": corpus.val}
    t0 = time.time()
    with pytest.raises(DataParallelFailed) as e:
        fit(train_worker, cfg, 2, 0.5, tmp_path, "dies", timeout_s=20)
    assert time.time() - t0 < 120
    msg = str(e.value)
    assert "failed" in msg and ("exit" in msg.lower() or "died" in msg.lower() or "actor" in msg.lower()), msg


def _adamw_pair(wd):
    """Two AdamW with the same state: one stepped by the fused kernel, one by the unfused reference."""
    torch.manual_seed(1)
    flat = torch.randn(5 * 3 + 4 + 6 * 2)
    sizes, shapes = [15, 4, 12], [(5, 3), (4,), (6, 2)]
    views = lambda f: [s.view(sh) for s, sh in zip(f.split(sizes), shapes)]  # noqa: E731
    a, b = flat.clone(), flat.clone()
    return (a, views(a), AdamW(views(a), weight_decay=wd)), (b, views(b), AdamW(views(b), weight_decay=wd)), views


@pytest.mark.parametrize("wd", [0.1, "mask"])
def test_fused_adamw_equals_unfused_reference(wd):
    """The fused kernel (commit in place, preview into another tensor) equals the unfused formula, with a
    number (decay on ndim >= 2) or one value per parameter (a per-element mask included)."""
    if wd == "mask":
        wd = [0.1, 0.0, torch.linspace(0.0, 0.2, 12).view(6, 2)]
    (fa, va, oa), (fb, vb, ob), views = _adamw_pair(wd)
    for step in range(6):
        gs = [torch.randn_like(p) for p in va]
        lr = lr_at(step, 6, 1e-2, 2, 0.1)
        pa, pb = [torch.empty_like(p) for p in va], [torch.empty_like(p) for p in vb]
        oa.update(va, gs, lr, pa, write=False)
        ob.update_reference(vb, gs, lr, pb, write=False)
        assert oa.k == ob.k == step
        assert all(torch.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in zip(pa, pb))
        oa.update(va, gs, lr, va, write=True)
        ob.update_reference(vb, gs, lr, vb, write=True)
        assert torch.allclose(fa, fb, rtol=1e-5, atol=1e-7)
        assert torch.allclose(oa.m_flat, ob.m_flat, rtol=1e-5, atol=1e-8)
        assert torch.allclose(oa.v_flat, ob.v_flat, rtol=1e-5, atol=1e-10)


def test_commit_preview_equals_commit_then_preview():
    """DUO's fused optimizer step: commit with gbar_{t-1} (state advances), preview with qbar_t from the new
    committed weights into the working weights (state untouched) = the two unfused updates in sequence; the
    gradient may come as views into another buffer (DUO's cache is in DDP's bucket order)."""
    (ca, va, oa), (cb, vb, ob), views = _adamw_pair(0.1)
    wa, wb = [torch.empty_like(p) for p in va], [torch.empty_like(p) for p in vb]
    for step in range(5):
        bucket = torch.randn(31)                                     # the reduced cache, reversed layout
        gbar = [bucket[16:].view(5, 3), bucket[12:16], bucket[:12].view(6, 2)]
        qbar = [torch.randn_like(p) for p in va]
        lr_c, lr = lr_at(step, 5, 1e-2, 2, 0.1), lr_at(step + 1, 5, 1e-2, 2, 0.1)
        oa.commit_preview(va, gbar, lr_c, qbar, lr, wa)
        ob.update_reference(vb, gbar, lr_c, vb, write=True)
        ob.update_reference(vb, qbar, lr, wb, write=False)
        assert oa.k == ob.k == step + 1
        assert torch.allclose(ca, cb, rtol=1e-5, atol=1e-7)
        assert all(torch.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in zip(wa, wb))
        assert torch.allclose(oa.m_flat, ob.m_flat, rtol=1e-5, atol=1e-8)


def test_fit_retries_only_a_removed_placement_group(monkeypatch, tmp_path):
    """Ray Train's placement-group cleaner may remove a live job's group under load: that run starts again
    once; a worker's own failure is never retried."""
    from components.training.ddp import runner

    calls = []

    def fake(msg):
        def _fit(*a, **k):
            calls.append(1)
            if len(calls) == 1 or msg.startswith("exit"):
                raise runner.DataParallelFailed(msg)
            return {"ok": 1}
        return _fit

    monkeypatch.setattr(runner, "_fit", fake("Destroying worker since its placement group was removed."))
    assert runner.fit(None, {}, 2, 0.5, tmp_path, "x") == {"ok": 1} and len(calls) == 2
    calls.clear()
    monkeypatch.setattr(runner, "_fit", fake("exit code 3"))
    with pytest.raises(runner.DataParallelFailed):
        runner.fit(None, {}, 2, 0.5, tmp_path, "x")
    assert len(calls) == 1
