"""The client abstraction: one participant's local data, its models and its local training loop.

A :class:`Client` is plain Python + torch (no Ray): strategies build its models
(``client.models``), keep per-client state in ``client.state`` and train with :func:`sgd_epochs`.
:class:`ClientSpec` is the picklable recipe a host needs to build one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch


@dataclass
class ClientSpec:
    cid: int
    arch: str                 # private architecture (components.models.small_nets.PRIVATE_ARCHS)
    Xtr: np.ndarray
    ytr: np.ndarray
    Xte: np.ndarray
    yte: np.ndarray
    seed: int                 # model init and batch order


class Client:
    """Local data as tensors, the client's models and state, and a seeded batch order."""

    def __init__(self, spec: ClientSpec):
        self.cid, self.arch, self.seed = spec.cid, spec.arch, spec.seed
        self.Xtr, self.ytr = torch.tensor(spec.Xtr), torch.tensor(spec.ytr)
        self.Xte, self.yte = torch.tensor(spec.Xte), torch.tensor(spec.yte)
        self.gen = torch.Generator().manual_seed(spec.seed)
        self.models: dict[str, torch.nn.Module] = {}
        self.state: dict = {}
        self.n_fits = 0

    @property
    def n_train(self) -> int:
        return len(self.ytr)

    def batches(self, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        perm = torch.randperm(self.n_train, generator=self.gen)
        for i in range(0, self.n_train, batch_size):
            j = perm[i:i + batch_size]
            yield self.Xtr[j], self.ytr[j]

    def one_batch(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        return next(self.batches(batch_size))

    def init_generator(self, offset: int) -> torch.Generator:
        """A generator for model initialisation, distinct per client and per model slot."""
        return torch.Generator().manual_seed(self.seed * 1009 + offset)


def seeded(build: Callable[[], torch.nn.Module], seed: int) -> torch.nn.Module:
    """Build a model with parameters drawn from ``seed`` (without touching the global RNG)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def sgd_epochs(client: Client, params: list, step_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               epochs: int, batch_size: int, lr: float) -> float:
    """Plain SGD over ``epochs`` passes of the client's training data; returns the mean loss."""
    opt = torch.optim.SGD(params, lr=lr)
    total, n = 0.0, 0
    for _ in range(epochs):
        for xb, yb in client.batches(batch_size):
            opt.zero_grad(set_to_none=True)
            loss = step_loss(xb, yb)
            loss.backward()
            opt.step()
            total += float(loss.detach())
            n += 1
    return total / max(n, 1)


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(1) == y).float().mean()) if len(y) else float("nan")
