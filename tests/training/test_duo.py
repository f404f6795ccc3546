"""DUO: the SGD closed form step by step on 2 gloo workers, Adam's committed path, bad input, and the
debug experiment end to end through the DAG."""
import socket
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp

from components.core.errors import ConfigError
from components.training.duo.fast_slow import DuoStrategy
from components.training.duo.technique import DuoParams
from tests.training import dp_workers


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def closed_form(tmp_path_factory):
    out = tmp_path_factory.mktemp("duo") / "cf.pt"
    mp.spawn(dp_workers.closed_form_worker, args=(2, _port(), str(out)), nprocs=2, join=True)
    return torch.load(out)


def test_duo_sgd_equals_closed_form(closed_form):
    """w_{t+1} = w_t - lr qbar_t - lr (gbar_{t-1} - qbar_{t-1}): each quantization error is replaced by
    the exact averaged gradient one step later."""
    ws, gb, qb, lr = closed_form["ws"], closed_form["gbars"], closed_form["qbars"], closed_form["lr"]
    for t in range(len(gb)):
        assert torch.allclose(closed_form["ddp_q"][t], qb[t], atol=1e-6)   # the hook's fast path = mean of codes
        assert torch.allclose(closed_form["committed"][t + 1], closed_form["committed"][t] - lr * gb[t], atol=1e-6) \
            if t + 1 < len(gb) else True
        expect = ws[t] - lr * qb[t]
        if t > 0:
            expect = expect - lr * (gb[t - 1] - qb[t - 1])
        assert torch.allclose(ws[t + 1], expect, atol=1e-6), f"step {t}"
        assert (qb[t] - gb[t]).norm() > 0.1 * gb[t].norm()      # the 1-bit error is not negligible
    # after the last commit: exact SGD on the averaged gradients, no quantization error left
    assert torch.allclose(closed_form["final"], ws[0] - lr * torch.stack(gb).sum(0), atol=1e-6)


class _Bucket:
    """A DDP GradBucket stand-in: parameters laid out in ``order`` inside ``buf``."""

    def __init__(self, buf, params, order):
        self._buf, self._params, self._grads, o = buf, [params[i] for i in order], [], 0
        for i in order:
            self._grads.append(buf[o:o + params[i].numel()].view_as(params[i]))
            o += params[i].numel()

    def buffer(self):
        return self._buf

    def index(self):
        return 0

    def parameters(self):
        return self._params

    def gradients(self):
        return self._grads


def test_cache_follows_a_rebuilt_bucket_at_the_freed_buffers_address():
    """DDP's bucket rebuild after step 0 can reorder the same parameters in a buffer at the old
    buffer's address: the cached gradient views must follow the new layout (stale views sent each
    rank's committed weights their own way: CI saw DUO-0bit ranks disagree)."""
    # Prepare: two parameters, one bucket buffer reused at the same address with the order swapped
    strat = DuoStrategy.__new__(DuoStrategy)
    strat.parity, strat.bufs, strat.layouts, strat.cached, strat.cached_bufs = 0, {}, {}, {}, []
    p0, p1 = torch.zeros(2), torch.zeros(3)
    buf = torch.empty(5)
    buf.copy_(torch.tensor([1.0, 2.0, 10.0, 20.0, 30.0]))            # layout [p0, p1]
    strat._cache(_Bucket(buf, [p0, p1], [0, 1]))
    strat.cached, strat.cached_bufs = {}, []
    buf.copy_(torch.tensor([10.0, 20.0, 30.0, 1.0, 2.0]))            # rebuilt: layout [p1, p0], same address
    # Execute
    strat._cache(_Bucket(buf, [p0, p1], [1, 0]))
    # Assert: each parameter's cached gradient is its own
    assert strat.cached[id(p0)].tolist() == [1.0, 2.0]
    assert strat.cached[id(p1)].tolist() == [10.0, 20.0, 30.0]


def test_bad_input_is_rejected():
    for kw in ({"bits": 3}, {"bucket": 0}, {"workers": 100_000}, {"fail_at": [5, 1]}):
        with pytest.raises(ConfigError):
            DuoParams(**{**dict(workers=2), **kw}).check()


def test_cli_rejects_bad_bits_before_ray():
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "experiment=duo", "debug=true",
                        "experiment.variants.duo4.params.bits=3", "runs_dir=/tmp/duo-bad-input"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "bits" in (r.stdout + r.stderr)


@pytest.mark.slow   # two Ray Train jobs per variant, ~55 s: runs in `make bench` (keeps `make test` in its 15 minutes)
def test_debug_experiment_end_to_end(run_experiment, mlflow_client):
    """The debug flavour of `duo` through the DAG: 2 variants, fp32 on 2 seeds (one Ray Train job per
    variant and seed, 10-30 s each here); the other variants run in the slow test below and in `make bench`."""
    out = run_experiment("duo", "only=[fp32,duo4]", "++experiment.variants.fp32.seeds=[0,1]")
    runs = {n: o for n, o in out.variants.items() if o.status == "FINISHED"}
    assert set(runs) == {"fp32", "duo4"}, {n: (o.status, o.error) for n, o in out.variants.items()}
    for name, o in runs.items():
        m = o.result.metrics
        for k in ("final_val_loss", "bytes_per_step", "sim_step_s", "tokens_per_s", "slow_fwd_ratio"):
            assert k in m and m[k] == m[k], (name, k)
        assert m["ranks_agree"] == 1.0
        assert "val_loss" in o.result.series
        run = mlflow_client.get_run(o.run_id)
        assert run.info.status == "FINISHED" and "final_val_loss" in run.data.metrics
        assert len(mlflow_client.get_metric_history(o.seeds[0].run_id, "val_loss")) >= 3
    assert runs["duo4"].result.metrics["bytes_slow_per_step"] == 4 * runs["duo4"].result.metrics["n_params"]
    # one job per seed: each seed trains from its own init and batches, the DAG aggregates them
    fp = runs["fp32"]
    assert sorted(fp.seeds) == [0, 1] and fp.result.metrics["final_val_loss_n"] == 2
    per_seed = [fp.seeds[s].result.metrics["final_val_loss"] for s in (0, 1)]
    assert per_seed[0] != per_seed[1] and fp.result.metrics["final_val_loss_se"] > 0
    judged = {c.name: c for c in out.claims}
    assert not judged["duo_4bit_matches_fp32"].error and not judged["duo_4bit_matches_fp32"].skipped
    assert judged["plain_1bit_degrades"].skipped             # q1 did not run: neither holds nor fails


@pytest.mark.slow
def test_debug_experiment_all_variants(run_experiment):
    out = run_experiment("duo")
    assert not out.failed and len(out.variants) == 8
    # every claim is judged (each variant runs at its own best LR; no variant is dropped in debug)
    assert all(not c.skipped and not c.error for c in out.claims), [(c.name, c.error) for c in out.claims]
    # the in-process ranks trained duo1's first 20 steps exactly as its Ray Train job of gloo processes
    assert out.variants["duo1"].result.metrics["ray_check_bitwise"] == 1.0
    assert {c.name: c.holds for c in out.claims}["in_process_ranks_equal_ray_train"] is True
