"""The wafer: G packages x c chiplets, inter-package network (NoP-Tree or 2D mesh), intra-package
fan-out, chiplet compute and package DRAM; turns one micro-batch's routing into stage times."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.core.errors import ConfigError, require
from components.core.netsim import Link, parse_bandwidth
from components.simulation import engine
from components.simulation.mozart.dispatch import traffic_matrix
from components.simulation.topology import Level, Mesh2D, Tree


@dataclass
class Wafer:
    packages: int = 8
    chiplets: int = 8                 # per package
    mesh_rows: int = 2                # 2D mesh of packages: rows x (packages / rows)
    inter_bandwidth: str = "2Tbps"    # 0.25 TB/s per inter-package link (and NoP-Tree uplink)
    inter_latency: str = "100ns"      # per link / hop
    intra_bandwidth: str = "8Tbps"    # 1 TB/s package router -> each chiplet
    intra_latency: str = "20ns"
    chiplet_tflops: float = 50.0      # sized so that communication ~ compute for the baseline
    dram_bandwidth: str = "160Tbps"   # 20 TB/s 3D-stacked DRAM per package (expert weights -> SRAM)
    launch_s: float = 1e-6            # fixed cost per compute chunk (kernel launch, sync)

    @classmethod
    def from_config(cls, cfg: dict, key: str = "hardware") -> "Wafer":
        for k in cfg:
            require(k in cls.__dataclass_fields__, f"{key}.{k}", cfg[k], "unknown key; allowed: " + ", ".join(cls.__dataclass_fields__))
        w = cls(**cfg)
        require(isinstance(w.packages, int) and w.packages >= 1, f"{key}.packages", w.packages, "a positive integer")
        require(isinstance(w.chiplets, int) and w.chiplets >= 1, f"{key}.chiplets", w.chiplets, "a positive integer")
        require(isinstance(w.mesh_rows, int) and w.mesh_rows >= 1 and w.packages % w.mesh_rows == 0, f"{key}.mesh_rows",
                w.mesh_rows, f"a divisor of packages={w.packages}")
        require(w.chiplet_tflops > 0, f"{key}.chiplet_tflops", w.chiplet_tflops, "a positive throughput")
        require(w.launch_s >= 0, f"{key}.launch_s", w.launch_s, "non-negative seconds")
        w.inter, w.intra = Link.from_config({"bandwidth": w.inter_bandwidth, "latency": w.inter_latency}, f"{key}.inter"), \
            Link.from_config({"bandwidth": w.intra_bandwidth, "latency": w.intra_latency}, f"{key}.intra")
        w.dram_bps = parse_bandwidth(w.dram_bandwidth, f"{key}.dram_bandwidth")
        return w

    def network(self, kind: str):
        """'tree': NoP-Tree (package uplinks to a non-blocking wafer root); 'mesh': XY-routed 2D mesh."""
        if kind == "tree":
            return Tree([Level("package", self.packages, self.inter)])
        return Mesh2D(self.mesh_rows, self.packages // self.mesh_rows, self.inter)


@dataclass
class MoEShape:
    experts: int = 64
    top_k: int = 2
    hidden: int = 4096
    ffn: int = 1024                   # per expert (fine-grained experts, as OLMoE / DeepSeek-MoE)
    bytes_per_elem: int = 2           # bf16

    @classmethod
    def from_config(cls, cfg: dict, key: str = "model") -> "MoEShape":
        cfg = dict(cfg)
        cfg.pop("name", None)
        for k in cfg:
            require(k in cls.__dataclass_fields__, f"{key}.{k}", cfg[k], "unknown key; allowed: name, " + ", ".join(cls.__dataclass_fields__))
        m = cls(**cfg)
        require(m.experts >= 1 and 1 <= m.top_k <= m.experts, f"{key}.top_k", m.top_k, f"1 <= top_k <= experts={m.experts}")
        return m

    @property
    def token_bytes(self) -> int:
        return self.hidden * self.bytes_per_elem

    @property
    def flops_per_assignment(self) -> float:
        return 2.0 * 3 * self.hidden * self.ffn           # SwiGLU expert: three h x f matmuls, forward

    @property
    def expert_bytes(self) -> int:
        return 3 * self.hidden * self.ffn * self.bytes_per_elem


def check_divisible(m: MoEShape, w: Wafer, key: str = "model.experts") -> None:
    require(m.experts % w.packages == 0, key, m.experts, f"a multiple of hardware.packages={w.packages} (E/G experts per package)")
    per = m.experts // w.packages
    if not (per % w.chiplets == 0 or w.chiplets % per == 0):
        raise ConfigError(key, m.experts, f"E/packages={per} experts per package must divide or be a multiple of "
                                          f"hardware.chiplets={w.chiplets}")


def chiplet_of(group_of: np.ndarray, m: MoEShape, w: Wafer) -> tuple[np.ndarray, int]:
    """(global index of each expert's first chiplet, chiplets sharing one expert). With more experts
    than chiplets per package, consecutive experts share a chiplet; with fewer, each expert is
    sharded over chiplets / (E/G) chiplets."""
    per = m.experts // w.packages
    rank = np.zeros(m.experts, dtype=np.int64)
    for g in range(w.packages):
        members = np.nonzero(group_of == g)[0]
        rank[members] = np.arange(members.size)
    if per >= w.chiplets:
        return group_of * w.chiplets + rank // (per // w.chiplets), 1
    share = w.chiplets // per
    return group_of * w.chiplets + rank * share, share


def stage_times(experts: np.ndarray, home: np.ndarray, group_of: np.ndarray, m: MoEShape, w: Wafer, net) -> dict:
    """Forward stage costs of one micro-batch: dispatch/combine time as functions of the chunk count,
    expert compute (busiest chiplet), expert-weight load (busiest package), and the bytes moved."""
    G = w.packages
    T = traffic_matrix(experts, home, group_of, G, m.token_bytes)
    f = np.bincount(experts.ravel(), minlength=m.experts).astype(float)
    first, share = chiplet_of(group_of, m, w)
    chip_assign = np.zeros(G * w.chiplets)
    for j in range(share):
        np.add.at(chip_assign, first + j, f / share)
    fan_bytes = chip_assign.max() * m.token_bytes
    compute = chip_assign.max() * m.flops_per_assignment / (w.chiplet_tflops * 1e12)
    per = m.experts // G
    weights = per * m.expert_bytes * 8.0 / w.dram_bps

    def inter(s: int, matrix: np.ndarray) -> float:
        return engine.matrix_phase_time(net, matrix / s)

    def fan(s: int) -> float:
        return w.intra.transfer_s(fan_bytes / s) if fan_bytes > 0 else 0.0

    return {"dispatch": lambda s: inter(s, T) + fan(s), "combine": lambda s: inter(s, T.T) + fan(s),
            "compute": compute, "weights": weights, "inter_bytes": float(T.sum()), "traffic": T}
