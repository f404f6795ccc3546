"""A client host: several clients in one process, the object a Ray actor holds (Flower's
actor pool keeps one process per group of virtual clients the same way).

The host is plain Python; :mod:`components.federated.pool` places hosts on Ray actors. Torch is
limited to one thread per host: hosts run side by side on few cores.
"""
from __future__ import annotations

from typing import Any

import torch

from components.federated.client import Client, ClientSpec, accuracy
from components.federated.strategy import FLConfig, Strategy, make_strategy


class ClientHost:
    def __init__(self, strategy: type[Strategy], options: dict, fl: FLConfig, specs: list[ClientSpec]):
        torch.set_num_threads(1)
        self.strategy = make_strategy(strategy, options, fl)
        self.clients: dict[int, Client] = {}
        for s in specs:
            c = Client(s)
            self.strategy.init_client(c)
            self.clients[s.cid] = c

    def evaluate(self, payload: Any) -> dict[int, float]:
        """Test accuracy of every hosted client under its prediction rule."""
        return {cid: accuracy(self.strategy.logits(c, c.Xte, payload), c.yte) for cid, c in self.clients.items()}

    def round(self, rnd: int, payload: Any, participants: list[int]) -> dict:
        """Evaluate every hosted client on the state entering the round, then train the
        participants hosted here. Returns {'acc': {cid: acc}, 'uploads': {cid: (n_train, upload)}}."""
        acc = self.evaluate(payload)
        uploads = {}
        for cid in participants:
            c = self.clients[cid]
            uploads[cid] = (c.n_train, self.strategy.fit(c, payload, rnd))
        return {"acc": acc, "uploads": uploads}

    def report(self) -> dict[int, dict[str, float]]:
        """Every hosted client's strategy diagnostics (Strategy.client_report)."""
        return {cid: self.strategy.client_report(c) for cid, c in self.clients.items()}

    def cids(self) -> list[int]:
        return list(self.clients)
