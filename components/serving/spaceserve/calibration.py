"""GPU calibration and the kernel cost model: throughput of encoder and decoder kernels vs SM share.

Where each number comes from (A100 SXM4 80GB unless said otherwise):

- 108 SMs in 54 TPCs; partitions are whole TPCs (2 SMs): NVIDIA A100 Tensor Core GPU Architecture
  whitepaper (2020), GA100 configuration of the A100 product; TPC granularity of SM masks:
  Bakita & Anderson, "Hardware Compute Partitioning on NVIDIA GPUs", RTAS 2023 (libsmctrl).
- 312 TFLOP/s dense BF16 peak, i.e. 1024 dense FP16/BF16 FMA per clock per SM at 1.41 GHz: NVIDIA
  A100 datasheet / whitepaper. Tensor throughput is per SM, so compute-bound kernels scale with
  the SMs they get: the compute calibration points are linear in the share (``A100_COMPUTE_POINTS``).
- Achieved compute efficiency eta = 0.52: Megatron-LM's 163 TFLOP/s per A100 (52% of peak) for
  GPT training end to end (Narayanan et al., SC'21, 502 PFLOP/s on 3072 A100s). Used for the ViT
  encoder and for LLM prefill/decode GEMMs alike.
- 2039 GB/s HBM2e peak (datasheet, 80GB SXM); achievable streaming bandwidth ``bw_max`` = 1.75 TB/s,
  ~86% of peak: our reading of what optimised stream-type kernels reach on A100-80GB, not one cited
  measurement.
- Bandwidth vs SMs: one SM keeps a bounded number of bytes in flight, so achievable DRAM bandwidth
  rises about linearly with SMs (Little's law) and flattens once HBM saturates. Published
  statements put the knee at a minority of SMs (MuxServe, Duan et al., ICML 2024, Fig. 3: decode
  latency changes little as its SM share shrinks; Nexus, arXiv 2507.06608: diminishing returns beyond a
  saturation point; the spec sheet: s_sat ~ 0.3-0.5 S). No per-SM curve for A100 was available to
  us, so ``A100_BANDWIDTH_POINTS`` is a **derived** ramp: ~2.5% of the saturated bandwidth per 1%
  of SMs, knee at ~0.4 S (the sheet's midpoint). Robustness runs move the knee (0.3 S, 0.5 S).
- Wave quantisation of the encoder's GEMMs: a batch of T patches is ceil(T/128) x 30 output tiles
  (128 x 128 tiles of the ViT's 3 x 1280-wide QKV projection, the CUTLASS/cuBLAS default tile); with
  s SMs they run in ceil(tiles / s) waves, so the kernel keeps tiles / (s * waves) of its SMs busy.
  A single 256-patch image fills 60 of 108 SMs; small partitions and large batches fill theirs.
  This is why the encoder batches (TWSRFT) and why a slice of SMs suits small encoder kernels.
- Co-run interference gamma = 0.10 (HBM cannot be partitioned; sheet range 0.05-0.15); per-launch
  overheads k_e = 1 ms (encoder batch), k_d = 2 ms (decoder step: scheduling + sampling) [sheet, I].
- Model shapes (Qwen2-VL-7B-like, the sheet): ViT 0.6B parameters, 32 layers, d = 1280, full
  attention inside each image; LLM 7B, 28 layers, d = 3584, GQA KV 57,344 bytes per token (bf16).
  The ViT sees 4x the LLM's tokens per image (Qwen2-VL's 2x2 PatchMerger).

Throughput curves: ``thr(s) = T * u / (1 + u**p) ** (1/p)``, u = s / s_sat (a smooth roofline:
linear ramp below s_sat, flat above), fitted to the calibration points by least squares
(:func:`fit_curve`); :class:`GPU` evaluates the fitted curves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import curve_fit

# (SM share, throughput / full-GPU throughput)
A100_COMPUTE_POINTS = [(0.1, 0.1), (0.25, 0.25), (0.5, 0.5), (0.75, 0.75), (1.0, 1.0)]
A100_BANDWIDTH_POINTS = [(0.05, 0.125), (0.1, 0.25), (0.2, 0.5), (0.3, 0.73), (0.4, 0.9), (0.5, 0.97),
                         (0.75, 1.0), (1.0, 1.0)]


def saturating(s, s_sat, p):
    """Unnormalised smooth roofline ``u / (1 + u^p)^(1/p)`` with u = s / s_sat."""
    u = np.asarray(s, dtype=float) / s_sat
    return u / (1.0 + u ** p) ** (1.0 / p)


def fit_curve(points) -> tuple[float, float]:
    """(s_sat, p) of the saturating curve normalised to 1 at s = 1, fitted to (share, rel) points."""
    xs = np.array([x for x, _ in points], dtype=float)
    ys = np.array([y for _, y in points], dtype=float)

    def model(s, s_sat, p):
        return saturating(s, s_sat, p) / saturating(1.0, s_sat, p)

    (s_sat, p), _ = curve_fit(model, xs, ys, p0=(0.4, 4.0), bounds=([0.02, 1.0], [50.0, 40.0]), maxfev=20000)
    return float(s_sat), float(p)


def shift_knee(points, knee: float, ref: float = 0.4):
    """The bandwidth points with their knee moved from ``ref`` to ``knee`` (shares scaled, capped at 1)."""
    out = [(min(1.0, x * knee / ref), y) for x, y in points if x * knee / ref <= 1.0]
    return out + ([(1.0, 1.0)] if out[-1][0] < 1.0 else [])


@dataclass
class GPU:
    """One simulated GPU: SM count, partition granularity, peak figures and the fitted curves."""

    name: str = "a100"
    sms: int = 108
    tpc: int = 2
    peak_flops: float = 312e12
    eta: float = 0.52
    bw_max: float = 1.75e12
    gamma: float = 0.10
    k_enc: float = 1e-3
    k_dec: float = 2e-3
    tile_rows: int = 128          # wave quantisation of encoder GEMMs (see the module docstring)
    tile_cols: int = 30
    bw_knee: float = 0.4          # moves the derived bandwidth points (robustness); 0.4 = as calibrated
    # model shapes
    enc_params: float = 0.6e9
    enc_layers: int = 32
    enc_d: int = 1280
    dec_params: float = 7e9
    dec_layers: int = 28
    dec_d: int = 3584
    kv_bytes: float = 57344.0
    weight_bytes_per_param: float = 2.0

    def __post_init__(self):
        self.bw_points = shift_knee(A100_BANDWIDTH_POINTS, self.bw_knee)
        self.c_fit = fit_curve(A100_COMPUTE_POINTS)
        self.b_fit = fit_curve(self.bw_points)
        self._cf = [self._curve(self.c_fit, s) for s in range(self.sms + 1)]   # per-SM-count tables:
        self._bf = [self._curve(self.b_fit, s) for s in range(self.sms + 1)]   # the simulator's hot path

    @classmethod
    def preset(cls, name: str, **over) -> "GPU":
        """``a100`` (the calibrated default) or ``h100`` (SXM: 132 SMs, 989 TFLOP/s, 3.35 TB/s peak)."""
        base = {"a100": {}, "h100": {"sms": 132, "peak_flops": 989e12, "bw_max": 0.86 * 3.35e12}}[name]
        return cls(name=name, **{**base, **over})

    # --- curves -------------------------------------------------------------------------------------
    def _curve(self, fit, s: float) -> float:
        if s <= 0:
            return 0.0
        a, p = fit
        return float(saturating(min(s, self.sms) / self.sms, a, p) / saturating(1.0, a, p))

    def compute_frac(self, s: float) -> float:
        """Compute throughput with ``s`` SMs as a fraction of the full GPU's (fitted curve)."""
        return self._cf[s] if isinstance(s, int) and 0 <= s <= self.sms else self._curve(self.c_fit, s)

    def bw_frac(self, s: float) -> float:
        """Achievable HBM bandwidth with ``s`` SMs as a fraction of ``bw_max`` (fitted curve)."""
        return self._bf[s] if isinstance(s, int) and 0 <= s <= self.sms else self._curve(self.b_fit, s)

    # --- kernels ------------------------------------------------------------------------------------
    def enc_flops(self, vit_tokens) -> float:
        """FLOPs to encode images of ``vit_tokens`` patches each: 2 P t + 4 L d t^2 per image."""
        t = np.asarray(vit_tokens, dtype=float)
        return float(np.sum(2 * self.enc_params * t + 4 * self.enc_layers * self.enc_d * t * t))

    def wave_eff(self, batch_tokens: int, s: int) -> float:
        """Fraction of ``s`` SMs an encoder GEMM over ``batch_tokens`` rows keeps busy (wave quantisation)."""
        if s <= 0:
            return 0.0
        tiles = math.ceil(batch_tokens / self.tile_rows) * self.tile_cols
        return tiles / (s * math.ceil(tiles / s))

    def enc_time(self, flops: float, s: int, batch_tokens: int | None = None) -> float:
        """Seconds for ``flops`` of encoder work over ``batch_tokens`` patches on ``s`` SMs (without
        the launch overhead); ``batch_tokens=None``: large kernels, no wave-quantisation loss."""
        eff = 1.0 if batch_tokens is None else self.wave_eff(batch_tokens, s)
        return flops / (self.eta * self.peak_flops * self.compute_frac(s) * eff)

    def iter_cost(self, n_decode: int, ctx_tokens: float, n_prefill: int, prefill_ctx: float = 0.0):
        """(bytes, FLOPs) of one decoder step: ``n_decode`` decode tokens over ``ctx_tokens`` of KV in
        total, plus ``n_prefill`` prefill tokens (chunked prefill) attending to ~``prefill_ctx`` each."""
        tokens = n_decode + n_prefill
        nbytes = self.dec_params * self.weight_bytes_per_param + self.kv_bytes * (ctx_tokens + n_prefill)
        attn = 4 * self.dec_layers * self.dec_d * (ctx_tokens + n_prefill * prefill_ctx)
        return nbytes, 2 * self.dec_params * tokens + attn

    def kernel_time(self, s: int, nbytes: float, flops: float, corun: bool = False) -> float:
        """Seconds of decoder work moving ``nbytes`` and computing ``flops`` on ``s`` SMs: the roofline
        max(bytes / BW(s), FLOPs / C(s)), times (1 + gamma) while the encoder runs beside it."""
        if s <= 0:
            return math.inf
        t = max(nbytes / (self.bw_max * self.bw_frac(s)), flops / (self.eta * self.peak_flops * self.compute_frac(s)))
        return t * (1.0 + self.gamma if corun else 1.0)

    def iter_time(self, s: float, n_decode: int, ctx_tokens: float, n_prefill: int = 0,
                  prefill_ctx: float = 0.0, corun: bool = False) -> float:
        """Seconds of one decoder step on ``s`` SMs: :meth:`kernel_time` of its bytes and FLOPs + k_d."""
        if s <= 0:
            return math.inf
        return self.kernel_time(s, *self.iter_cost(n_decode, ctx_tokens, n_prefill, prefill_ctx), corun) + self.k_dec

    def round_sms(self, s: float) -> int:
        """``s`` rounded up to whole TPCs, within [0, sms]."""
        return int(min(self.sms, max(0, self.tpc * math.ceil(s / self.tpc - 1e-9))))

    def decoder_saturation_share(self, n_decode: int = 32, ctx: int = 1000, eps: float = 0.05) -> float:
        """Smallest SM share at which a typical decode step is within (1+eps) of its full-GPU time:
        the measured premise that decode is memory-bound and saturates with a minority of SMs."""
        full = self.iter_time(self.sms, n_decode, n_decode * ctx)
        for s in range(self.tpc, self.sms + 1, self.tpc):
            if self.iter_time(s, n_decode, n_decode * ctx) <= (1 + eps) * full:
                return s / self.sms
        return 1.0
