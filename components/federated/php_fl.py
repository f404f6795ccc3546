"""PHP-FL [NeurIPS 2025]: model-heterogeneous FL under unequal participation probabilities.
Paper: https://openreview.net/forum?id=pJWozQn9p4 (code github.com/Siyuan01/PHP-FL-main could not
be read; this follows ../shared/techniques/php_fl.md, our reading of the paper).

Each client keeps a private heterogeneous model F_i, a small auxiliary model G_i (one
architecture for all, the only thing shared) and an ensemble weight w_i = sigmoid(a_i).

- DEAL (Dual-End Aligned ensemble Learning): local loss per batch
    CE(F) + CE(G) + CE(ens) + lam * T^2 * [KL(pG || pF) + KL(pF || pG)]
  with ens = w*z_F + (1-w)*z_G, softened p at temperature T and the target side detached in each
  KL (both ends align to each other); prediction uses the ensemble.
- ISPU (Importance-driven Selective Parameter Update): before training, importance
  s = |theta_G * grad L_i(theta_G)| of the received global G on one local batch; per tensor the
  top-q_t fraction takes the global value, the rest keeps the client's own G_i. q_t grows with
  training progress: q_t = q_min + (q_max - q_min) * min(1, t / T_warm). A first participation
  copies G fully. Its premise is logged at every re-participation (``client_report``): the
  client's test accuracy with its stale G_i, with G in its place and after the merge.
- Server: FedAvg of the uploaded G_i (weighted by sample count). F_i never leaves the client.

Switches for ablations (configs, not copies): ``ispu`` (false: overwrite G_i with G),
``ensemble`` (false: no ensemble loss, predict with F_i), ``dual_align`` (false: lam = 0).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from components.core.errors import require
from components.core.registry import register
from components.federated.client import Client, accuracy, sgd_epochs
from components.federated.fml import SharedAuxStrategy, kl_to
from components.federated.strategy import state_of


@dataclass
class PHPFLOptions:
    dual_align: bool = True      # DEAL's bidirectional KL between F_i and G_i
    ensemble: bool = True        # DEAL's local ensemble (loss term and prediction rule)
    ispu: bool = True            # importance-masked merge of the global G (else full overwrite)
    lam: float = 1.0             # weight of the alignment terms
    temperature: float = 2.0     # T of the softened outputs
    q_min: float = 0.3           # ISPU: share of each tensor taken from the global model, early
    q_max: float = 0.9           # ... and once training has progressed past warm_rounds
    warm_rounds: int | None = None   # progress horizon T_warm; null: half of the rounds

    def check(self):
        require(self.lam >= 0, "lam", self.lam, "a non-negative weight")
        require(self.temperature > 0, "temperature", self.temperature, "a positive temperature")
        require(0 <= self.q_min <= self.q_max <= 1, "q_min", self.q_min, f"0 <= q_min <= q_max (= {self.q_max}) <= 1")
        require(self.warm_rounds is None or self.warm_rounds >= 1, "warm_rounds", self.warm_rounds, "a positive round count or null")


def ispu_fraction(rnd: int, o: PHPFLOptions, rounds: int) -> float:
    """q_t: share of parameters per tensor updated from the global model in round ``rnd``."""
    warm = o.warm_rounds or max(1, rounds // 2)
    return o.q_min + (o.q_max - o.q_min) * min(1.0, rnd / warm)


def top_fraction_mask(score: torch.Tensor, q: float) -> torch.Tensor:
    """Boolean mask of the round(q * numel) highest scores of one tensor (at least one entry
    when q > 0). Per tensor, not global, so small layers keep their share."""
    n = score.numel()
    k = min(n, max(1 if q > 0 else 0, int(math.floor(q * n + 0.5))))
    mask = torch.zeros(n, dtype=torch.bool)
    if k:
        mask[torch.topk(score.flatten(), k).indices] = True
    return mask.view_as(score)


def importance(model: torch.nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> dict[str, torch.Tensor]:
    """|theta * dL/dtheta| per parameter tensor, on one batch of local data."""
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(xb), yb).backward()
    return {n: (p.detach() * p.grad).abs() for n, p in model.named_parameters()}


def ispu_merge(local: torch.nn.Module, global_state: dict, scores: dict[str, torch.Tensor], q: float) -> dict[str, float]:
    """G_i <- M * G + (1 - M) * G_i with M the per-tensor top-q importance mask. Returns the kept
    fraction per tensor (for tests and logs)."""
    kept = {}
    with torch.no_grad():
        for n, p in local.named_parameters():
            m = top_fraction_mask(scores[n], q)
            p.copy_(torch.where(m, global_state[n], p))
            kept[n] = float(m.float().mean())
    return kept


@register("strategy", "php_fl", summary="PHP-FL [NeurIPS 2025]: DEAL (dual-end aligned ensemble of private F_i and shared G_i) "
          "+ ISPU (importance-masked merge of the global G); switches for ablations")
class PHPFL(SharedAuxStrategy):
    Options = PHPFLOptions

    def init_client(self, client: Client) -> None:
        super().init_client(client)
        client.state["ens_logit"] = torch.zeros((), requires_grad=True)   # w = sigmoid(0) = 0.5

    def receive(self, client: Client, payload: dict, rnd: int) -> None:
        """Merge the global auxiliary model into the local one (ISPU, or a full copy). At every
        re-participation it also logs the client's test accuracy with its stale G_i, with G in
        its place (what a full overwrite leaves) and after the merge: ISPU's premise, measured."""
        aux = client.models["aux"]
        if not client.state.get("joined"):
            aux.load_state_dict(payload)
        else:
            g = copy.deepcopy(aux)          # the global G in the client's own architecture
            g.load_state_dict(payload)
            before, with_g = self.test_accs(client), self.test_accs(client, g)
            if self.o.ispu:
                xb, yb = client.one_batch(self.fl.batch_size)
                q = ispu_fraction(rnd, self.o, self.fl.rounds)
                client.state["last_kept"] = ispu_merge(aux, payload, importance(g, xb, yb), q)
                after = self.test_accs(client)
            else:
                aux.load_state_dict(payload)
                after = with_g
            client.state.setdefault("merges", []).append((*before, *with_g, *after))
        client.state["joined"] = True

    @torch.no_grad()
    def test_accs(self, client: Client, aux: torch.nn.Module | None = None) -> tuple[float, float]:
        """The client's test accuracy of (its auxiliary model alone, its prediction rule), with
        ``aux`` standing in for its G_i when given."""
        own = client.models["aux"]
        client.models["aux"] = own if aux is None else aux
        try:
            return (accuracy(client.models["aux"](client.Xte), client.yte),
                    accuracy(self.logits(client, client.Xte, None), client.yte))
        finally:
            client.models["aux"] = own

    def client_report(self, client: Client) -> dict[str, float]:
        """Means over the client's re-participations (NaN if it had none): ``overwrite_loss``
        (prediction-rule accuracy lost had G overwritten G_i), ``overwrite_loss_aux`` (the same
        for G_i alone) and ``merge_gain`` (accuracy after the actual merge minus after a full
        overwrite: 0 without ISPU)."""
        m = np.asarray(client.state.get("merges", []), dtype=float).reshape(-1, 6)
        nan = float("nan")
        mean = (lambda v: float(v.mean())) if len(m) else (lambda v: nan)
        return {"merges": float(len(m)), "overwrite_loss": mean(m[:, 1] - m[:, 3]),
                "overwrite_loss_aux": mean(m[:, 0] - m[:, 2]), "merge_gain": mean(m[:, 5] - m[:, 3])}

    def fit(self, client: Client, payload, rnd):
        self.receive(client, payload, rnd)
        priv, aux, a = client.models["private"], client.models["aux"], client.state["ens_logit"]
        lam = self.o.lam if self.o.dual_align else 0.0
        T, ens = self.o.temperature, self.o.ensemble

        def step(xb, yb):
            zf, zg = priv(xb), aux(xb)
            loss = F.cross_entropy(zf, yb) + F.cross_entropy(zg, yb)
            if ens:
                w = torch.sigmoid(a)
                loss = loss + F.cross_entropy(w * zf + (1 - w) * zg, yb)
            if lam > 0:
                loss = loss + lam * T * T * (kl_to(zg, zf, T) + kl_to(zf, zg, T))
            return loss

        params = [*priv.parameters(), *aux.parameters()] + ([a] if ens else [])
        sgd_epochs(client, params, step, self.fl.local_epochs, self.fl.batch_size, self.fl.lr)
        client.n_fits += 1
        return state_of(aux)

    @torch.no_grad()
    def logits(self, client: Client, X, payload):
        zf = client.models["private"](X)
        if not self.o.ensemble:
            return zf
        w = torch.sigmoid(client.state["ens_logit"])
        return w * zf + (1 - w) * client.models["aux"](X)
