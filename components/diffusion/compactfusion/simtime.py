"""Simulated step latency of patch-parallel sampling on the shared ``Link`` (a clock, no sleeping).

Link presets are comm/compute ratios, calibrated from the measured compute of one block on one
shard (prepare step ``compactfusion_calibration``): the bandwidth is set so that the synchronous
fp16 K/V all-gather of one block takes ``ratio`` times that block's compute (NVLink-like 0.05,
PCIe-like 0.45, Ethernet-like 3.0), after ``latency`` per message. A ring all-gather is P-1 hops
of one shard's K+V payload (``Link.allgather_s``).

Per block: synchronous systems pay compute + all-gather; the stale (DistriFusion-like) system
overlaps the all-gather with the block's compute, ``max`` of the two (``overlapped_s``: nothing
is hidden beyond the compute), except in its synchronous warm-up steps. Codec time is measured
separately (``codec_s_per_step``), not charged here: the paper's kernels are fused on GPU.
"""
from __future__ import annotations

from components.core.errors import require
from components.core.netsim import Link, overlapped_s, parse_seconds

DEFAULT_PRESETS = {"nvlink": {"ratio": 0.05, "latency": "2us"},
                   "pcie": {"ratio": 0.45, "latency": "5us"},
                   "ethernet": {"ratio": 3.0, "latency": "50us"}}


def check_presets(presets: dict, key: str = "presets") -> None:
    require(isinstance(presets, dict) and presets, key, presets, "a mapping name -> {ratio, latency}")
    for name, p in presets.items():
        require(isinstance(p, dict) and set(p) <= {"ratio", "latency"} and "ratio" in p, f"{key}.{name}", p,
                "{ratio: comm/compute of the synchronous fp16 all-gather, latency: per message}")
        require(isinstance(p["ratio"], (int, float)) and p["ratio"] > 0, f"{key}.{name}.ratio", p["ratio"],
                "a positive comm/compute ratio")
        parse_seconds(p.get("latency", 0.0), f"{key}.{name}.latency")


def calibrated_link(preset: dict, block_s: float, sync_bytes_per_rank: float, P: int) -> Link:
    """The link on which the sync fp16 all-gather of one block takes ``ratio * block_s``."""
    lat = parse_seconds(preset.get("latency", 0.0))
    budget = preset["ratio"] * block_s - (P - 1) * lat
    require(budget > 0, "presets.latency", preset.get("latency"),
            f"a per-message latency below ratio x block compute / (P-1) = {preset['ratio'] * block_s / (P - 1):.2e} s")
    return Link(bandwidth_bps=8.0 * (P - 1) * sync_bytes_per_rank / budget, latency_s=lat)


def step_latency_s(system: str, step: int, warmup: int, depth: int, block_s: float, link: Link,
                   bytes_per_rank_block: float, P: int) -> float:
    """One denoising step on P devices: ``depth`` blocks of compute plus (or behind) their all-gathers."""
    comm = link.allgather_s(bytes_per_rank_block, P)
    if system == "stale" and step >= warmup:
        return depth * overlapped_s(block_s, comm)[0]
    return depth * (block_s + comm)
