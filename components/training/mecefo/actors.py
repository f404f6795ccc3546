"""The replicas as Ray actors, with failures that are real process deaths handled by Ray.

Each :class:`Replica` holds its own copy of the model and AdamW state. A step: every live replica
computes :func:`train.replica_grad` for the micro-batches it carries (own + taken over), the
driver sums the contributions in replica order (the all-reduce; :func:`train.finish_grad` makes a skipped
attention's gradient the mean over the micro-batches that computed it) and every live replica applies
the same update. A scheduled failure is ``ray.kill(actor, no_restart=False)``: the process dies and
Ray restarts it (``max_restarts``); while it is down its ring neighbour carries its micro-batch.
When it is due back the driver waits for the restarted process (a new pid), and it reloads
weights, optimizer state and svd bases from its neighbour before taking part again.

A replica that dies outside the schedule (or does not answer within ``timeout_s``) raises
:class:`ReplicaDied` with Ray's reason: the variant ends FAILED, never hangs.

The replicas run on cpu whatever the technique's device: Ray gives these actors no GPU (``num_cpus=0``,
no ``num_gpus``), and the check compares them with an in-process cpu run.
"""
from __future__ import annotations

import os
import time

import torch

from components.core.raytools import failure_reason
from components.core.timing import timed


class ReplicaDied(RuntimeError):
    pass


class Replica:
    """One data-parallel replica: model, optimizer, its shard of the math."""

    def __init__(self, rank: int, setup, vocab: int, seed: int, train_data, recovery: str, approx, approx_own: bool,
                 crash_at: tuple[int, int] | None = None):
        from components.training.mecefo.train import build

        torch.set_num_threads(setup.threads)
        self.rank, self.setup, self.seed, self.train_data = rank, setup, seed, train_data
        self.recovery, self.approx, self.approx_own = recovery, approx, approx_own
        self.crash_at = tuple(crash_at) if crash_at else None
        self.model, self.opt = build(setup, vocab, seed)
        from components.training.mecefo.approx import Bases

        self.bases = Bases(approx) if recovery == "mecefo" else None

    def pid(self) -> int:
        return os.getpid()

    def grad(self, step: int, load: list[int]) -> tuple[torch.Tensor, float]:
        """This replica's contribution at ``step`` and its wall seconds (cpu work: no device to wait for)."""
        from components.training.mecefo.train import replica_grad

        if self.crash_at == (self.rank, step):
            os._exit(3)  # a death outside the schedule (fault drill)
        with timed("wall") as t:
            if self.bases is not None:
                self.bases.at(self.model, step)
            g = replica_grad(self.model, self.train_data, self.setup, self.seed, step, self.rank, load,
                             self.recovery, self.approx, self.approx_own, self.bases)
        return g, t.s

    def apply(self, g: torch.Tensor, lr: float) -> int:
        from components.training.mecefo.train import apply_grad

        apply_grad(self.model, self.opt, g, lr)
        return self.rank

    def state(self) -> dict:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(),
                "bases": self.bases.state() if self.bases is not None else None}

    def load(self, state: dict) -> int:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        if self.bases is not None:
            self.bases.load(state["bases"])
        return self.rank

    def params(self) -> torch.Tensor:
        from components.training.mecefo.train import params_vector

        return params_vector(self.model)


