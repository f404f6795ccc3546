"""The two scheduling rules of SpaceServe, as pure functions (the simulator calls them).

- :func:`sis_decoder_sms`: the Space-Inference Scheduler's cost-model rule [sheet, I]. At each
  decision epoch (every decoder step) give the decoder the smallest TPC-aligned SM count whose
  predicted step time is within (1 + eps) of the full-GPU step, and the rest to the encoder; with
  no encoder work pending the decoder keeps the whole GPU.
- :func:`encoder_batch`: encoder batch formation. ``fcfs`` (the released code's encoder scheduler:
  the oldest request alone, one request per step, within the token budget), ``srpt`` (shortest remaining encoder work first, formed whenever the encoder frees) and
  ``twsrft`` (the same order with aging, formed once per time window W): remaining work r_i is the
  request's not-yet-encoded image tokens; the key is r_i - beta * wait_i; the batch fills with
  whole images up to the encoder token budget (at least one image); what does not fit waits.
"""
from __future__ import annotations

import math

from components.core.errors import ConfigError


def sis_decoder_sms(gpu, step: tuple, eps: float, encoder_pending: bool) -> int:
    """SMs for the decoder's next step ``step = (n_decode, ctx_tokens, n_prefill, prefill_ctx)``.

    Step time falls monotonically with SMs, so a binary search over TPC multiples finds the
    smallest share within (1 + eps) of the full GPU. The result is always in [tpc, sms]."""
    if not encoder_pending:
        return gpu.sms
    target = (1.0 + eps) * gpu.iter_time(gpu.sms, *step)
    lo, hi = 1, gpu.sms // gpu.tpc          # in TPCs; hi always satisfies the target
    while lo < hi:
        mid = (lo + hi) // 2
        if gpu.iter_time(mid * gpu.tpc, *step) <= target:
            hi = mid
        else:
            lo = mid + 1
    return hi * gpu.tpc


def sis_cost_decoder_sms(gpu, step: tuple, backlog_flops: float, backlog_tokens: int, mu: float,
                         deadline_s: float) -> int:
    """SMs for the decoder under the cost rule J (see module docstring); the whole GPU when the
    encoder has nothing queued. Ties go to the larger decoder share."""
    if backlog_flops <= 0:
        return gpu.sms
    best, best_j = gpu.sms, math.inf
    for s_dec in range(gpu.sms, gpu.tpc - 1, -gpu.tpc):
        s_enc = gpu.sms - s_dec
        drain = gpu.enc_time(backlog_flops, s_enc, backlog_tokens) if s_enc > 0 else math.inf
        j = gpu.iter_time(s_dec, *step) + (mu * max(0.0, drain - deadline_s) if mu > 0 else 0.0)
        if j < best_j - 1e-15:
            best, best_j = s_dec, j
    return best


def order_key(order: str, remaining: int, arrival: float, now: float, beta: float) -> float:
    """Sort key of one queued request (ascending = served first)."""
    if order == "fcfs":
        return arrival
    if order in ("srpt", "twsrft"):
        return remaining - beta * (now - arrival)
    raise ConfigError("encoder_order", order, "one of fcfs, srpt, twsrft")


def encoder_batch(queue: list, now: float, order: str, budget: int, beta: float) -> list[tuple[int, int]]:
    """Images for the next encoder batch: ``[(request id, image index), ...]``.

    ``queue``: ``[(rid, arrival, [(image index, vit tokens), ...pending])]``. Requests in key order
    (ties by arrival, then id); images added in order until the next one would pass ``budget``;
    ``fcfs`` takes images of the oldest request only (one request per step, as the released code)."""
    keyed = sorted(queue, key=lambda q: (order_key(order, sum(t for _, t in q[2]), q[1], now, beta), q[1], q[0]))
    out, used = [], 0
    for rid, _, images in keyed[:1] if order == "fcfs" else keyed:
        for j, t in images:
            if out and used + t > budget:
                return out
            out.append((rid, j))
            used += t
    return out
