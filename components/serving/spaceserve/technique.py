"""Registered technique ``spaceserve``: one serving system on the calibrated GPU simulator, over a
load curve of Poisson arrival rates, for one seed.

The system is chosen by params: ``system`` (``tm`` time multiplexing, ``static`` fixed SM split,
``sis`` the Space-Inference Scheduler, ``mask`` the released code's fixed encoder mask beside an
unmasked decoder) and ``encoder_order`` (``fcfs``, ``srpt``, ``twsrft``);
SpaceServe is ``sis`` + ``twsrft``. The request stream for rate r depends only on (seed, r), so
every variant is evaluated on the very same requests and the DAG pairs systems seed by seed.

Metrics: ``mean_tpot_s``, ``p99_tpot_s``, ``mean_ttft_s``, ``p99_ttft_s``,
``encoder_completion_s`` at the headline ``rate``, the same with ``_r<rate>`` for every rate of
``rates``, the calibration premise ``dec_sat_share``, ``enc_stall_share`` (TM: part of the decode
steps' time spent in the encoder), ``enc_sm_share`` (part of the GPU's SM-seconds the encoder
computed on) and ``unfinished`` (requests cut by the simulator's safety stop; 0 in a sound run).
Series over the arrival rate give the load curves.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np

from components.core.errors import require
from components.core.registry import technique
from components.core.result import Result
from components.models.knobs import require_positive_ints
from components.serving.spaceserve.calibration import GPU
from components.serving.spaceserve.sim import SimConfig, simulate
from components.serving.spaceserve.workload import stream

_GPU_KEYS = {f.name for f in fields(GPU)} - {"name"}


@dataclass
class SpaceServeParams:
    system: Literal["tm", "static", "sis", "mask"] = "sis"   # mask: the released code's partition (sim.py)
    encoder_order: Literal["fcfs", "srpt", "twsrft"] = "fcfs"   # tm always runs its encoder FCFS
    rates: list[float] = field(default_factory=lambda: [1.0, 2.0, 5.0, 10.0, 15.0, 20.0])   # req/s
    rate: float = 10.0                 # the headline rate (the sheet's acceptance rate); one of rates
    n_requests: int = 200              # per rate (the repo's benchmark client: 200 prompts)
    window_s: float = 0.03             # TWSRFT window W (sheet: 20-50 ms)
    beta: float = 1000.0               # aging: ViT tokens of priority per second waited
    eps: float = 0.05                  # SIS tolerance on the decoder's step time
    sis_rule: Literal["eps", "cost"] = "eps"   # eps: the sheet's rule; cost: its general variant J
    mu: float = 1.0                    # cost rule: weight of the encoder-backlog penalty
    deadline_s: float = 0.05           # cost rule: backlog drain time tolerated without penalty
    static_enc_share: float = 0.3      # static split and mask: the encoder's SM share
    enc_budget: int = 8192             # ViT tokens per encoder batch / per TM step
    chunk_tokens: int = 2048           # chunked prefill
    max_batch: int = 256
    gpu: str = "a100"                  # calibration preset: a100 | h100
    gpu_overrides: dict = field(default_factory=dict)   # any GPU field: gamma, bw_knee, eta, k_dec, ...
    image_counts: list[int] = field(default_factory=lambda: [1, 2, 4])
    image_probs: list[float] = field(default_factory=lambda: [0.6, 0.25, 0.15])
    tokens_min: int = 256              # ViT patches per image
    tokens_max: int = 1280
    text_min: int = 50
    text_max: int = 200
    out_mean: float = 200.0
    timeline_plot: bool = True         # plots/sm_partition.png (space-multiplexed systems, headline rate)

    def check(self):
        require(len(self.rates) >= 1 and all(0 < r <= 200 for r in self.rates) and len(set(self.rates)) == len(self.rates),
                "rates", self.rates, "a non-empty list of distinct arrival rates in (0, 200] req/s")
        require(self.rate in self.rates, "rate", self.rate, f"one of params.rates {self.rates}")
        require(1 <= self.n_requests <= 20000, "n_requests", self.n_requests, "an integer in [1, 20000]")
        require(self.window_s >= 0, "window_s", self.window_s, "a window >= 0 seconds")
        require(self.beta >= 0, "beta", self.beta, "an aging rate >= 0")
        require(0 <= self.eps <= 1, "eps", self.eps, "a tolerance in [0, 1]")
        require(self.mu >= 0, "mu", self.mu, "a weight >= 0")
        require(self.deadline_s >= 0, "deadline_s", self.deadline_s, "a drain time >= 0 seconds")
        require(0 < self.static_enc_share < 1, "static_enc_share", self.static_enc_share, "a share in (0, 1)")
        require(self.tokens_min >= 1 and self.tokens_max >= self.tokens_min, "tokens_max", self.tokens_max,
                f"an integer >= tokens_min ({self.tokens_min}) >= 1")
        require(self.enc_budget >= self.tokens_max, "enc_budget", self.enc_budget,
                f"at least one image's patches (tokens_max = {self.tokens_max})")
        require(self.text_min >= 0 and self.text_max >= self.text_min, "text_max", self.text_max,
                f"an integer >= text_min ({self.text_min}) >= 0")
        require_positive_ints(self, "chunk_tokens", "max_batch")
        require(self.out_mean >= 2, "out_mean", self.out_mean, "a mean output length >= 2 tokens")
        require(self.gpu in ("a100", "h100"), "gpu", self.gpu, "one of a100, h100")
        bad = sorted(set(self.gpu_overrides) - _GPU_KEYS)
        require(not bad, "gpu_overrides", bad[0] if bad else None, "GPU fields: " + ", ".join(sorted(_GPU_KEYS)))
        require(len(self.image_counts) == len(self.image_probs) and len(self.image_counts) >= 1
                and all(c >= 1 for c in self.image_counts), "image_counts", self.image_counts,
                "positive image counts, one per entry of image_probs")
        require(all(p >= 0 for p in self.image_probs) and abs(sum(self.image_probs) - 1) < 1e-6,
                "image_probs", self.image_probs, "non-negative probabilities summing to 1")
        g = self.gpu_overrides
        for k, v in g.items():
            require(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0,
                    f"gpu_overrides.{k}", v, "a finite number >= 0")
        sms, tpc = g.get("sms", 108), g.get("tpc", 2)
        require(isinstance(tpc, int) and tpc >= 1 and isinstance(sms, int) and sms >= tpc and sms % tpc == 0,
                "gpu_overrides.sms", sms, f"a whole number of TPCs of {tpc} SMs (integers)")
        require(0.05 <= g.get("bw_knee", 0.4) <= 1.0, "gpu_overrides.bw_knee", g.get("bw_knee"), "a share in [0.05, 1]")
        require(g.get("gamma", 0.1) >= 0, "gpu_overrides.gamma", g.get("gamma"), "an interference factor >= 0")
        require(0 < g.get("eta", 0.52) <= 1, "gpu_overrides.eta", g.get("eta"), "an efficiency in (0, 1]")


def _stats(res) -> dict[str, float]:
    return {"mean_tpot_s": float(np.mean(res.tpot)) if res.tpot.size else float("nan"),
            "p99_tpot_s": float(np.percentile(res.tpot, 99)) if res.tpot.size else float("nan"),
            "mean_ttft_s": float(np.mean(res.ttft)), "p99_ttft_s": float(np.percentile(res.ttft, 99)),
            "encoder_completion_s": float(np.mean(res.enc_completion)),
            "throughput_tok_s": res.tokens / res.makespan if res.makespan > 0 else float("nan"),
            "enc_stall_share": res.enc_stall_share, "enc_sm_share": res.enc_sm_share, "unfinished": float(res.unfinished)}


def _timeline_png(timeline, sms: int, horizon: float) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [x for x, _ in timeline if x <= horizon] + [horizon]
    s = [y for x, y in timeline if x <= horizon]
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.step(t[:-1] + [t[-1]], s + [s[-1]], where="post", lw=0.8, label="encoder SMs")
    ax.set_ylim(0, sms)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel(f"encoder SMs of {sms}")
    ax.set_title("SM partition over time (decoder gets the rest)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


@technique("spaceserve", family="serving", params=SpaceServeParams,
           summary="SpaceServe (NeurIPS 2025): MLLM encoder and decoder space-multiplexed on one simulated A100 "
                   "(SIS SM partitioning + TWSRFT encoder batching) vs vLLM-like time multiplexing, static split, FCFS")
def run_spaceserve(p: SpaceServeParams, ctx) -> Result:
    gpu = GPU.preset(p.gpu, **p.gpu_overrides)
    cfg = SimConfig(system=p.system, encoder_order="fcfs" if p.system == "tm" else p.encoder_order,
                    window_s=p.window_s, beta=p.beta, eps=p.eps, sis_rule=p.sis_rule, mu=p.mu,
                    deadline_s=p.deadline_s, static_enc_share=p.static_enc_share,
                    enc_budget=p.enc_budget, chunk_tokens=p.chunk_tokens, max_batch=p.max_batch)
    rates = sorted(p.rates)
    metrics: dict[str, float] = {}
    per_rate, files = [], {}
    for i, rate in enumerate(rates):
        reqs = stream(ctx.seed, rate, p.n_requests, image_counts=tuple(p.image_counts), image_probs=tuple(p.image_probs),
                      tokens=(p.tokens_min, p.tokens_max), text=(p.text_min, p.text_max), out_mean=p.out_mean)
        headline = rate == p.rate
        res = simulate(reqs, gpu, cfg, keep_timeline=headline and p.timeline_plot and p.system != "tm")
        st = _stats(res)
        per_rate.append({"rate": rate, **st, "makespan_s": res.makespan})
        for k, v in st.items():
            metrics[f"{k}_r{rate:g}".replace(".", "_")] = v
            if headline:
                metrics[k] = v
        if headline and len(res.timeline) > 1:
            files["plots/sm_partition.png"] = _timeline_png(res.timeline, gpu.sms, min(res.makespan, 5.0))
        ctx.progress(i + 1, len(rates), rate=rate, tpot_ms=round(st["mean_tpot_s"] * 1e3, 2))
    metrics["dec_sat_share"] = gpu.decoder_saturation_share(eps=p.eps)
    metrics["bw_knee_share"] = gpu.b_fit[0]
    x = "arrival rate (req/s)"
    series = {name: (rates, [row[key] for row in per_rate], x) for name, key in
              [("mean_tpot_vs_rate", "mean_tpot_s"), ("p99_tpot_vs_rate", "p99_tpot_s"),
               ("mean_ttft_vs_rate", "mean_ttft_s"), ("encoder_completion_vs_rate", "encoder_completion_s")]}
    return Result(metrics=metrics, series=series, tables={"per_rate": per_rate},
                  info={"gpu": gpu.name, "sms": gpu.sms, "compute_fit": gpu.c_fit, "bandwidth_fit": gpu.b_fit,
                        "system": p.system, "encoder_order": cfg.encoder_order}, files=files)
