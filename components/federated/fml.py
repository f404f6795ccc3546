"""FML, Federated Mutual Learning [Shen et al., 2020]. Paper: https://arxiv.org/abs/2006.16765

Each client keeps a private heterogeneous model and a copy of the shared "meme" model (here the
small auxiliary model). On participation the client overwrites its meme model with the global
one, then trains both with deep mutual learning:
  L_private = alpha * CE(private) + (1 - alpha) * KL(p_meme || p_private)
  L_meme    = beta  * CE(meme)    + (1 - beta)  * KL(p_private || p_meme)
(the other model's distribution detached in each KL). It uploads the meme model, which the
server averages (FedAvg). Prediction uses the private model.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from components.core.errors import require
from components.core.registry import register
from components.federated.client import Client, seeded, sgd_epochs
from components.federated.strategy import Strategy, state_of, weighted_average
from components.models.small_nets import make_aux, make_private


@dataclass
class FMLOptions:
    alpha: float = 0.5         # private model: CE weight (paper: 0.5)
    beta: float = 0.5          # meme model: CE weight (paper: 0.5)
    temperature: float = 1.0   # softmax temperature of the KL terms (paper: none, i.e. 1)

    def check(self):
        require(0 <= self.alpha <= 1, "alpha", self.alpha, "a weight in [0, 1]")
        require(0 <= self.beta <= 1, "beta", self.beta, "a weight in [0, 1]")
        require(self.temperature > 0, "temperature", self.temperature, "a positive temperature")


def kl_to(target_logits: torch.Tensor, logits: torch.Tensor, T: float) -> torch.Tensor:
    """KL(softmax(target/T) || softmax(logits/T)), target detached: pulls ``logits`` toward it."""
    return F.kl_div(F.log_softmax(logits / T, 1), F.softmax(target_logits.detach() / T, 1), reduction="batchmean")


class SharedAuxStrategy(Strategy):
    """Server half shared by FML and PHP-FL: one small auxiliary model, FedAvg'ed across the
    participants; each client keeps its private model and a local copy of the auxiliary one."""

    def init_global(self, seed: int) -> None:
        self.global_state = state_of(seeded(lambda: make_aux(self.fl.aux_hidden), seed))

    def payload(self, rnd):
        return self.global_state

    def aggregate(self, uploads, rnd):
        if uploads:
            self.global_state = weighted_average([u for _, u in uploads], [n for n, _ in uploads])

    def init_client(self, client: Client) -> None:
        client.models["private"] = seeded(lambda: make_private(client.arch, self.fl.emb_dim), client.seed)
        client.models["aux"] = seeded(lambda: make_aux(self.fl.aux_hidden), client.seed + 7919)


@register("strategy", "fml", summary="FML [Shen et al., 2020]: private model + shared meme model, deep mutual learning")
class FML(SharedAuxStrategy):
    Options = FMLOptions

    def fit(self, client: Client, payload, rnd):
        priv, meme = client.models["private"], client.models["aux"]
        meme.load_state_dict(payload)
        a, b, T = self.o.alpha, self.o.beta, self.o.temperature

        def step(xb, yb):
            zp, zm = priv(xb), meme(xb)
            lp = a * F.cross_entropy(zp, yb) + (1 - a) * kl_to(zm, zp, T)
            lm = b * F.cross_entropy(zm, yb) + (1 - b) * kl_to(zp, zm, T)
            return lp + lm

        sgd_epochs(client, [*priv.parameters(), *meme.parameters()], step, self.fl.local_epochs,
                   self.fl.batch_size, self.fl.lr)
        client.n_fits += 1
        return state_of(meme)

    @torch.no_grad()
    def logits(self, client: Client, X, payload):
        return client.models["private"](X)