def run_on_actors(setup, corpus, seed: int, sets, recovery: str, approx, approx_own: bool, steps: int,
                  crash_at: tuple[int, int] | None = None, timeout_s: float = 120.0, max_restarts: int = 8) -> dict:
    """``steps`` of training on ``setup.replicas`` actors through schedule ``sets`` (a replica is
    killed at each failure onset, restarted by Ray, re-synced when it is due back).

    Returns the final weights (of every live replica), per-replica real step times (normal and
    overloaded), the restarts Ray performed (pids seen) and the resyncs."""
    import ray
    from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

    from components.models.gpt import GPT
    from components.training.ddp.optim import lr_at
    from components.training.mecefo.approx import skipped_mask
    from components.training.mecefo.train import finish_grad, loads_at

    n = setup.replicas
    mask = skipped_mask(GPT(setup.gpt(corpus.vocab_size)))   # the layout only: which entries are attention
    cls = ray.remote(num_cpus=0, max_restarts=max_restarts, max_task_retries=0)(Replica)
    data = ray.put(corpus.train)
    tag = f"{os.getpid()}-{time.time_ns() % 10**6}"
    actors = [cls.options(name=f"mecefo-replica-{i}-{tag}").remote(i, setup, corpus.vocab_size, seed, data, recovery,
                                                                    approx, approx_own, crash_at) for i in range(n)]
    expected_dead: set[int] = set()

    def get(refs, what, who=None):
        try:
            return ray.get(refs, timeout=timeout_s)
        except RayActorError as e:
            raise ReplicaDied(f"replica {'' if who is None else who} died outside the failure schedule during "
                              f"{what}: {failure_reason(e)}") from e
        except GetTimeoutError as e:
            raise ReplicaDied(f"replicas gave no answer within {timeout_s:g} s during {what}") from e

    def restarted(i: int) -> int:
        """The pid of replica i once Ray has restarted it (it is unavailable while restarting)."""
        end = time.monotonic() + timeout_s
        while True:
            try:
                return ray.get(actors[i].pid.remote(), timeout=max(1.0, end - time.monotonic()))
            except ActorUnavailableError:
                if time.monotonic() > end:
                    raise ReplicaDied(f"replica {i} was not restarted by Ray within {timeout_s:g} s") from None
                time.sleep(0.2)
            except RayActorError as e:
                raise ReplicaDied(f"replica {i} could not be restarted by Ray: {failure_reason(e)}") from e
            except GetTimeoutError as e:
                raise ReplicaDied(f"replica {i} was not restarted by Ray within {timeout_s:g} s") from e

    times = {"normal": [], "overloaded": []}
    restarts, resyncs, kills = 0, 0, 0
    t0 = time.perf_counter()
    try:
        pids = get([a.pid.remote() for a in actors], "start-up")
        for step in range(steps):
            down = sets[step] if recovery in ("ndb", "mecefo", "drop") else frozenset()
            for i in sorted(down - expected_dead):            # failure onsets: a real process death
                ray.kill(actors[i], no_restart=False)
                expected_dead.add(i)
                kills += 1
            loads = loads_at(sets, step, n, recovery)
            for i in sorted(expected_dead - down):            # due back: Ray restarted it; re-sync
                pid = restarted(i)
                restarts += int(pid != pids[i])
                pids[i] = pid
                src = next(k for k in sorted(loads) if k not in expected_dead)   # up to date
                get(actors[i].load.remote(actors[src].state.remote()), f"the re-sync of replica {i}", i)
                expected_dead.discard(i)
                resyncs += 1
            live = sorted(loads)
            refs = [actors[i].grad.remote(step, loads[i]) for i in live]
            out = []
            for i, r in zip(live, refs):
                out.append(get(r, f"step {step}", i))
            total = None
            for i, (g, dt) in zip(live, out):
                total = g if total is None else total + g
                times["overloaded" if len(loads[i]) > 1 else "normal"].append(dt)
            if recovery == "drop":
                total = total / len(live)
            total = finish_grad(total, mask, loads, recovery, approx, approx_own, n)
            lr = lr_at(step, setup.steps, setup.lr, setup.warmup, setup.final_lr_frac)
            get([actors[i].apply.remote(total, lr) for i in live], f"the update of step {step}")
        final_live = sorted(set(range(n)) - expected_dead)
        weights = get([actors[i].params.remote() for i in final_live], "the final weights")
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
    return {"weights": dict(zip(final_live, weights)), "times": times, "restarts": restarts, "kills": kills,
            "resyncs": resyncs, "wall_s": time.perf_counter() - t0}
