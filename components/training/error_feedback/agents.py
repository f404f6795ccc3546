"""The four methods as an agent half (local gradient, compression, local state) and a server half.

One round: the server broadcasts x; each agent returns its compressed message; the server
aggregates and moves. With n = 1 this is exactly the single-agent algorithm of the paper:

- GD:   agent sends grad f_i(x);                      server: x -= eta * mean
- CGD:  agent sends C(grad f_i(x));                   server: x -= eta * mean
- EF:   agent: c = C(e + eta grad f_i(x)), e += eta grad f_i(x) - c, sends c;  server: x -= mean
- EF21: agent: c = C(grad f_i(x) - g_i), g_i += c, sends c;  server: g += mean, then x -= eta g
        (g_i starts at grad f_i(x0), sent once uncompressed)

The same Agent class runs in-process (single agent) or as a Ray actor (one per node).
"""
from __future__ import annotations

import numpy as np

from components.compression import make_compressor

METHODS = ("gd", "cgd", "ef", "ef21")


class Agent:
    """One node: holds its local problem f_i and its method state (e for EF, g_i for EF21)."""

    def __init__(self, problem, method: str, compressor_cfg: dict, step: float, seed: int):
        if method not in METHODS:
            raise ValueError(f"method {method!r} not in {METHODS}")
        self.f, self.method, self.step = problem, method, step
        self.C = make_compressor(compressor_cfg, problem.dim) if method != "gd" else make_compressor(None, problem.dim)
        self.rng = np.random.default_rng(seed)
        self.e = np.zeros(problem.dim)
        self.g = None

    def start(self, x0: np.ndarray) -> tuple[np.ndarray | None, int]:
        """EF21's initial uncompressed g_i = grad f_i(x0); others send nothing."""
        if self.method != "ef21":
            return None, 0
        self.g = self.f.grad(x0)
        return self.g.copy(), self.g.size * self.C.value_bits

    def round(self, x: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
        """Returns (message as the server decodes it, bits on the wire, exact local gradient).

        The exact gradient is for measurement only (the grad-norm curve); it is not counted as sent.
        """
        grad = self.f.grad(x)
        if self.method in ("gd", "cgd"):
            msg, bits = self.C(grad, self.rng)
        elif self.method == "ef":
            v = self.e + self.step * grad
            msg, bits = self.C(v, self.rng)
            self.e = v - msg
        else:  # ef21
            msg, bits = self.C(grad - self.g, self.rng)
            self.g = self.g + msg
        return msg, bits, grad

    def state(self) -> dict:
        return {"e": self.e.copy(), "g": None if self.g is None else self.g.copy()}


class Server:
    """Aggregates the agents' messages and moves the iterate."""

    def __init__(self, method: str, step: float, x0: np.ndarray):
        self.method, self.step, self.x = method, step, x0.copy()
        self.g = None

    def start(self, msgs: list[np.ndarray | None]) -> None:
        if self.method == "ef21":
            self.g = np.mean(msgs, axis=0)
            self.x = self.x - self.step * self.g

    def apply(self, msgs: list[np.ndarray]) -> np.ndarray:
        m = np.mean(msgs, axis=0)
        if self.method in ("gd", "cgd"):
            self.x = self.x - self.step * m
        elif self.method == "ef":
            self.x = self.x - m
        else:
            self.g = self.g + m
            self.x = self.x - self.step * self.g
        return self.x
