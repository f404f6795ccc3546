"""Selection rules on shared randomness, vectorised over trials (numpy, float64 log-weights).

A target model supplies ``logw(x, y)`` = log p(y|x)/r(y) (broadcasting, last axis = dimension),
``logwbar(x)`` = log sup_y of it, and ``propose(rng, shape)`` draws from the proposal r. The decoder
side never sees ``logw`` or ``logwbar`` of the encoder; it only gets the shared randomness.

- :func:`ers`: Ensemble Rejection Sampling. Round t: N proposals, Exp(1) race variables E (J = argmin
  E_i / w_i, the Gumbel-max pick with prob w_J / sum w), one uniform V; accept when
  V <= Zhat / (Zhat + (wbar - w_J)/N), Zhat = mean w. N = 1 is plain rejection sampling. Rounds are
  drawn in blocks (doubling) for the trials still running; ``max_rounds`` caps them (truncated trials
  get T = 0 and are reported, not dropped silently). The accepted sample is independent of T.
- :func:`rs_grouped`: rejection sampling whose rounds are split in groups of g = 2^floor(log2 wbar(x)):
  gives K (the RS index), the group L and the rank of V_K among the group's uniforms (the sorting code).
- :func:`pfr`: Poisson functional representation: arrival times S_i (cumulative Exp(1)),
  K = argmin S_i / w_i, exact by the stopping rule S_i / wbar >= best; truncated at ``max_points``.
"""
from __future__ import annotations

import math

import numpy as np

BUDGET = 1 << 21          # float64 elements per block (times the dimension)


def _lse(a: np.ndarray) -> np.ndarray:
    mx = np.max(a, axis=-1, keepdims=True)
    return (mx + np.log(np.sum(np.exp(a - mx), axis=-1, keepdims=True)))[..., 0]


