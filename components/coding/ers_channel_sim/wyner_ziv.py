"""Part B: Gaussian Wyner-Ziv with distributed matching on shared randomness.

X ~ N(0, 1) (truncated to |x| <= xmax), side information Z = X + N(0, sz2) at the decoder only, test
channel U = X + N(0, sw2). Encoder target P = N(x, sw2), decoder target Q = U|Z = N(z/(1+sz2),
sz2/(1+sz2) + sw2), both over the proposal R = N(0, 1+sw2). Every proposal carries a shared 10-bit
hash; the bin at L bits is its top L bits. Schemes (all on the same source draws):

- ``ers`` (N): the encoder runs ERS with its weights and sends T (Elias gamma) and the L-bit bin of J;
  the decoder takes, in batch T, the in-bin argmax of log w^Q + Gumbel (the same race variables).
- ``rs``: ERS with N = 1 (plain RS); the decoder gets T, nothing to match (L = 0).
- ``pml``: Poisson functional representation truncated at ``n_points`` points: encoder K = argmin
  S_i / w^P_i, decoder the in-bin argmin of S_i / w^Q_i; rate L (Poisson matching lemma).
- ``iml`` (N): one batch, no rejection step (importance matching lemma): biased, a reported control.

Reconstruction Xhat = E[X | U, Z] = (U/sw2 + Z/sz2) / (1 + 1/sw2 + 1/sz2); mismatches are counted
separately from the MSE they cause.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import kstest

from components.coding.ers_channel_sim.codes import gamma_len
from components.coding.ers_channel_sim.gaussian import GaussChannel, truncated_source
from components.coding.ers_channel_sim.samplers import ers

HASH_BITS = 10


def _decode_bins(lwq: np.ndarray, race: np.ndarray, bins: np.ndarray, j: np.ndarray, L: int) -> np.ndarray:
    """The decoder's pick: in-bin argmax of log w^Q - log(race) (race: Exp(1) or arrival times)."""
    sh = HASH_BITS - L
    mine = (bins >> sh) == (bins[np.arange(len(j)), j] >> sh)[:, None]
    return np.argmax(np.where(mine, lwq - np.log(race), -np.inf), axis=1)


def _outcome(x, z, u, sw2, sz2):
    xhat = (u / sw2 + z / sz2) / (1.0 + 1.0 / sw2 + 1.0 / sz2)
    return float(np.mean((xhat - x) ** 2))


