"""The public einsum: one opt_einsum path, pairwise steps in dense (torch), COO (numpy) or hybrid.

Both hybrids start dense and switch ONE way, dense -> COO, converting every remaining tensor
(intermediates and untouched inputs) and continuing in COO; they differ in when they switch.

``hybrid`` (default): the switch point is chosen from a calibrated cost prediction of the remaining
steps (``costmodel.py``; constants from the prepare step ``einsum_calibration``). Before step s it
predicts, for every candidate switch point k >= s, the cost
``dense(s..k-1) + convert(tensors alive at k) + COO(k..end)`` (dense steps from their index-space
sizes; COO steps from non-zeros estimated under independence from the counted or bounded non-zeros of
the live tensors; a dense step past the memory cap costs infinity) and switches when k = s is the
cheapest and predicted ``SWITCH_MARGIN`` (1.25x) cheaper than staying dense (the switch cannot be
undone: when a planned switch point is reached, the live tensors not counted yet are counted, since
the conversion scans them anyway, and the forecast is redone with the counts). Predicted dense costs are
multiplied by the measured / predicted ratio of the dense steps already run (their CPU time is
measured anyway), and a change of that ratio by 1.5x re-forecasts. A cheap lower bound (conversion
scans and the COO fixed cost, with no non-zeros at all) first rules out any switch on instances
where dense always wins: then nothing is counted and nothing forecast.
Density tracking: non-zeros of an intermediate are counted only while the counting (and the
re-forecast it may trigger) fits in ``track_budget`` (5%) of the predicted dense time spent so far;
otherwise they are bounded from above from the operands (``costmodel.nnz_bound``). A count that
differs from its estimate by more than 2x re-forecasts the switch point.

``hybrid_oneway`` (the earlier rule, kept as a reported configuration):
- before a dense step, if its output would exceed the memory cap, switch (reason ``cap``);
- after a dense step, if the size-weighted density of ALL remaining tensors
  (sum nnz / sum numel over intermediates and untouched inputs) is below ``tau``, switch
  (reason ``density``). It counts the non-zeros of every input and every intermediate.
``tau`` defaults to the value calibrated on this machine (``calibrate.py``), else 1e-2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from components.algorithms.hybrid_einsum.coo import COO, MemoryCapExceeded, pair, unary
from components.algorithms.hybrid_einsum.costmodel import CostModel, PairShape, estimate_pair, nnz_bound, pair_shape, \
    spread
from components.algorithms.hybrid_einsum.expression import Plan, check_operands, plan
from components.core.errors import require
from components.core.timing import clock_of

_THREAD, _WALL = clock_of("thread"), clock_of("wall")   # the timing mechanism's clocks

REPRESENTATIONS = ("hybrid", "dense", "coo", "hybrid_oneway")
DEFAULT_TAU = 1e-2
DEFAULT_CAP = 4 * 2 ** 30          # bytes of one intermediate
TRACK_BUDGET = 0.05                # share of the predicted dense time the hybrid may spend counting / re-forecasting
SURPRISE = math.log(2.0)           # a count this far (log ratio) from its estimate re-forecasts the switch point
RESCALE = math.log(1.5)            # measured/predicted dense time moving this far (log) re-forecasts
SWITCH_MARGIN = 1.25               # a switch must be predicted this much cheaper than staying dense
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass
class Step:
    step: int
    representation: str               # representation the step ran in
    numel: float                      # entries of the dense intermediate (product of kept dims)
    nnz: int                          # non-zeros (-1: not counted, see nnz_bound)
    density: float                    # nnz / numel of this intermediate (nan when not counted)
    remaining_density: float          # size-weighted density of all tensors left after the step (hybrid_oneway)
    nbytes: float                     # bytes actually held (dense numel*8, COO nnz*(8+8*ndim))
    seconds: float                    # CPU seconds of the step (thread time)
    nnz_bound: float = math.nan       # upper bound on nnz (hybrid's tracker), == nnz when counted


@dataclass
class EinsumRun:
    result: object                    # numpy array (dense) or COO
    trace: list[Step] = field(default_factory=list)
    switched_at: int | None = None    # index of the first COO step of a hybrid run
    switch_reason: str | None = None  # 'predicted' (hybrid) | 'density' (hybrid_oneway) | 'cap'
    seconds: float = 0.0
    counts: int = 0                   # non-zero counts done (inputs + intermediates)
    forecasts: int = 0                # full forecasts of the remaining steps (hybrid)
    decision: str = ""                # hybrid: 'never' (lower bound rules a switch out) | 'forecast'
    predicted: dict = field(default_factory=dict)   # hybrid: predicted seconds of the chosen plan vs all-dense

    @property
    def peak_bytes(self) -> float:
        return max((s.nbytes for s in self.trace), default=0.0)

    def densities(self) -> tuple[float, float]:
        """(min, avg) intermediate density over counted steps, avg = sum nnz / sum numel (the benchmark's definition)."""
        tr = [s for s in self.trace if s.nnz >= 0]
        if not tr:
            return math.nan, math.nan
        return (min(s.density for s in tr), sum(s.nnz for s in tr) / max(sum(s.numel for s in tr), 1.0))


def _dense_pair(ops: list, terms: list[tuple[int, ...]], keep: tuple[int, ...]):
    labels = list(dict.fromkeys([i for t in terms for i in t] + list(keep)))
    require(len(labels) <= 52, "expr", f"{len(labels)} indices in one step", "at most 52 indices per pairwise step")
    m = {lab: _LETTERS[j] for j, lab in enumerate(labels)}
    sub = ",".join("".join(m[i] for i in t) for t in terms) + "->" + "".join(m[i] for i in keep)
    return torch.einsum(sub, *ops)


def _numel(keep, sizes) -> float:
    return float(math.prod(float(sizes[i]) for i in keep)) if keep else 1.0


@dataclass
class Schedule:
    """Static facts of every step of a path (index sizes only): what is kept, sizes, predicted dense cost."""
    keep: list[tuple[int, ...]]
    out_numel: list[float]
    union: list[float]                # entries of the joint index space of the step's operands
    io: list[float]                   # entries read + written
    shapes: list[object]              # PairShape (2 operands), (numel_in, ndim_in) (1), list of PairShape (>2)
    n_live: list[int]                 # tensors alive before step j (j = 0..S)
    numel_live: list[float]           # their total entries
    ndims: list[int]                  # ndim of every input


def schedule(p: Plan) -> Schedule:
    """One pass over the path with label membership counts (no rescans of all remaining terms)."""
    ex = p.expr
    sizes = ex.sizes
    terms = list(ex.terms)
    out_set = set(ex.output)
    cnt: dict[int, int] = {}
    for t in terms:
        for lab in set(t):
            cnt[lab] = cnt.get(lab, 0) + 1
    numel = [_numel(t, sizes) for t in terms]
    sc = Schedule([], [], [], [], [], [len(terms)], [sum(numel)], [len(t) for t in terms])
    for picked in p.path:
        sel = [terms[i] for i in picked]
        if len(terms) == len(picked):
            keep = tuple(ex.output)
        else:
            sub: dict[int, int] = {}
            for t in sel:
                for lab in set(t):
                    sub[lab] = sub.get(lab, 0) + 1
            keep = tuple(lab for lab in dict.fromkeys(i for t in sel for i in t)
                         if lab in out_set or cnt[lab] - sub[lab] > 0)
        for t in sel:
            for lab in set(t):
                cnt[lab] -= 1
        for lab in keep:
            cnt[lab] = cnt.get(lab, 0) + 1
        out_n = _numel(keep, sizes)
        in_n = sum(numel[i] for i in picked)
        sc.keep.append(keep)
        sc.out_numel.append(out_n)
        sc.union.append(_numel(tuple(dict.fromkeys(i for t in sel for i in t)), sizes))
        sc.io.append(in_n + out_n)
        if len(sel) == 2:
            sc.shapes.append(pair_shape(sel[0], sel[1], keep, sizes))
        elif len(sel) == 1:
            sc.shapes.append((numel[picked[0]], len(sel[0])))
        else:                                   # opt_einsum may pick > 2 operands: a chain of pairs
            chain, acc = [], sel[0]
            for t in sel[1:]:
                chain.append(pair_shape(acc, t, keep, sizes))
                acc = keep
            sc.shapes.append(chain)
        for i in sorted(picked, reverse=True):
            del terms[i], numel[i]
        terms.append(keep)
        numel.append(out_n)
        sc.n_live.append(len(terms))
        sc.numel_live.append(sc.numel_live[-1] - in_n + out_n)
    return sc


def _coo_estimate(cm: CostModel, shape, ests: list[float], ndim_out: int, out_numel: float) -> tuple[float, float]:
    """(predicted COO seconds, estimated output nnz) of one step from its operands' estimated nnz."""
    if isinstance(shape, PairShape):
        return estimate_pair(cm, shape, ests[0], ests[1])
    if isinstance(shape, tuple):                # unary: filter + group-by
        numel_in, ndim_in = shape
        n = ests[0]
        return cm.coo(n * ndim_in, n, ndim_out), spread(n, numel_in, out_numel)
    t, acc = 0.0, ests[0]
    for ps, e in zip(shape, ests[1:]):
        dt, acc = estimate_pair(cm, ps, acc, e)
        t += dt
    return t, acc


def _bound(shape, bounds: list[float], out_numel: float) -> float:
    if isinstance(shape, PairShape):
        return nnz_bound(shape, bounds[0], bounds[1])
    if isinstance(shape, tuple):
        return min(bounds[0], out_numel)
    acc = bounds[0]
    for ps, b in zip(shape, bounds[1:]):
        acc = nnz_bound(ps, acc, b)
    return min(acc, out_numel)


def _scale(pred: float, act: float) -> float:
    """Measured / predicted dense seconds so far, clamped to [1/4, 8] (1 before any evidence)."""
    return min(max(act / pred, 0.25), 8.0) if pred > 0 and act > 0 else 1.0


def dense_costs(sc: Schedule, cm: CostModel, cap_bytes: float) -> list[float]:
    """Predicted dense seconds per step; a step whose dense output passes the cap costs infinity."""
    return [cm.dense(u, io, o) if o * 8 <= cap_bytes else math.inf for u, io, o in zip(sc.union, sc.io, sc.out_numel)]


def switch_can_pay(sc: Schedule, cm: CostModel, dense_t: list[float]) -> bool:
    """False when no switch point can beat all-dense even if every tensor had NO non-zeros: switching
    before step k costs at least the conversion scans of the tensors alive then plus the COO fixed
    cost of every later step."""
    S = len(dense_t)
    total = sum(dense_t)
    if math.isinf(total):
        return True
    done = 0.0
    for k in range(S):
        lb = done + cm.v0 * sc.n_live[k] + cm.v1 * sc.numel_live[k] + cm.c0 * (S - k)
        if lb < total:
            return True
        done += dense_t[k]
    return False


@dataclass
class Forecast:
    start: int                        # step it was made before
    k: int                            # best switch point (S: never)
    est: dict[int, float]             # estimated output nnz of every future step
    cost_switch: float                # predicted seconds from s with the best switch point
    cost_dense: float                 # predicted seconds from s staying dense
    dense_scale: float = 1.0          # measured / predicted dense seconds it used


def forecast(sc: Schedule, cm: CostModel, dense_t: list[float], p: Plan, s: int, live_est: list[float],
             live_ndim: list[int], margin: float = 1.0, dense_scale: float = 1.0) -> Forecast:
    """Best switch point k >= s: argmin dense(s..k-1) + convert(alive at k) + COO(k..S-1), with the
    non-zeros of future intermediates estimated from ``live_est`` under independence. The switch is
    one-way and estimates of far steps are the least sure, so a switch must be predicted ``margin``
    times cheaper than staying dense (a planned switch point is re-checked when reached).
    ``dense_scale`` multiplies the predicted dense costs (measured / predicted on the steps run so far)."""
    S = len(p.path)
    est, nd = list(live_est), list(live_ndim)
    nnzdim = sum(e * d for e, d in zip(est, nd))
    conv, coo, fut = [], [], {}
    for j in range(s, S):
        conv.append(cm.v0 * sc.n_live[j] + cm.v1 * sc.numel_live[j] + cm.v2 * nnzdim)
        picked = p.path[j]
        keep = sc.keep[j]
        t, out = _coo_estimate(cm, sc.shapes[j], [est[i] for i in picked], len(keep), sc.out_numel[j])
        out = min(out, sc.out_numel[j])
        for i in sorted(picked, reverse=True):
            nnzdim -= est[i] * nd[i]
            del est[i], nd[i]
        est.append(out)
        nd.append(len(keep))
        nnzdim += out * len(keep)
        coo.append(t)
        fut[j] = out
    conv.append(0.0)                            # never switching converts nothing
    # total(k) = dense[s:k] + conv[k] + coo[k:]
    suffix = [0.0] * (S - s + 1)
    for j in range(S - 1, s - 1, -1):
        suffix[j - s] = suffix[j - s + 1] + coo[j - s]
    best_k, best, pre = S, math.inf, 0.0
    for k in range(s, S + 1):
        tot = pre + conv[k - s] + suffix[k - s]
        if tot < best:
            best, best_k = tot, k
        if k < S:
            pre += dense_t[k] * dense_scale
            if math.isinf(pre):
                break
    stay = sum(dense_t[s:]) * dense_scale
    if best_k < S and best * margin > stay:      # not clearly cheaper than staying dense: do not commit
        best_k, best = S, stay
    return Forecast(s, best_k, fut, best, sum(dense_t[s:]) * dense_scale, dense_scale)


def contract(p: Plan, arrays: list[np.ndarray], representation: str = "hybrid", tau: float | None = None,
             memory_cap_bytes: float = DEFAULT_CAP, output: Literal["dense", "coo", "native"] = "dense",
             measure_density: bool = True, cost_model: CostModel | dict | None = None,
             track_budget: float = TRACK_BUDGET, switch_margin: float = SWITCH_MARGIN) -> EinsumRun:
    """Run a planned contraction; raises MemoryCapExceeded when a dense (or COO) intermediate passes the cap.

    ``measure_density=False`` skips counting non-zeros after static dense steps (timing runs);
    ``hybrid_oneway`` always counts (its rule needs the counts), ``hybrid`` counts within ``track_budget``.
    ``output='native'`` returns the representation the last step ran in (no final conversion)."""
    require(representation in REPRESENTATIONS, "representation", representation, "one of " + ", ".join(REPRESENTATIONS))
    require(output in ("dense", "coo", "native"), "output", output, "'dense', 'coo' or 'native'")
    tau = DEFAULT_TAU if tau is None else float(tau)
    require(0 <= tau <= 1, "tau", tau, "a density threshold in [0, 1]")
    require(memory_cap_bytes > 0, "memory_cap_bytes", memory_cap_bytes, "a positive number of bytes")
    require(0 <= track_budget, "track_budget", track_budget, "a non-negative share of the dense time")
    cm = cost_model if isinstance(cost_model, CostModel) else CostModel.from_dict(cost_model)
    oneway = representation == "hybrid_oneway"
    predictive = representation == "hybrid"
    measure_density = (measure_density and representation == "dense") or oneway
    ex = p.expr
    sizes = ex.sizes
    t0 = _WALL()
    sc = schedule(p)
    S = len(p.path)
    terms = list(ex.terms)
    mode = "coo" if representation == "coo" else "dense"
    run = EinsumRun(None)
    numel = [float(a.size) for a in arrays]
    ndim = list(sc.ndims)
    fc: Forecast | None = None
    if mode == "dense":
        ops: list = [torch.from_numpy(np.asarray(a, order="C")) for a in arrays]
        nnz = [-1] * len(arrays)
        bnd = list(numel)                        # upper bounds on nnz (hybrid's tracker)
        est = list(numel)
        if measure_density:
            nnz = [int(np.count_nonzero(a)) for a in arrays]
            run.counts += len(arrays)
        if predictive:
            dense_t = dense_costs(sc, cm, memory_cap_bytes)
            if not switch_can_pay(sc, cm, dense_t):
                run.decision, predictive = "never", False
                run.predicted = {"dense_s": sum(dense_t)}
            else:
                run.decision = "forecast"
                nnz = [int(np.count_nonzero(a)) for a in arrays]
                run.counts += len(arrays)
                bnd = [float(n) for n in nnz]
                est = list(bnd)
                fc = forecast(sc, cm, dense_t, p, 0, est, ndim, switch_margin)
                run.forecasts += 1
                run.predicted = {"plan_s": fc.cost_switch, "dense_s": fc.cost_dense, "switch_at": fc.k}
            spent, dense_done = 0.0, 0.0
            pred_big, act_big = 0.0, 0.0     # predicted / measured seconds of the dense steps run (past 2^12 entries)
    else:
        ops = [COO.from_dense(a) for a in arrays]
        nnz = [o.nnz for o in ops]
        bnd = [float(n) for n in nnz]
        est = list(bnd)
    for s, picked in enumerate(p.path):
        ts = _THREAD()
        keep = sc.keep[s]
        out_numel = sc.out_numel[s]
        if mode == "dense" and predictive and fc is not None and fc.k == s:
            # verify before the irreversible switch: count the live tensors known only by bound/estimate
            # (converting scans every one of them anyway), then re-forecast from here
            unknown = [i for i, n in enumerate(nnz) if n < 0]
            for i in unknown:
                nnz[i] = int(torch.count_nonzero(ops[i]))
                bnd[i] = est[i] = float(nnz[i])
            run.counts += len(unknown)
            if unknown or fc.start < s:
                fc = forecast(sc, cm, dense_t, p, s, est, ndim, switch_margin, _scale(pred_big, act_big))
                run.forecasts += 1
                spent += cm.py_step * (S - s)
        if mode == "dense" and predictive and fc is not None and fc.k == s:
            mode = "coo"
            run.switched_at, run.switch_reason = s, "predicted"
            ops = [COO.from_dense(o) for o in ops]
        if mode == "dense" and out_numel * 8 > memory_cap_bytes:
            if representation == "dense":
                raise MemoryCapExceeded("dense", s, out_numel * 8, memory_cap_bytes)
            mode = "coo"
            run.switched_at, run.switch_reason = s, "cap"
            ops = [COO.from_dense(o) for o in ops]
        sel = [ops[i] for i in picked]
        sel_t = [terms[i] for i in picked]
        new_bnd = _bound(sc.shapes[s], [bnd[i] for i in picked], out_numel)
        if mode == "dense":
            new = _dense_pair(sel, sel_t, keep)
            nbytes = out_numel * new.element_size()
            new_nnz = -1
            if measure_density:
                new_nnz = int(torch.count_nonzero(new))
                run.counts += 1
            elif predictive and s < S - 1:
                dense_done += dense_t[s]
                cost = cm.count(out_numel) + cm.py_step * (S - s)
                if spent + cost <= track_budget * dense_done:     # counting is cheap next to the dense work done
                    spent += cost
                    new_nnz = int(torch.count_nonzero(new))
                    run.counts += 1
        else:
            if len(sel) == 1:
                new = unary(sel[0], sel_t[0], keep, sizes)
            else:
                new = pair(sel[0], sel_t[0], sel[1], sel_t[1], keep, sizes, memory_cap_bytes, s)
                for extra, et in zip(sel[2:], sel_t[2:]):     # opt_einsum may pick >2 operands (rare)
                    new = pair(new, keep, extra, et, keep, sizes, memory_cap_bytes, s)
            if new.nbytes > memory_cap_bytes:
                raise MemoryCapExceeded("coo", s, new.nbytes, memory_cap_bytes)
            new_nnz = new.nnz
            nbytes = float(new.nbytes)
        for i in sorted(picked, reverse=True):
            del ops[i], terms[i], nnz[i], numel[i], bnd[i], est[i], ndim[i]
        ops.append(new)
        terms.append(keep)
        nnz.append(new_nnz)
        numel.append(out_numel)
        bnd.append(float(new_nnz) if new_nnz >= 0 else new_bnd)
        ndim.append(len(keep))
        guess = fc.est.get(s, new_bnd) if fc is not None else new_bnd
        est.append(float(new_nnz) if new_nnz >= 0 else min(guess, new_bnd))
        rem = sum(nnz) / max(sum(numel), 1.0) if oneway else math.nan
        run.trace.append(Step(s, mode, out_numel, new_nnz, new_nnz / out_numel if new_nnz >= 0 else math.nan, rem,
                              nbytes, _THREAD() - ts, bnd[-1]))
        if predictive and fc is not None and run.trace[-1].representation == "dense" and out_numel > 2 ** 12:
            pred_big += dense_t[s]
            act_big += run.trace[-1].seconds
            sc_now = _scale(pred_big, act_big)
            if (mode == "dense" and s < S - 1 and abs(math.log(sc_now / fc.dense_scale)) > RESCALE
                    and spent + cm.py_step * (S - s) <= track_budget * dense_done):
                spent += cm.py_step * (S - s)     # dense steps cost other than predicted: re-plan with the measured ratio
                fc = forecast(sc, cm, dense_t, p, s + 1, est, ndim, switch_margin, sc_now)
                run.forecasts += 1
                run.predicted.update(switch_at=fc.k, dense_scale=sc_now)
        if oneway and mode == "dense" and s < S - 1 and rem < tau:
            mode = "coo"
            run.switched_at, run.switch_reason = s + 1, "density"
            ops = [COO.from_dense(o) for o in ops]
        if (predictive and mode == "dense" and fc is not None and new_nnz >= 0 and s < S - 1
                and abs(math.log((new_nnz + 1.0) / (guess + 1.0))) > SURPRISE):
            fc = forecast(sc, cm, dense_t, p, s + 1, est, ndim, switch_margin, _scale(pred_big, act_big))
            run.forecasts += 1
            run.predicted.update(plan_s_last=fc.cost_switch, dense_s_last=fc.cost_dense, switch_at=fc.k)
    final, ft = ops[-1], terms[-1]
    if ft != ex.output:                     # e.g. a single-operand expression whose path did not reorder
        final = unary(final, ft, ex.output, sizes) if isinstance(final, COO) else _dense_pair([final], [ft], ex.output)
    if output == "native":
        run.result = final if isinstance(final, COO) else final.numpy()
    elif output == "coo":
        run.result = final if isinstance(final, COO) else COO.from_dense(final)
    else:
        if isinstance(final, COO):
            need = _numel(ex.output, sizes) * final.values.itemsize
            if need > memory_cap_bytes:
                raise MemoryCapExceeded(mode, len(p.path), need, memory_cap_bytes)
            run.result = final.todense()
        else:
            run.result = final.numpy()
    run.seconds = _WALL() - t0
    return run


def einsum(expr: str, *tensors, representation: Literal["hybrid", "dense", "coo", "hybrid_oneway"] = "hybrid",
           output: Literal["dense", "coo", "native"] = "dense", tau: float | None = None,
           memory_cap_bytes: float = DEFAULT_CAP, optimize: str = "greedy", return_trace: bool = False,
           cost_model: CostModel | dict | None = None):
    """Evaluate ``expr`` on ``tensors`` (numpy arrays or torch tensors) along one opt_einsum path.

    representation: ``dense`` (torch pairwise steps), ``coo`` (numpy join + group-by), ``hybrid``
    (dense, switching one way to COO where the calibrated cost prediction of the remaining steps says
    COO is cheaper, see the module docstring) or ``hybrid_oneway`` (the density-threshold rule).
    ``cost_model``: a :class:`CostModel` (or its dict, as ``calibrate.fit_cost_model`` returns it);
    default constants otherwise. output: ``dense`` returns a numpy array, ``coo`` a :class:`COO`,
    ``native`` whichever the last step ran in. With ``return_trace=True``
    returns ``(result, EinsumRun)``; the run holds the per-step density trace and the switch point.
    Raises ConfigError on a malformed expression or mismatched shapes, and
    MemoryCapExceeded when an intermediate would pass ``memory_cap_bytes``.
    """
    arrays = check_operands(tensors)
    p = plan(expr, [a.shape for a in arrays], optimize)
    run = contract(p, arrays, representation, tau, memory_cap_bytes, output, cost_model=cost_model)
    return (run.result, run) if return_trace else run.result
