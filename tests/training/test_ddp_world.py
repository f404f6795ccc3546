"""In-process ranks (components/training/ddp/world.py) against gloo processes: the same sums, the same
training run bit for bit for every method and takeover, a failing rank that ends the run with its
reason, and the inputs that cannot run in process."""
import json
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from components.core.errors import ConfigError
from components.training.ddp.technique import DDPParams
from components.training.ddp.world import RankGroup, VirtualGroup, all_reduce, ring_sum
from tests.training import dp_workers

SIZES = [7, 1000, 300_001]   # the last: several gloo segments per chunk (1 MiB each)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _part(n: int, rank: int) -> torch.Tensor:
    """Values over 8 decades, so that the order of the additions shows in the last bits."""
    g = torch.Generator().manual_seed(1000 * n + rank)
    return torch.randn(n, generator=g) * torch.logspace(-6, 2, n)[torch.randperm(n, generator=g)]


def _allreduce_worker(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sums = []
    for n in SIZES:
        x = _part(n, rank)
        dist.all_reduce(x)
        sums.append(x)
    if rank == 0:
        torch.save(sums, out)
    dp_workers._exit_now(dist)


@pytest.mark.parametrize("world", [3, 4])
def test_ring_sum_equals_gloo_all_reduce_bit_for_bit(world, tmp_path):
    # Prepare
    out = tmp_path / "sums.pt"
    # Execute
    mp.spawn(_allreduce_worker, args=(world, _port(), str(out)), nprocs=world, join=True)
    gloo = torch.load(out)
    # Assert: the ring's order, not the ranks' order (which differs in the last bits from 3 ranks on)
    for n, real in zip(SIZES, gloo):
        parts = [_part(n, r) for r in range(world)]
        assert torch.equal(ring_sum(parts), real), n
        in_rank_order = torch.stack(parts).sum(0)
        assert not torch.equal(in_rank_order, real) or n < 10


CFGS = {n: {**dp_workers.BASE_CFG, **over, "check_steps": 6} for n, over in dp_workers.METHODS.items()
        if n != "powersgd"}
CFGS.update({f"takeover_{n}": {**dp_workers.BASE_CFG, "method": "fp32", **over, "check_steps": 6,
                                "model": dict(dp_workers.BASE_CFG["model"], n_layer=2)}
             for n, over in dp_workers.TAKEOVER.items()})
KEEP = ("param_checksum", "train_loss", "check_weights", "final_val_loss")


def _named_worker(rank: int, world: int, port: int, out: str) -> None:
    dp_workers._run_named(rank, world, port, out, CFGS, KEEP)


@pytest.fixture(scope="module")
def gloo_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("world") / "runs.json"
    mp.spawn(_named_worker, args=(2, _port(), str(out)), nprocs=2, join=True)
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", sorted(CFGS))
def test_in_process_ranks_train_as_gloo_processes_bit_for_bit(gloo_runs, name):
    # Prepare
    from components.data.char_corpus import build_corpus
    from components.training.ddp.loop import train_in_process

    corpus = build_corpus(max_chars=60_000)
    cfg = {**CFGS[name], "vocab_size": corpus.vocab_size, "seed": 0, "workers": 2, "train": corpus.train,
           "val": corpus.val}
    # Execute
    ranks = train_in_process(cfg)["ranks"]
    # Assert: every rank as its process counterpart, every figure equal (not close)
    for rank in (0, 1):
        assert ranks[rank]["param_checksum"] == gloo_runs[rank][name]["param_checksum"]
    assert ranks[0]["train_loss"] == gloo_runs[0][name]["train_loss"]
    assert ranks[0]["check_weights"] == gloo_runs[0][name]["check_weights"]
    assert ranks[0]["final_val_loss"] == gloo_runs[0][name]["final_val_loss"]


def test_a_failing_rank_ends_the_run_with_its_reason_and_nothing_waits():
    # Prepare
    from components.data.char_corpus import build_corpus
    from components.training.ddp.loop import train_in_process

    corpus = build_corpus(max_chars=60_000)
    cfg = {**CFGS["duo1"], "vocab_size": corpus.vocab_size, "seed": 0, "workers": 3, "train": corpus.train,
           "val": corpus.val, "fail_at": [1, 4]}
    # Execute / Assert: rank 1's error, not the other ranks' broken collectives
    with pytest.raises(RuntimeError, match=r"rank 1 of 3 failed: RankCrashed: simulated crash of rank 1 at step 4"):
        train_in_process(cfg)


def test_an_async_all_reduce_sums_what_each_rank_held_when_it_launched():
    # Prepare
    import threading

    vg = VirtualGroup(2)
    bufs = [torch.full((3,), 1.0), torch.full((3,), 2.0)]
    done = []

    def rank(r: int) -> None:
        work = all_reduce(bufs[r], group=RankGroup(vg, r), async_op=True)
        bufs[r].fill_(100.0)          # written after the launch: not part of the sum
        work.wait()
        done.append(r)

    # Execute
    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    # Assert
    assert sorted(done) == [0, 1]
    assert all(torch.equal(b, torch.full((3,), 3.0)) for b in bufs)


@pytest.mark.parametrize("over, key", [
    (dict(method="powersgd", execution="in_process"), "execution"),
    (dict(execution="threads"), "execution"),
    (dict(ray_check_steps=5), "ray_check_steps"),
    (dict(execution="in_process", ray_check_steps=1000), "ray_check_steps"),
])
def test_what_cannot_run_in_process_is_one_line(over, key):
    # Execute / Assert
    with pytest.raises(ConfigError) as e:
        DDPParams(**over).check()
    assert e.value.key == key and "\n" not in str(e.value)


def test_ray_train_asks_for_gpus_and_nccl_only_on_cuda():
    # Prepare / Execute: the worker group of a cpu and of a cuda variant (no Ray started)
    from components.training.ddp.runner import scaling

    cpu_torch, cpu = scaling(4, 0.5, "cpu")
    gpu_torch, gpu = scaling(4, 0.5, "cuda")
    # Assert
    assert cpu_torch.backend == "gloo" and not cpu.use_gpu and cpu.resources_per_worker == {"CPU": 0.5}
    assert gpu_torch.backend == "nccl" and gpu.use_gpu and gpu.resources_per_worker == {"CPU": 0.5, "GPU": 1}