def run_point(rng, sz2: float, sw2: float, n: int, N: int, Ls, n_points: int, xmax: float,
              chunk: int = 4000) -> list[dict]:
    """Every scheme at one test channel sw2: rows {scheme, L, rate, mismatch, mse, ks_p, truncated}."""
    x = truncated_source(rng, n, 1, xmax)
    z = x + rng.standard_normal((n, 1)) * math.sqrt(sz2)
    enc = GaussChannel(sw2, 1.0 + sw2)
    mu, q2 = z[:, 0] / (1.0 + sz2), sz2 / (1.0 + sz2) + sw2
    dec = GaussChannel(q2, 1.0 + sw2)
    rows = []
    # ERS(N) and IML(N): same N, ERS with its rejection step, IML the first batch only
    for scheme in ("ers", "rs", "iml"):
        nn = 1 if scheme == "rs" else N
        picks = {L: [] for L in Ls}
        gam, resid, trunc, xs, zs = [], [], 0, [], []
        for c0 in range(0, n, chunk):
            xc, zc, muc = x[c0:c0 + chunk], z[c0:c0 + chunk], mu[c0:c0 + chunk]
            if scheme == "iml":
                by = enc.propose(rng, (len(xc), nn, 1))
                be = rng.exponential(1.0, (len(xc), nn))
                j = np.argmax(enc.logw(xc[:, None, :], by) - np.log(be), axis=1)
                ok = np.ones(len(xc), bool)
                T = np.ones(len(xc), np.int64)
            else:
                r = ers(enc, xc, nn, rng, keep_batch=True)
                ok = r["T"] > 0
                by, be, j, T = r["batch_y"], r["batch_e"], r["J"], r["T"]
            trunc += int(np.sum(~ok))
            by, be, j, xc, zc, muc, T = by[ok], be[ok], j[ok], xc[ok], zc[ok], muc[ok], T[ok]
            bins = rng.integers(0, 1 << HASH_BITS, be.shape)
            lwq = dec.logw(muc[:, None, None], by)
            uj = by[np.arange(len(j)), j, 0]
            resid.append((uj - xc[:, 0]) / math.sqrt(sw2))
            gam.append(gamma_len(T) if scheme != "iml" else np.zeros(len(T), np.int64))
            xs.append(xc[:, 0])
            zs.append(zc[:, 0])
            for L in (Ls if scheme != "rs" else [0]):
                jd = _decode_bins(lwq, be, bins, j, L) if nn > 1 else j
                picks[L].append((jd == j, by[np.arange(len(j)), jd, 0]))
        gbits = float(np.mean(np.concatenate(gam)))
        ks_p = float(kstest(np.concatenate(resid), "norm").pvalue)
        xa, za = np.concatenate(xs), np.concatenate(zs)
        for L in (Ls if scheme != "rs" else [0]):
            match = np.concatenate([p[0] for p in picks[L]])
            u = np.concatenate([p[1] for p in picks[L]])
            rows.append({"scheme": scheme, "N": nn, "sw2": sw2, "L": L, "rate": gbits + L,
                         "mismatch": float(1 - match.mean()), "mse": _outcome(xa, za, u, sw2, sz2),
                         "ks_p": ks_p, "truncated": trunc / n})
    # PML: truncated Poisson functional representation, shared arrival times and proposals
    n_pml = min(n, max(2000, n // 5))
    res = {L: [] for L in Ls}
    trunc_e = trunc_d = 0
    resid = []
    for c0 in range(0, n_pml, max(1, chunk // 8)):
        xc, muc = x[c0:c0 + chunk // 8], mu[c0:c0 + chunk // 8]
        zc = z[c0:c0 + chunk // 8]
        s = np.cumsum(rng.exponential(1.0, (len(xc), n_points)), axis=1)
        by = enc.propose(rng, (len(xc), n_points, 1))
        lwp = enc.logw(xc[:, None, :], by)
        k = np.argmin(np.log(s) - lwp, axis=1)
        best = (np.log(s) - lwp)[np.arange(len(k)), k]
        trunc_e += int(np.sum(np.log(s[:, -1]) - enc.logwbar(xc) < best))
        bins = rng.integers(0, 1 << HASH_BITS, s.shape)
        lwq = dec.logw(muc[:, None, None], by)
        resid.append((by[np.arange(len(k)), k, 0] - xc[:, 0]) / math.sqrt(sw2))
        for L in Ls:
            kd = _decode_bins(lwq, s, bins, k, L)
            if L == max(Ls):
                bd = (np.log(s) - lwq)[np.arange(len(kd)), kd]
                trunc_d += int(np.sum(np.log(s[:, -1]) - dec.logwbar(muc[:, None]) < bd))
            res[L].append((kd == k, by[np.arange(len(k)), kd, 0], xc[:, 0], zc[:, 0]))
    ks_p = float(kstest(np.concatenate(resid), "norm").pvalue)
    for L in Ls:
        match = np.concatenate([r[0] for r in res[L]])
        u, xa, za = (np.concatenate([r[i] for r in res[L]]) for i in (1, 2, 3))
        rows.append({"scheme": "pml", "N": n_points, "sw2": sw2, "L": L, "rate": float(L),
                     "mismatch": float(1 - match.mean()), "mse": _outcome(xa, za, u, sw2, sz2), "ks_p": ks_p,
                     "truncated": trunc_e / n_pml, "decoder_truncated": trunc_d / n_pml})
    return rows


def pareto_mse(rows: list[dict], rate: float) -> float:
    """Lowest MSE among ``rows`` with rate <= ``rate`` (NaN if none)."""
    ok = [r["mse"] for r in rows if r["rate"] <= rate + 1e-12]
    return min(ok) if ok else math.nan


def interp_mismatch(rows: list[dict], rate: float) -> float:
    """Mismatch at ``rate`` by linear interpolation over one scheme's points at one sw2 (NaN outside)."""
    pts = sorted((r["rate"], r["mismatch"]) for r in rows)
    rs, ms = [p[0] for p in pts], [p[1] for p in pts]
    if not rs or rate < rs[0] - 1e-12 or rate > rs[-1] + 1e-12:
        return math.nan
    return float(np.interp(rate, rs, ms))


def r_wz(D: np.ndarray, sz2: float) -> np.ndarray:
    """Gaussian Wyner-Ziv rate-distortion function (bits): max(0, 0.5 log2(var(X|Z) / D))."""
    return np.maximum(0.0, 0.5 * np.log2((sz2 / (1.0 + sz2)) / np.asarray(D)))
