"""FedAvg [McMahan et al., 2017] and FedProx [Li et al., 2020] on one homogeneous model.
Papers: https://arxiv.org/abs/1602.05629 , https://arxiv.org/abs/1812.06127

The control without model heterogeneity: every client trains the same architecture, starting
each participation from the global model; the server averages the uploaded models weighted by
sample count. ``prox_mu > 0`` adds FedProx's proximal term (mu/2)||w - w_global||^2 to the local
loss. Evaluation uses the global model on every client's test data (the usual FedAvg figure).
(Flower's `flwr` would provide this aggregation, but its 1.42 wheel downgrades rich, protobuf,
fastapi and uvicorn below this project's pins, so the weighted average is written here once.)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from components.core.errors import require
from components.core.registry import register
from components.federated.client import Client, seeded, sgd_epochs
from components.federated.strategy import Strategy, state_of, weighted_average
from components.models.small_nets import PRIVATE_ARCHS, make_private


@dataclass
class FedAvgOptions:
    arch: str = "mlp_deep"     # the one architecture every client trains
    prox_mu: float = 0.0       # > 0: FedProx

    def check(self):
        require(self.arch in PRIVATE_ARCHS, "arch", self.arch, "one of " + ", ".join(PRIVATE_ARCHS))
        require(self.prox_mu >= 0, "prox_mu", self.prox_mu, "a non-negative proximal weight")


@register("strategy", "fedavg", summary="FedAvg [McMahan et al., 2017] / FedProx (prox_mu > 0) on one homogeneous model")
class FedAvg(Strategy):
    Options = FedAvgOptions

    def _build(self, seed: int):
        return seeded(lambda: make_private(self.o.arch, self.fl.emb_dim), seed)

    def init_global(self, seed: int) -> None:
        self.global_state = state_of(self._build(seed))

    def payload(self, rnd: int):
        return self.global_state

    def aggregate(self, uploads, rnd):
        if uploads:
            self.global_state = weighted_average([u for _, u in uploads], [n for n, _ in uploads])

    def init_client(self, client: Client) -> None:
        client.models["model"] = self._build(client.seed)

    def fit(self, client: Client, payload, rnd):
        model = client.models["model"]
        model.load_state_dict(payload)
        anchor = [p.detach().clone() for p in model.parameters()]
        mu = self.o.prox_mu

        def step(xb, yb):
            loss = F.cross_entropy(model(xb), yb)
            if mu > 0:
                loss = loss + 0.5 * mu * sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor))
            return loss

        sgd_epochs(client, list(model.parameters()), step, self.fl.local_epochs, self.fl.batch_size, self.fl.lr)
        client.n_fits += 1
        return state_of(model)

    @torch.no_grad()
    def logits(self, client: Client, X, payload):
        model = client.models["model"]
        if payload is not None:
            model.load_state_dict(payload)
        return model(X)
