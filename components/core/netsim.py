"""Simulated network links: turn the bytes a codec really produced into seconds.

One link model for every communication-saving technique, so an 80 Mbps home link and a 100 Gbps
datacenter fabric can be compared on one laptop. Cost of one message of ``n`` bytes:
``latency + 8 n / bandwidth`` (alpha-beta model). Collectives are built from it with the usual
textbook schedules (ring all-reduce, star gather/broadcast through a server).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from components.core.errors import ConfigError, require

_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_NUMBER = r"((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"   # 80, 1.5, .5, 1e9: never 1.2.3 or a bare dot


def parse_bandwidth(value: str | float | int, key: str = "bandwidth") -> float:
    """'80Mbps', '100Gbps', '1.5e9' or a number of bits per second -> bits per second."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        bps = float(value)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*" + _NUMBER + r"\s*([kKmMgGtT]?)(?:bps|bit/s|b/s)?\s*", value)
        if not m:
            raise ConfigError(key, value, "a bandwidth like '80Mbps', '100Gbps' or bits per second")
        bps = float(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise ConfigError(key, value, "a bandwidth like '80Mbps', '100Gbps' or bits per second")
    require(math.isfinite(bps) and bps > 0, key, value, "a positive, finite bandwidth")
    return bps


def parse_seconds(value: str | float | int, key: str = "latency") -> float:
    """'50us', '1ms', '0.2s' or a number of seconds -> seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        s = float(value)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*" + _NUMBER + r"\s*(us|ms|s|ns)?\s*", value)
        if not m:
            raise ConfigError(key, value, "a duration like '50us', '1ms' or seconds")
        s = float(m.group(1)) * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0}[m.group(2)]
    else:
        raise ConfigError(key, value, "a duration like '50us', '1ms' or seconds")
    require(math.isfinite(s) and s >= 0, key, value, "a non-negative, finite duration")
    return s


@dataclass(frozen=True)
class Link:
    """A point-to-point link: ``bandwidth_bps`` bits per second, ``latency_s`` per message."""

    bandwidth_bps: float
    latency_s: float = 0.0

    @classmethod
    def from_config(cls, cfg: dict | "Link" | None, key: str = "link") -> "Link":
        if isinstance(cfg, Link):
            return cfg
        cfg = dict(cfg or {})
        unknown = set(cfg) - {"bandwidth", "latency"}
        if unknown:
            k = sorted(unknown)[0]
            raise ConfigError(f"{key}.{k}", cfg[k], "unknown key; allowed: bandwidth, latency")
        return cls(parse_bandwidth(cfg.get("bandwidth", "1Gbps"), f"{key}.bandwidth"),
                   parse_seconds(cfg.get("latency", 0.0), f"{key}.latency"))

    def transfer_s(self, nbytes: float, messages: int = 1) -> float:
        """Seconds to send ``nbytes`` split over ``messages`` messages, one after another."""
        if nbytes < 0 or messages < 0:
            raise ValueError("bytes and messages must be non-negative")
        if messages == 0:
            return 0.0
        return messages * self.latency_s + 8.0 * nbytes / self.bandwidth_bps

    def ring_allreduce_s(self, nbytes: float, n: int) -> float:
        """Ring all-reduce of an ``nbytes`` buffer over ``n`` peers: 2(n-1) steps of nbytes/n."""
        if n <= 1:
            return 0.0
        return 2 * (n - 1) * self.transfer_s(nbytes / n)

    def allgather_s(self, nbytes_each: float, n: int) -> float:
        """Ring all-gather where every peer contributes ``nbytes_each`` (compressed payloads)."""
        if n <= 1:
            return 0.0
        return (n - 1) * self.transfer_s(nbytes_each)

    def star_gather_s(self, nbytes_each: list[float] | float, n: int | None = None) -> float:
        """Workers -> server over a shared server link: messages serialize on the server's port."""
        sizes = [nbytes_each] * (n or 1) if isinstance(nbytes_each, (int, float)) else list(nbytes_each)
        return sum(self.transfer_s(b) for b in sizes)

    def broadcast_s(self, nbytes: float, n: int) -> float:
        """Server -> n workers over the server's port (one copy per worker)."""
        return n * self.transfer_s(nbytes)


def overlapped_s(compute_s: float, comm_s: float) -> tuple[float, float]:
    """Time of a compute phase that hides a concurrent transfer, and the share of the transfer hidden.

    The transfer is hidden only while it fits inside the compute; the rest is exposed.
    """
    total = max(compute_s, comm_s)
    hidden = 1.0 if comm_s <= 0 else min(compute_s, comm_s) / comm_s
    return total, hidden
