"""Local-only training: each client trains its own heterogeneous model on its own data, with no
communication. Under the same budget as the federated methods: a client trains (E local
epochs) only in rounds where it participates, so rarely-present clients train less.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from components.core.registry import register
from components.federated.client import Client, seeded, sgd_epochs
from components.federated.strategy import Strategy
from components.models.small_nets import make_private


@dataclass
class LocalOnlyOptions:
    def check(self):
        pass


@register("strategy", "local_only", summary="Local-only: each client trains its own model when it participates, no communication")
class LocalOnly(Strategy):
    Options = LocalOnlyOptions

    def init_client(self, client: Client) -> None:
        client.models["private"] = seeded(lambda: make_private(client.arch, self.fl.emb_dim), client.seed)

    def fit(self, client: Client, payload, rnd):
        model = client.models["private"]
        sgd_epochs(client, list(model.parameters()), lambda xb, yb: F.cross_entropy(model(xb), yb),
                   self.fl.local_epochs, self.fl.batch_size, self.fl.lr)
        client.n_fits += 1
        return None

    @torch.no_grad()
    def logits(self, client: Client, X, payload):
        return client.models["private"](X)