def _chunked(fn, x: np.ndarray, per_trial: int, *args, **kw) -> dict:
    """``fn`` on chunks of trials small enough that one block of a chunk fits the budget."""
    size = max(1, BUDGET // max(1, per_trial))
    if len(x) <= size:
        return fn(x, *args, **kw)
    parts = [fn(x[i:i + size], *args, **kw) for i in range(0, len(x), size)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def ers(model, x: np.ndarray, N: int, rng, max_rounds: int = 100_000, keep_batch: bool = False) -> dict:
    """ERS on every row of ``x`` (n, d). Returns T (0: truncated), J, rank (1 + #{E_i < E_J}), y (n, d);
    with ``keep_batch`` also the accepted round's proposals (n, N, d) and race variables (n, N)."""
    return _chunked(lambda xc: _ers(model, xc, N, rng, max_rounds, keep_batch), x, N * x.shape[1])


def _ers(model, x, N, rng, max_rounds, keep_batch) -> dict:
    n, d = x.shape
    lwbar = model.logwbar(x)
    T = np.zeros(n, dtype=np.int64)
    J = np.zeros(n, dtype=np.int64)
    rank = np.zeros(n, dtype=np.int64)
    y_out = np.full((n, d), np.nan)
    by = np.full((n, N, d), np.nan) if keep_batch else None
    be = np.full((n, N), np.nan) if keep_batch else None
    active = np.arange(n)
    done, R = 0, 1
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        while len(active) and done < max_rounds:
            R = int(max(1, min(R, max_rounds - done, BUDGET // max(1, len(active) * N * d))))
            a = len(active)
            y = model.propose(rng, (a, R, N, d))
            lw = model.logw(x[active][:, None, None, :], y)                      # (a, R, N)
            e = rng.exponential(1.0, (a, R, N))
            j = np.argmax(lw - np.log(e), axis=-1)                                # (a, R)
            lwj = np.take_along_axis(lw, j[..., None], -1)[..., 0]
            lse = _lse(lw)
            ratio = np.exp(lwbar[active][:, None] - lse) - np.exp(lwj - lse)     # (wbar - w_J) / (N Zhat)
            acc = rng.random((a, R)) <= 1.0 / (1.0 + np.maximum(ratio, 0.0))
            has = acc.any(axis=1)
            first = np.argmax(acc, axis=1)
            hit, f = np.flatnonzero(has), first[has]
            idx = active[hit]
            T[idx] = done + f + 1
            jj = j[hit, f]
            J[idx] = jj
            y_out[idx] = y[hit, f, jj]
            ehit = e[hit, f]                                                      # (h, N)
            rank[idx] = 1 + np.sum(ehit < ehit[np.arange(len(hit)), jj][:, None], axis=1)
            if keep_batch:
                by[idx], be[idx] = y[hit, f], ehit
            active = active[~has]
            done += R
            R *= 2
    out = {"T": T, "J": J, "rank": rank, "y": y_out}
    if keep_batch:
        out.update(batch_y=by, batch_e=be)
    return out


def rs_grouped(model, x: np.ndarray, rng, max_rounds: int = 100_000) -> dict:
    """Rejection sampling (one proposal a round, accept when V <= w / wbar) with rounds grouped by
    g(x) = 2^mexp, mexp = min(floor(log2 wbar(x)), floor(log2 max_rounds)) (a group never exceeds the
    round cap). Returns K (0: truncated), mexp, L = ceil(K / g), the rank of V_K among the uniforms
    of group L (the group is completed from the shared randomness), and y."""
    n, d = x.shape
    lwbar = model.logwbar(x)
    mexp = np.minimum(np.floor(lwbar / np.log(2.0)), math.floor(math.log2(max_rounds))).astype(np.int64)
    K = np.zeros(n, dtype=np.int64)
    L = np.zeros(n, dtype=np.int64)
    rank = np.zeros(n, dtype=np.int64)
    y_out = np.full((n, d), np.nan)
    for me in np.unique(mexp):                         # trials with the same group size run together
        g = 1 << int(me)
        bucket = np.flatnonzero(mexp == me)
        step = max(1, BUDGET // (g * d))               # trials per block
        for b0 in range(0, len(bucket), step):
            active = bucket[b0:b0 + step]
            done, G = 0, 1
            while len(active) and done < max_rounds:
                G = int(max(1, min(G, -(-(max_rounds - done) // g), BUDGET // max(1, len(active) * g * d))))
                a = len(active)
                y = model.propose(rng, (a, G * g, d))
                v = rng.random((a, G * g))
                with np.errstate(over="ignore", under="ignore", divide="ignore"):
                    acc = np.log(v) <= model.logw(x[active][:, None, :], y) - lwbar[active][:, None]
                acc[:, max(0, max_rounds - done):] = False
                has = acc.any(axis=1)
                first = np.argmax(acc, axis=1)
                hit, f = np.flatnonzero(has), first[has]
                idx = active[hit]
                K[idx] = done + f + 1
                L[idx] = done // g + f // g + 1
                y_out[idx] = y[hit, f]
                grp = (f // g)[:, None] * g + np.arange(g)[None, :]               # the group's rounds
                rank[idx] = 1 + np.sum(v[hit[:, None], grp] < v[hit, f][:, None], axis=1)
                active = active[~has]
                done += G * g
                G *= 2
    return {"K": K, "mexp": mexp, "L": L, "rank": rank, "y": y_out}


def pfr(model, x: np.ndarray, rng, max_points: int = 1 << 20) -> dict:
    """Poisson functional representation: K = argmin_i S_i / w_i (exact when the stopping rule is met
    within ``max_points``; else truncated, K = 0 and y the best so far)."""
    n, d = x.shape
    lwbar = model.logwbar(x)
    best = np.full(n, np.inf)                      # log(S_K / w_K)
    K = np.zeros(n, dtype=np.int64)
    y_out = np.full((n, d), np.nan)
    s_last = np.zeros(n)
    active = np.arange(n)
    done, B = 0, 64
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        while len(active) and done < max_points:
            B = int(max(1, min(B, max_points - done, BUDGET // max(1, len(active) * d))))
            a = len(active)
            s = s_last[active][:, None] + np.cumsum(rng.exponential(1.0, (a, B)), axis=1)
            y = model.propose(rng, (a, B, d))
            score = np.log(s) - model.logw(x[active][:, None, :], y)
            i = np.argmin(score, axis=1)
            sc = score[np.arange(a), i]
            better = sc < best[active]
            idx = active[better]
            best[idx] = sc[better]
            K[idx] = done + i[better] + 1
            y_out[idx] = y[better, i[better]]
            s_last[active] = s[:, -1]
            stop = np.log(s[:, -1]) - lwbar[active] >= best[active]               # no later point can win
            active = active[~stop]
            done += B
            B *= 2
    K[active] = 0                                  # truncated
    return {"K": K, "y": y_out, "truncated": np.isin(np.arange(n), active)}
