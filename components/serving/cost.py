"""Token cost accounting shared by every serving technique.

Each model call is charged its prefill tokens (prompt tokens not already in the model's prefix
cache), its decode tokens, and one call. Simulated latency prices those counts with a per-model
:class:`TokenCost`; measured wall time is kept beside it. Tiny CPU models are dominated by Python
overhead (a 8x larger model decodes only ~2x slower here), so the simulated figure, which scales
with model size like a real accelerator would, is the headline metric and wall time the check.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from components.core.errors import require


@dataclass(frozen=True)
class TokenCost:
    """Seconds per prefilled token, per decoded token and per call for one model."""

    prefill_s: float
    decode_s: float
    call_s: float = 0.0

    def __post_init__(self):
        for k in ("prefill_s", "decode_s", "call_s"):
            require(getattr(self, k) >= 0, k, getattr(self, k), "a non-negative number of seconds")

    @classmethod
    def from_params(cls, n_params: int, flops_per_s: float = 1e9, prefill_ratio: float = 0.1,
                    call_s: float = 0.0) -> "TokenCost":
        """Compute-bound estimate: a decoded token costs 2*n_params FLOPs at ``flops_per_s``.

        Prefill runs all prompt tokens in one batched pass, so a prefilled token costs
        ``prefill_ratio`` of a decoded one (accelerators are far from saturated at batch 1 decode).
        """
        require(n_params > 0, "n_params", n_params, "a positive parameter count")
        require(flops_per_s > 0, "flops_per_s", flops_per_s, "a positive FLOP rate")
        require(0 <= prefill_ratio <= 1, "prefill_ratio", prefill_ratio, "a ratio in [0, 1]")
        decode = 2.0 * n_params / flops_per_s
        return cls(prefill_s=prefill_ratio * decode, decode_s=decode, call_s=call_s)

    def seconds(self, prefill: int = 0, decode: int = 0, calls: int = 0) -> float:
        return prefill * self.prefill_s + decode * self.decode_s + calls * self.call_s


@dataclass
class Usage:
    """Token and call counts per model name, plus measured wall seconds, for one request or a run."""

    prefill: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    decode: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    wall_s: float = 0.0

    def charge(self, model: str, prefill: int = 0, decode: int = 0, calls: int = 1) -> None:
        require(prefill >= 0 and decode >= 0 and calls >= 0, "tokens", (prefill, decode, calls),
                "non-negative counts")
        self.prefill[model] += prefill
        self.decode[model] += decode
        self.calls[model] += calls

    def merge(self, other: "Usage") -> "Usage":
        for mine, theirs in ((self.prefill, other.prefill), (self.decode, other.decode), (self.calls, other.calls)):
            for k, v in theirs.items():
                mine[k] += v
        self.wall_s += other.wall_s
        return self

    def sim_latency_s(self, costs: dict[str, TokenCost]) -> float:
        """Sequential latency: every model call in this usage priced and summed."""
        missing = sorted(set(self.calls) - set(costs))
        require(not missing, "costs", missing, "a TokenCost for every model that was charged")
        return sum(costs[m].seconds(self.prefill[m], self.decode[m], self.calls[m]) for m in self.calls)

    def to_dict(self) -> dict:
        return {"prefill": dict(self.prefill), "decode": dict(self.decode), "calls": dict(self.calls),
                "wall_s": self.wall_s}

    @classmethod
    def from_dict(cls, d: dict) -> "Usage":
        u = cls(wall_s=float(d.get("wall_s", 0.0)))
        for key in ("prefill", "decode", "calls"):
            getattr(u, key).update({k: int(v) for k, v in d.get(key, {}).items()})
        return u

    def metrics(self) -> dict[str, float]:
        """Flat ``<model>_tokens`` (decode), ``<model>_prefill_tokens`` and ``<model>_calls``."""
        out: dict[str, float] = {}
        for m in sorted(self.calls):
            out[f"{m}_tokens"] = float(self.decode[m])
            out[f"{m}_prefill_tokens"] = float(self.prefill[m])
            out[f"{m}_calls"] = float(self.calls[m])
        return out
