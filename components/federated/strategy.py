"""The strategy contract and the pieces strategies share (FedAvg aggregation, the config).

A strategy is one federated algorithm, written without Ray: the server side (``init_global``,
``payload``, ``aggregate``) runs in the server loop, the client side (``init_client``, ``fit``,
``logits``) runs wherever the client lives (a Ray actor, or in-process in tests). Both sides get
their own instance built from the same (class, options, FLConfig), as in Flower, where the
strategy and the ClientApp are configured from one run config.

Each strategy registers itself where it is defined, ``@register("strategy", "fml", summary=...)``,
and is found by :func:`strategy_class` (``dtlab list strategy`` shows them with their files).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from components.core.registry import lookup
from components.federated.client import Client


@dataclass
class FLConfig:
    """What every strategy needs to know about the local training budget and the models."""
    lr: float = 0.05
    local_epochs: int = 2
    batch_size: int = 16
    rounds: int = 100
    emb_dim: int = 32          # embedding width of the private models (FedProto's prototypes)
    aux_hidden: int = 16       # hidden width of the shared auxiliary model


class Strategy:
    """Base class; subclasses set ``Options`` (a dataclass of their knobs) and register themselves."""

    Options: type | None = None

    def __init__(self, options: Any, fl: FLConfig):
        self.o, self.fl = options, fl

    # ---------------------------------------------------------------- server side
    def init_global(self, seed: int) -> None:
        """Build the server state (global model, prototypes...)."""

    def payload(self, rnd: int) -> Any:
        """What the server sends to this round's participants (and uses for evaluation)."""
        return None

    def aggregate(self, uploads: list[tuple[int, Any]], rnd: int) -> None:
        """Fold this round's uploads ``[(n_train, upload), ...]`` into the server state."""

    # ---------------------------------------------------------------- client side
    def init_client(self, client: Client) -> None:
        raise NotImplementedError

    def fit(self, client: Client, payload: Any, rnd: int) -> Any:
        """Local training on a participant; returns its upload."""
        raise NotImplementedError

    @torch.no_grad()
    def logits(self, client: Client, X: torch.Tensor, payload: Any) -> torch.Tensor:
        """The client's prediction rule (``payload``: the server's current broadcast)."""
        raise NotImplementedError

    def client_report(self, client: Client) -> dict[str, float]:
        """Per-client diagnostics the strategy kept (read once, after the last round)."""
        return {}


def strategy_class(name: str, key: str = "strategy") -> type[Strategy]:
    """The registered strategy ``name``; ConfigError(key, name, the known names) if there is none."""
    return lookup("strategy", name, key=key)


def make_strategy(cls: type[Strategy], options: dict | Any, fl: FLConfig) -> Strategy:
    """Instantiate a strategy class; ``options`` may be a raw mapping (parsed and checked here).
    Hosts receive the class, not its name, so an actor imports only the strategy's module."""
    from components.core.params import parse_params

    if isinstance(options, dict) or options is None:
        options = parse_params(cls.Options, options or {}, "options") if cls.Options else options
    return cls(options, fl)


# ------------------------------------------------------------------------------ shared pieces
def weighted_average(states: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    """FedAvg aggregation [McMahan et al., 2017]: sum_k (n_k / n) * theta_k, tensor by tensor."""
    if not states:
        raise ValueError("nothing to aggregate")
    w = torch.tensor(weights, dtype=torch.float64)
    w = w / w.sum()
    return {k: sum(float(wi) * s[k].double() for wi, s in zip(w, states)).to(states[0][k].dtype) for k in states[0]}


def state_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of a model's parameters and buffers (what goes over the wire)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def n_floats(obj: Any) -> int:
    """Floats in an upload (tensors/arrays in nested dicts, lists, tuples)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel()
    if hasattr(obj, "size") and hasattr(obj, "dtype"):
        return int(obj.size)
    if isinstance(obj, dict):
        return sum(n_floats(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(n_floats(v) for v in obj)
    return 0
