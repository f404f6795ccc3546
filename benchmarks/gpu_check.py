"""GPU check (issue: Run where researchers run: GPUs): the project's pure-torch paths run on an
accelerator and are compared with the same computation on cpu.

Why: dtlab is developed and measured on cpu machines, but researchers run its components on GPUs,
where a tensor made without ``device=`` breaks a path that every cpu test passes, and where kernels
round differently. This script runs the pure-torch paths on the device, each against cpu:

1. ``gpt_blocks``: the shared GPT with each block (pre_ln, parallel, fal, fal_plus), forward and
   backward: logits, loss and every gradient against cpu (same weights, same batch).
2. ``packed_codecs`` (the DDP / DUO gradient codecs), ``row_topk`` (pipeline boundaries),
   ``ddp_codec_hook`` (the comm hook on a one-rank gloo group) and ``residual_codecs``
   (CompactFusion's matrix codecs and a residual stream): payloads stay uint8 on the device, their
   bytes equal cpu's, decoded values equal cpu's. Test values are multiples of 1/64, so every sum
   a codec takes is exact in any order and the bytes can be compared exactly.
3. ``ring_attention`` (exact against full causal attention), ``cp_ring_block`` (the cp_ring GPT in
   each K/V mode) and ``ssn_boundary`` (the SSN stage boundary round trip, forward and gradient).
4. ``dit_foresight_compactfusion``: one sampling pass of a tiny randomly initialised DiT with
   Foresight's reuse policy over CompactFusion's patch-parallel residual exchange.
5. ``fal_tp_step``: one rank's tensor-parallel step (tp=2, communication counted, not sent) of FAL
   against pre-LN at ``--width``: CUDA events on cuda, perf_counter on cpu; timings printed, never
   judged; the all-reduce counts per forward are checked (pre_ln 2L, fal L+1).
6. ``dp_in_process``: the data-parallel loop's in-process ranks (ddp_train's fp32, and FAL + DUO 1-bit +
   MeCeFO's takeover at once, as training_composed runs them) for 6 steps: losses against cpu, and every
   rank holding the same weights. ``mecefo_train``: MeCeFO's vectorised replicas through a kill (svd and
   gaussian low-rank FFN gradients), losses and weights against cpu.

It runs without Ray, Hydra or MLflow (a GPU machine may have torch alone): it imports torch and
modules under components/ only, and refuses any import of ray, hydra or mlflow, so a module that
needs one at import time is reported ``SKIP`` on every machine, not only where they are missing.

A component that makes a tensor on cpu whatever its inputs' device is left as it is: its check
reports ``FAIL`` naming the component's file:line where the mismatch surfaced (or the function that
returned a cpu tensor). With ``--device cpu`` every comparison is cpu against cpu and must be exact
(ring and SSN against their exact references within fp32 rounding): a smoke test of this script.

Output: one line per check, ``PASS name: figures`` / ``FAIL name: what differed`` / ``SKIP name:
reason``, then ``gpu_check: N passed, M failed, K skipped on DEVICE (torch X, device name)``.
Exit status: 0 when nothing failed, 1 when a check failed, 2 when there is no CUDA and no --device.

Run: python benchmarks/gpu_check.py [--device cuda|cpu] [--width N] [--only name,name]
"""
from __future__ import annotations

import argparse
import copy
import importlib.abc
import inspect
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REFUSED = ("ray", "hydra", "mlflow")


class _RefuseImports(importlib.abc.MetaPathFinder):
    """Makes ``import ray`` (hydra, mlflow) fail here as it does on a machine without them."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ImportError(f"gpu_check runs without {name.split('.')[0]}", name=name)
        return None


sys.meta_path.insert(0, _RefuseImports())

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402


class Fail(Exception):
    """A check's comparison did not hold; the message says what differed."""


class Skip(Exception):
    """A check cannot run here; the message says why."""


# --------------------------------------------------------------------------- helpers


def tol(dev: torch.device, accel: float) -> float:
    """The tolerance of a device-vs-cpu comparison: exact when the device is cpu itself."""
    return 0.0 if dev.type == "cpu" else accel


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (b the cpu reference), in float64 on cpu."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    if b.numel() == 0:
        return 0.0
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def on(t: torch.Tensor, dev: torch.device) -> bool:
    return t.device.type == dev.type and (dev.index is None or t.device.index == dev.index)


def defined_at(fn) -> str:
    """``path:line`` of a function's definition, relative to the repository."""
    fn = inspect.unwrap(fn)
    path = Path(inspect.getsourcefile(fn)).resolve()
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return f"{rel}:{inspect.getsourcelines(fn)[1]}"


def where(e: BaseException) -> str:
    """An exception as one line: type, first line of its message, innermost components/ frame."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)   # not the import machinery, not our refusal
              if not f.filename.startswith("<frozen") and f.name != "find_spec"]
    ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(ROOT / "components")]
    at = ours[-1] if ours else (frames[-1] if frames else None)
    loc = f" at {Path(at.filename).resolve().relative_to(ROOT) if ours else at.filename}:{at.lineno}" if at else ""
    msg = (str(e).splitlines() or [""])[0][:160]
    return f"{type(e).__name__}{loc}: {msg}"


def want(t: torch.Tensor, dev: torch.device, dtype: torch.dtype, what: str, fn) -> list[str]:
    """Problems if ``t`` (what ``fn`` returned) is not on ``dev`` with ``dtype``."""
    out = []
    if not on(t, dev):
        out.append(f"{what} on {t.device}, not {dev} ({defined_at(fn)})")
    if t.dtype != dtype:
        out.append(f"{what} is {t.dtype}, not {dtype} ({defined_at(fn)})")
    return out


def dyadic(shape, seed: int, span: int = 512) -> torch.Tensor:
    """float32 multiples of 1/64 in [-span/64, span/64]: sums of a few thousand are exact in any order."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-span, span + 1, shape, generator=g).to(torch.float32) / 64.0


def randn(shape, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- 1. GPT blocks


def _gpt_step(model, x, y):
    model.zero_grad(set_to_none=True)
    logits, loss = model(x, y)
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad.detach() for n, p in model.named_parameters()}


def check_gpt_blocks(dev: torch.device, args) -> str:
    from components.models.gpt import GPT, GPTConfig

    t = tol(dev, 1e-4)
    x, y = (torch.randint(0, 50, (2, 32), generator=torch.Generator().manual_seed(s)) for s in (1, 2))
    figs, bad = [], []
    for block in ("pre_ln", "parallel", "fal", "fal_plus"):
        torch.manual_seed(0)
        ref = GPT(GPTConfig(vocab_size=50, n_layer=3, n_head=4, d_model=64, context=32, block=block))
        model = copy.deepcopy(ref).to(dev)
        lc, sc, gc = _gpt_step(ref, x, y)
        ld, sd, gd = _gpt_step(model, x.to(dev), y.to(dev))
        if not on(ld, dev):
            bad.append(f"{block}: logits on {ld.device}")
        errs = (rel_err(ld, lc), rel_err(sd, sc), max(rel_err(gd[n], gc[n]) for n in gc))
        figs.append(f"{block} {'/'.join(f'{e:.1e}' for e in errs)}")
        if max(errs) > t or not all(torch.isfinite(v).all() for v in (ld, sd)):
            bad.append(f"{block}: logits/loss/grads rel err {'/'.join(f'{e:.1e}' for e in errs)} > {t:.0e}")
    if bad:
        raise Fail("; ".join(bad))
    return f"max rel err vs cpu, logits/loss/grads (tol {t:.0e}): " + ", ".join(figs)


# --------------------------------------------------------------------------- 2. codecs


def check_packed_codecs(dev: torch.device, args) -> str:
    """The DDP / DUO gradient codecs (make_torch_codec): 32, 8, 4, 2, 1 and 0 bits, bucket 128."""
    from components.compression.torch_codecs import make_torch_codec

    n = 1000                                        # 7 full buckets and a tail of 104
    g = dyadic((n,), seed=3)
    g[256:384] = 0.0                                # one all-zero bucket (scale 0)
    figs, bad = [], []
    for bits in (32, 8, 4, 2, 1, 0):
        codec = make_torch_codec(bits, 128)
        name = f"{bits}-bit {type(codec).__name__}"
        try:
            pc = codec.encode(g)
            dc = codec.decode(pc, n)
            pd = codec.encode(g.to(dev))
            probs = want(pd, dev, torch.uint8, "payload", codec.encode)
            dd = codec.decode(pd, n)
            probs += want(dd, dev, torch.float32, "decoded", codec.decode)
            if pd.numel() != codec.payload_bytes(n):
                probs.append(f"payload {pd.numel()} B, payload_bytes says {codec.payload_bytes(n)}")
            if not torch.equal(pd.cpu(), pc):
                probs.append("payload bytes differ from cpu")
            if not torch.equal(dd.cpu(), dc):
                probs.append(f"decoded differs from cpu (rel err {rel_err(dd, dc):.1e})")
        except Exception as e:  # a component failing on this device is what the check reports
            probs = [where(e)]
        figs.append(f"{bits}b {codec.payload_bytes(n)}B")
        bad += [f"{name}: {p}" for p in probs]
    if bad:
        raise Fail("; ".join(bad))
    return f"{n} values, payloads and decoded values equal to cpu: " + ", ".join(figs)


def _topk_canonical(payload: torch.Tensor, codec, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices, value bytes) of each row sorted by index: topk(sorted=False) order is the backend's."""
    vb = payload.numel() - rows * codec.keep * codec.index_dtype.itemsize
    vals = payload[:vb].view(rows, codec.keep, -1)
    idx = payload[vb:].clone().view(codec.index_dtype).to(torch.int64).view(rows, codec.keep)
    order = idx.argsort(dim=1)
    return idx.gather(1, order), vals[torch.arange(rows)[:, None], order]


def check_row_topk(dev: torch.device, args) -> str:
    """TorchRowTopK (pipeline boundaries): fp32 / bf16 values, uint8 / int16 indices."""
    from components.compression.torch_topk import TorchRowTopK

    rows, figs, bad = 12, [], []
    for width, keep, values in ((64, 8, "fp32"), (64, 8, "bf16"), (300, 16, "fp32")):
        g = torch.Generator().manual_seed(width + keep)
        mags = torch.stack([torch.randperm(width, generator=g) + 1 for _ in range(rows)]).float() / 64.0
        x = mags * (torch.randint(0, 2, (rows, width), generator=g) * 2 - 1)   # distinct |x| per row: no ties
        codec = TorchRowTopK(keep, width, values)
        name = f"w{width} k{keep} {values}"
        try:
            pc = codec.encode(x)
            pd = codec.encode(x.to(dev))
            probs = want(pd, dev, torch.uint8, "payload", codec.encode)
            dd, dc = codec.decode(pd, rows), codec.decode(pc, rows)
            probs += want(dd, dev, torch.float32, "decoded", codec.decode)
            if pd.numel() != codec.payload_bytes(rows):
                probs.append(f"payload {pd.numel()} B, payload_bytes says {codec.payload_bytes(rows)}")
            exact = torch.equal(pd.cpu(), pc)
            if not exact:
                ic, vc = _topk_canonical(pc, codec, rows)
                idd, vd = _topk_canonical(pd.cpu(), codec, rows)
                if not (torch.equal(ic, idd) and torch.equal(vc, vd)):
                    probs.append("payload differs from cpu beyond the order of kept entries")
            if not torch.equal(dd.cpu(), dc):
                probs.append(f"decoded differs from cpu (rel err {rel_err(dd, dc):.1e})")
            figs.append(f"{name} {pd.numel()}B{'' if exact else ' (same entries, backend order)'}")
        except Exception as e:
            probs = [where(e)]
        bad += [f"{name}: {p}" for p in probs]
    if bad:
        raise Fail("; ".join(bad))
    return f"{rows} rows, bytes and decoded equal to cpu: " + ", ".join(figs)


class _Bucket:
    """The three GradBucket methods codec_hook calls, over one flat buffer of two gradients."""

    def __init__(self, grads: list[torch.Tensor], params: list[torch.Tensor]):
        self._buf = torch.cat([g.reshape(-1) for g in grads])
        self._params, self._views, at = params, [], 0
        for g in grads:
            self._views.append(self._buf[at:at + g.numel()].view_as(g))
            at += g.numel()

    def buffer(self):
        return self._buf

    def parameters(self):
        return self._params

    def gradients(self):
        return self._views


def _hook_rounds(dev: torch.device, bits: int, ef: bool):
    """Two rounds of codec_hook on dyadic gradients; (averaged gradients, EF residuals, bytes sent)."""
    from components.compression.torch_codecs import make_torch_codec
    from components.training.ddp import hooks

    params = [torch.zeros(300, device=dev), torch.zeros(20, 37, device=dev)]
    state = hooks.CodecState(make_torch_codec(bits, 128), error_feedback=ef)
    outs = []
    for r in range(2):
        grads = [dyadic(tuple(p.shape), seed=10 * r + i).to(dev) for i, p in enumerate(params)]
        outs.append(hooks.codec_hook(state, _Bucket(grads, params)).wait())
    return outs, [state.errors[id(p)] for p in params] if ef else [], state.stats.bytes


def check_ddp_codec_hook(dev: torch.device, args) -> str:
    """components.training.ddp.hooks.codec_hook (DDP's and DUO's path) on a one-rank gloo group."""
    import os

    import torch.distributed as dist

    from components.training.ddp import hooks

    if not dist.is_available():
        raise Skip("torch.distributed is not available in this torch build")
    own = not dist.is_initialized()
    if own:
        if Path("/sys/class/net/lo").exists():
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        try:
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        except Exception as e:
            raise Skip(f"no one-rank gloo group here ({where(e)})") from e
    t = tol(dev, 1e-6)                               # round 2 encodes g + e: the 1-bit scale's sum is not exact
    figs, bad = [], []
    try:
        for bits in (4, 1):
            for ef in (False, True):
                name = f"{bits}-bit{' EF' if ef else ''}"
                try:
                    oc, ec, bc = _hook_rounds(torch.device("cpu"), bits, ef)
                    od, ed, bd = _hook_rounds(dev, bits, ef)
                    probs = [p for o in od for p in want(o, dev, torch.float32, "averaged gradient", hooks.codec_hook)]
                    err = max(rel_err(a, b) for a, b in zip(od + ed, oc + ec))
                    if err > t:
                        probs.append(f"gradients/residuals rel err {err:.1e} > {t:.0e}")
                    if bd != bc:
                        probs.append(f"{bd} bytes sent, cpu {bc}")
                    figs.append(f"{name} {bd}B err {err:.1e}")
                except Exception as e:
                    probs = [where(e)]
                bad += [f"{name}: {p}" for p in probs]
    finally:
        if own:
            dist.destroy_process_group()
    if bad:
        raise Fail("; ".join(bad))
    return f"2 rounds, 1040 grads, vs cpu (tol {t:.0e}): " + ", ".join(figs)


def check_residual_codecs(dev: torch.device, args) -> str:
    """CompactFusion's matrix codecs ([S, N, C] -> uint8) and one residual stream with error feedback."""
    from components.compression.residual import ResidualReceiver, ResidualSender, StreamSpec, make_matrix_codec

    x = dyadic((2, 16, 32), seed=5)
    figs, bad = [], []
    cases = [("fp32", {}), ("fp16", {}), ("int8", {}), ("sign", {}), ("binary", {"scale": "rank1"}),
             ("binary", {"scale": "channel"}), ("int2", {"scale": "rank1"}), ("lowrank", {"rank": 4})]
    for name, kw in cases:
        codec = make_matrix_codec(name, **kw)
        label = name + (f"/{kw['scale']}" if "scale" in kw else "")
        exact = name != "lowrank"                    # QR rounds differently on another device
        t = 0.0 if exact else tol(dev, 1e-3)
        try:
            pc = codec.encode(x)
            pd = codec.encode(x.to(dev))
            probs = want(pd, dev, torch.uint8, "payload", codec.encode)
            dc, dd = codec.decode(pc, tuple(x.shape)), codec.decode(pd, tuple(x.shape))
            probs += want(dd, dev, torch.float32, "decoded", codec.decode)
            if pd.numel() != codec.payload_bytes(tuple(x.shape)):
                probs.append(f"payload {pd.numel()} B, payload_bytes says {codec.payload_bytes(tuple(x.shape))}")
            if exact and not torch.equal(pd.cpu(), pc):
                probs.append("payload bytes differ from cpu")
            err = rel_err(dd, dc)
            if err > t:
                probs.append(f"decoded rel err vs cpu {err:.1e} > {t:.0e}")
            figs.append(f"{label} {pd.numel()}B" + ("" if exact else f" err {err:.1e}"))
        except Exception as e:
            probs = [where(e)]
        bad += [f"{label}: {p}" for p in probs]
    try:                                               # a residual stream: base, residual, residual
        spec = StreamSpec(codec="binary", order=1, ef=True, warmup=1)
        got = {}
        for d in (torch.device("cpu"), dev):
            s, r = ResidualSender(spec), ResidualReceiver(spec)
            got[d.type] = [r.receive(s.send((x + k / 8.0).to(d))) for k in range(3)]
            if not torch.equal(s.base.cpu(), r.base.cpu()):
                bad.append(f"binary EF stream on {d}: sender and receiver bases differ")
        err = max(rel_err(a, b) for a, b in zip(got[dev.type], got["cpu"]))
        if err > 0.0:
            bad.append(f"binary EF stream: receiver's x_hat rel err vs cpu {err:.1e}")
        figs.append("binary EF stream x3 equal")
    except Exception as e:
        bad.append(f"binary EF stream: {where(e)}")
    if bad:
        raise Fail("; ".join(bad))
    return "[2,16,32] bytes and decoded equal to cpu: " + ", ".join(figs)


# --------------------------------------------------------------------------- 3. ring attention, SSN


def check_ring_attention(dev: torch.device, args) -> str:
    """ring_attention over 4 chunks (fp32 wire) against full causal attention, forward and backward."""
    from components.training.context_parallel.ring import ring_attention

    B, H, T, dh, P = 2, 2, 64, 16, 4
    base = [randn((B, H, T, dh), seed=s) for s in (6, 7, 8)]
    w = randn((B, H, T, dh), seed=9)

    def run(d, ring: bool):
        q, k, v = (b.to(d).requires_grad_() for b in base)
        sink: list = []
        out = ring_attention(q, k, v, P, sink=sink) if ring else F.scaled_dot_product_attention(q, k, v, is_causal=True)
        (out * w.to(d)).sum().backward()
        return out.detach(), [t.grad for t in (q, k, v)], sink

    t_exact, t_dev = (1e-5 if dev.type == "cpu" else 1e-4), tol(dev, 1e-4)
    od, gd, sink = run(dev, True)
    of, gf, _ = run(dev, False)
    oc, gc, sink_c = run(torch.device("cpu"), True)
    bad = [] if on(od, dev) else [f"output on {od.device}"]
    e_full = max([rel_err(od, of)] + [rel_err(a, b) for a, b in zip(gd, gf)])
    e_cpu = max([rel_err(od, oc)] + [rel_err(a, b) for a, b in zip(gd, gc)])
    if e_full > t_exact:
        bad.append(f"ring vs full attention rel err {e_full:.1e} > {t_exact:.0e}")
    if e_cpu > t_dev:
        bad.append(f"ring on {dev} vs cpu rel err {e_cpu:.1e} > {t_dev:.0e}")
    fwd_bytes = sum(nb * n for kind, nb, n in sink if kind == "fwd")
    if sink != sink_c:
        bad.append("hop payload records differ from cpu")
    if bad:
        raise Fail("; ".join(bad))
    return (f"out+grads rel err vs full attention {e_full:.1e} (tol {t_exact:.0e}), vs cpu {e_cpu:.1e} "
            f"(tol {t_dev:.0e}); {P} chunks, {fwd_bytes} fwd wire bytes")


def check_cp_ring_block(dev: torch.device, args) -> str:
    """The cp_ring GPT (2 layers) in each K/V mode, forward and backward, against cpu."""
    from components.training.context_parallel.ring import RingSpec, build_model, layer_stats

    t = tol(dev, 1e-4)
    x, y = (torch.randint(0, 50, (2, 32), generator=torch.Generator().manual_seed(s)) for s in (11, 12))
    modes = [("dense", RingSpec(chunks=4)), ("randproj r4", RingSpec(chunks=4, kv="randproj", r=4)),
             ("subspace M1", RingSpec(chunks=4, kv="subspace", r=4, M=1)),
             ("subspace M2", RingSpec(chunks=4, kv="subspace", r=4, M=2))]
    figs, bad = [], []
    for name, spec in modes:
        try:
            torch.manual_seed(0)
            ref = build_model(50, 2, 2, 32, 32, spec)
            model = copy.deepcopy(ref).to(dev)
            lc, sc, gc = _gpt_step(ref, x, y)
            ld, sd, gd = _gpt_step(model, x.to(dev), y.to(dev))
            probs = [] if on(ld, dev) else [f"logits on {ld.device}"]
            err = max([rel_err(ld, lc), rel_err(sd, sc)] + [rel_err(gd[n], gc[n]) for n in gc])
            if err > t:
                probs.append(f"logits/loss/grads rel err {err:.1e} > {t:.0e}")
            if layer_stats(model) != layer_stats(ref):
                probs.append("wire byte counts differ from cpu")
            figs.append(f"{name} {err:.1e}")
        except Exception as e:
            probs = [where(e)]
        bad += [f"{name}: {p}" for p in probs]
    if bad:
        raise Fail("; ".join(bad))
    return f"max rel err vs cpu (tol {t:.0e}): " + ", ".join(figs)


def _ssn_pass(d_: torch.device):
    from components.training.subspace_pp.codecs import BoundaryCodec

    B, T, d, k, V = 2, 16, 32, 8, 50
    basis = torch.linalg.qr(randn((d, k), seed=13))[0]
    table = randn((V, d), seed=14)
    tok = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(15))
    y = table[tok] + randn((B, T, k), seed=16) @ basis.T             # a subspace-constrained activation
    w = randn((B, T, d), seed=17)
    codec = BoundaryCodec("ssn", d, basis.to(d_), table.to(d_), vocab=V)
    y_d, tok_d = y.to(d_).requires_grad_(), tok.to(d_)
    x_rt, nbytes = codec.roundtrip(y_d.detach(), tok_d)
    t_send = codec.pre(y_d, tok_d)                                       # sender
    payload = codec.encode(t_send, tok_d)
    t_hat, tok_r = codec.decode(payload, (B, T))                         # receiver
    t_hat = t_hat.requires_grad_()
    (codec.post(t_hat, tok_r) * w.to(d_)).sum().backward()
    gpay = codec.encode_grad(t_hat.grad)                                 # the gradient goes back
    t_send.backward(codec.decode_grad(gpay, (B, T)))
    return {"y": y, "x_rt": x_rt, "payload": payload, "tok": tok_r, "gpay": gpay, "ygrad": y_d.grad,
            "ygrad_ref": (w @ basis) @ basis.T, "nbytes": nbytes, "encode": codec.encode}


def check_ssn_boundary(dev: torch.device, args) -> str:
    """The SSN pipeline boundary: (y - T[tok]) U and token ids across, rebuilt exactly; gradient back."""
    t_exact, t_dev = (1e-5 if dev.type == "cpu" else 1e-4), tol(dev, 1e-4)
    c = _ssn_pass(torch.device("cpu"))
    d = _ssn_pass(dev)
    bad = want(d["payload"], dev, torch.uint8, "payload", d["encode"])
    e_rt = rel_err(d["x_rt"], d["y"])
    e_grad = rel_err(d["ygrad"], d["ygrad_ref"])
    if e_rt > t_exact:
        bad.append(f"round trip rel err {e_rt:.1e} > {t_exact:.0e}")
    if e_grad > t_exact:
        bad.append(f"gradient through the boundary rel err {e_grad:.1e} > {t_exact:.0e}")
    if d["nbytes"] != c["nbytes"] or not torch.equal(d["tok"].cpu(), c["tok"]):
        bad.append("payload size or token ids differ from cpu")
    e_cpu = max(rel_err(d["x_rt"], c["x_rt"]), rel_err(d["ygrad"], c["ygrad"]))
    if e_cpu > t_dev:
        bad.append(f"round trip / gradient rel err vs cpu {e_cpu:.1e} > {t_dev:.0e}")
    if bad:
        raise Fail("; ".join(bad))
    return (f"round trip rel err {e_rt:.1e}, gradient {e_grad:.1e} (tol {t_exact:.0e}); vs cpu {e_cpu:.1e} "
            f"(tol {t_dev:.0e}); {d['nbytes']} B forward, {d['gpay'].numel()} B back")


# --------------------------------------------------------------------------- 4. DiT sampling


def _dit_pass(model, d_: torch.device, noise, y, steps: int):
    from components.diffusion.compactfusion.composed import ComposedRunner
    from components.diffusion.compactfusion.exchange import ExchangeSpec
    from components.diffusion.foresight.policies import Foresight
    from components.diffusion.sampling import sample

    policy = Foresight(lam=4.0, warmup=2, interval=2, last_full=1)
    runner = ComposedRunner(2, ExchangeSpec(system="compressed", codec="binary", order=1, ef=True, warmup=1),
                            model, policy)
    out = sample(model, noise.to(d_), y.to(d_), steps, cfg_scale=2.0, runner=runner)
    return out, policy.decisions, [r["bytes_in"] for r in runner.reports()], runner.skip_fraction


def check_dit_foresight_compactfusion(dev: torch.device, args) -> str:
    """A tiny random DiT, 8 Euler steps with CFG: Foresight deciding, 2 shards exchanging binary residuals."""
    from components.diffusion.sampling import draw
    from components.models.dit import DiT, DiTConfig

    torch.manual_seed(0)
    ref = DiT(DiTConfig(img_size=8, channels=1, patch=2, d=32, heads=2, depth=3, num_classes=4))
    g = torch.Generator().manual_seed(21)
    with torch.no_grad():                 # adaLN-zero starts every block as the identity: randomise all
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    model = copy.deepcopy(ref).to(dev)
    noise, y = draw(0, 2, ref)
    steps, t = 8, tol(dev, 1e-3)
    oc, dc, bc, _ = _dit_pass(ref, torch.device("cpu"), noise, y, steps)
    od, dd, bd, sd = _dit_pass(model, dev, noise, y, steps)
    bad = [] if on(od, dev) else [f"samples on {od.device}"]
    if not torch.isfinite(od).all():
        bad.append("non-finite samples")
    err = rel_err(od, oc)
    if err > t:
        bad.append(f"samples rel err vs cpu {err:.1e} > {t:.0e}")
    if dd != dc:
        bad.append(f"Foresight decided {dd}, on cpu {dc}")
    if bd != bc:
        bad.append(f"bytes received per shard {bd}, on cpu {bc}")
    if bad:
        raise Fail("; ".join(bad))
    return (f"{steps} steps, rel err vs cpu {err:.1e} (tol {t:.0e}), skip fraction {sd:.2f}, "
            f"decisions {','.join(dd)}, {sum(bd)} B exchanged")


# --------------------------------------------------------------------------- 5. FAL TP step timing


def _tp_blocks_step(blocks, comm, x: torch.Tensor) -> None:
    first: dict = {}
    h = x
    for blk in blocks:
        h = blk(h, first, comm)
    h.pow(2).mean().backward()


def check_fal_tp_step(dev: torch.device, args) -> str:
    """One rank of tp=2 (all-reduces counted, not sent), L=4 blocks, forward + backward, fal vs pre_ln."""
    from components.models.gpt import GPTConfig
    from components.training.tensor_parallel.comm import CountingComm
    from components.training.tensor_parallel.model import TPBlock, check_tp

    cuda = dev.type == "cuda"
    width = args.width or (1024 if cuda else 128)
    L, B, T = 4, (8 if cuda else 2), (512 if cuda else 64)
    warm, reps = (3, 10) if cuda else (1, 3)
    ms, counts, bad = {}, {}, []
    for block in ("pre_ln", "fal"):
        cfg = GPTConfig(vocab_size=256, n_layer=L, n_head=max(2, width // 64), d_model=width, context=T, block=block)
        check_tp(2, cfg, key="--width")
        torch.manual_seed(0)
        blocks = [TPBlock(cfg, i, 2).to(dev) for i in range(L)]
        comm = CountingComm(0, 2)
        x = randn((B, T, width), seed=31).to(dev).requires_grad_()
        for _ in range(warm):
            _tp_blocks_step(blocks, comm, x)
        comm.reset()
        times = []
        for _ in range(reps):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                _tp_blocks_step(blocks, comm, x)
                end.record()
                torch.cuda.synchronize(dev)
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                _tp_blocks_step(blocks, comm, x)
                times.append((time.perf_counter() - t0) * 1e3)
        counts[block] = comm.counts()["fwd_allreduces"] // reps
        ms[block] = sorted(times)[len(times) // 2]
        if not all(torch.isfinite(p.grad).all() for b in blocks for p in b.parameters() if p.grad is not None):
            bad.append(f"{block}: non-finite gradients")
    expected = {"pre_ln": 2 * L, "fal": L + 1}
    for block, n in expected.items():
        if counts[block] != n:
            bad.append(f"{block}: {counts[block]} all-reduces per forward, expected {n}")
    if bad:
        raise Fail("; ".join(bad))
    clock = "CUDA events" if cuda else "perf_counter, not judged"
    return (f"width {width}, L {L}, B {B}, T {T}, median of {reps} ({clock}): pre_ln {ms['pre_ln']:.2f} ms, "
            f"fal {ms['fal']:.2f} ms (x{ms['fal'] / ms['pre_ln']:.2f}); all-reduces per forward "
            f"pre_ln {counts['pre_ln']}, fal {counts['fal']}")


# --------------------------------------------------------------------------- 6. data-parallel ranks


def _dp_run(dev: torch.device, variant: dict) -> dict:
    """A few steps of the data-parallel loop's in-process ranks (components.training.ddp.loop) on ``dev``."""
    from components.core.registry import lookup
    from components.data.char_corpus import build_corpus
    from components.training.ddp.loop import train_in_process
    from components.training.duo import fast_slow  # noqa: F401  (registers ddp_strategy "duo")

    corpus = build_corpus(0.1)
    cfg = dict(workers=2, batch=4, steps=6, lr=3e-3, warmup=2, final_lr_frac=0.1, optimizer="adamw",
               weight_decay=0.1, bits=1, bucket=128, eval_every=3, eval_batches=1, eval_batch=4,
               final_eval_batches=2, ddp_bucket_mb=25.0, powersgd_rank=2, powersgd_start=10, fail_at=None,
               takeover=None, seed=0, device=str(dev), vocab_size=corpus.vocab_size, train=corpus.train,
               val=corpus.val, model=dict(n_layer=2, n_head=2, d_model=32, context=32), block="pre_ln")
    cfg.update(variant)
    cfg["strategy"] = lookup("ddp_strategy", cfg.pop("sync"), key="strategy")
    return train_in_process(cfg)


def check_dp_in_process(dev: torch.device, args) -> str:
    """ddp_train (fp32) and the composed job (FAL blocks, DUO 1-bit, MeCeFO takeover) as 2 in-process
    ranks for 6 steps on the device: losses against cpu, every rank's weights equal."""
    import os

    if Path("/sys/class/net/lo").exists():
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    variants = {
        "fp32": dict(method="fp32", sync="sync"),
        "composed": dict(method="duo", sync="duo", block="fal",
                         takeover=dict(recovery="mecefo", down_steps=2, kills=[[1, 1]], rank=0, basis="svd",
                                       refresh=3)),
    }
    t = tol(dev, 1e-4)                               # 6 AdamW steps after 1-bit codes: kernels' rounding grows
    figs, bad = [], []
    for name, v in variants.items():
        try:
            c, d = _dp_run(torch.device("cpu"), v), _dp_run(dev, v)
            lc, ld = (out["ranks"][0]["train_loss"] + out["ranks"][0]["val_loss"] for out in (c, d))
            err = max(abs(a - b) / abs(b) for a, b in zip(ld, lc))
            sums = {r["param_checksum"] for r in d["ranks"]}
            if err > t:
                bad.append(f"{name}: losses rel err vs cpu {err:.1e} > {t:.0e}")
            if len(sums) != 1:
                bad.append(f"{name}: the ranks' weights differ on {dev} (checksums {sorted(sums)})")
            if v.get("takeover") and not d["ranks"][0]["takes"]:
                bad.append(f"{name}: rank 0 took over no micro-batch")
            figs.append(f"{name} final val {ld[-1]:.4f} (cpu {lc[-1]:.4f}, rel err {err:.1e})")
        except Exception as e:
            bad.append(f"{name}: {where(e)}")
    if bad:
        raise Fail("; ".join(bad))
    return f"2 ranks x 6 steps (tol {t:.0e}): " + ", ".join(figs)


def check_mecefo_train(dev: torch.device, args) -> str:
    """MeCeFO's vectorised replicas (components.training.mecefo.train) for 6 steps through a kill: svd
    and gaussian low-rank FFN gradients, skipped attention, evaluation and gradient cosines, against cpu."""
    from components.data.char_corpus import build_corpus
    from components.training.mecefo.approx import Approx
    from components.training.mecefo.schedule import fixed_schedule
    from components.training.mecefo.train import TrainSetup, params_vector, train

    corpus = build_corpus(0.1)
    setup = TrainSetup(n_layer=2, n_head=2, d_model=32, context=32, batch=4, steps=6, lr=3e-3, warmup=2,
                       eval_every=3, eval_batches=1, eval_batch=4, final_eval_batches=2)
    sets, _ = fixed_schedule(4, 6, [(1, 2)], 2)
    t = tol(dev, 1e-4)                               # 6 AdamW steps: kernels' rounding grows
    figs, bad = [], []
    for basis in ("svd", "gaussian"):
        try:
            a = Approx(rank=4, basis=basis, refresh=3)
            c, d = (train(setup, corpus, 0, sets, "mecefo", a, device=str(d_)) for d_ in (torch.device("cpu"), dev))
            err = max(abs(x - y) / abs(y) for x, y in zip(d["val_loss"] + [d["final_val_loss"]],
                                                          c["val_loss"] + [c["final_val_loss"]]))
            werr = rel_err(params_vector(d["model"]), params_vector(c["model"]))
            if err > t or werr > t:
                bad.append(f"{basis}: rel err vs cpu, losses {err:.1e}, weights {werr:.1e} > {t:.0e}")
            figs.append(f"{basis} final val {d['final_val_loss']:.4f} (rel err {err:.1e}, weights {werr:.1e})")
        except Exception as e:
            bad.append(f"{basis}: {where(e)}")
    if bad:
        raise Fail("; ".join(bad))
    return f"4 replicas x 6 steps, replica 2 down at step 1 (tol {t:.0e}): " + ", ".join(figs)


# --------------------------------------------------------------------------- driver

CHECKS = {
    "gpt_blocks": check_gpt_blocks,
    "packed_codecs": check_packed_codecs,
    "row_topk": check_row_topk,
    "ddp_codec_hook": check_ddp_codec_hook,
    "residual_codecs": check_residual_codecs,
    "ring_attention": check_ring_attention,
    "cp_ring_block": check_cp_ring_block,
    "ssn_boundary": check_ssn_boundary,
    "dit_foresight_compactfusion": check_dit_foresight_compactfusion,
    "fal_tp_step": check_fal_tp_step,
    "dp_in_process": check_dp_in_process,
    "mecefo_train": check_mecefo_train,
}


def run_check(name: str, fn, dev: torch.device, args) -> str:
    """Run one check; print and return its status (PASS, FAIL or SKIP)."""
    try:
        status, text = "PASS", fn(dev, args)
    except Skip as e:
        status, text = "SKIP", str(e)
    except Fail as e:
        status, text = "FAIL", str(e)
    except ImportError as e:
        refused = (e.name or "").split(".")[0] in REFUSED
        status, text = ("SKIP", f"imports {e.name} at import time ({where(e)})") if refused else ("FAIL", where(e))
    except Exception as e:
        status, text = "FAIL", where(e)
    print(f"{status} {name}: {text}", flush=True)
    return status


def device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"{platform.machine() or 'cpu'}, {torch.get_num_threads()} threads"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run dtlab's pure-torch paths on a device against cpu.")
    ap.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda when available)")
    ap.add_argument("--width", type=int, default=0, help="fal_tp_step width (default 1024 on cuda, 128 on cpu)")
    ap.add_argument("--only", default="", help="comma-separated check names (default: all)")
    args = ap.parse_args(argv)
    name = args.device or "cuda"
    if not (name == "cpu" or name.split(":")[0] == "cuda"):
        ap.error(f"--device {name}: expected cuda, cuda:N or cpu")
    if name != "cpu" and not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device (torch {torch.__version__}); pass --device cpu for the cpu smoke test",
              file=sys.stderr)
        return 2
    only = [c for c in args.only.split(",") if c]
    unknown = [c for c in only if c not in CHECKS]
    if unknown:
        ap.error(f"--only {','.join(unknown)}: known checks are {', '.join(CHECKS)}")
    dev = torch.device(name)
    if dev.type == "cuda":                  # fp32 compared against cpu: no TF32 matmuls
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    statuses = [run_check(c, fn, dev, args) for c, fn in CHECKS.items() if not only or c in only]
    n = {s: statuses.count(s) for s in ("PASS", "FAIL", "SKIP")}
    print(f"gpu_check: {n['PASS']} passed, {n['FAIL']} failed, {n['SKIP']} skipped on {dev} "
          f"(torch {torch.__version__}, {device_name(dev)})")
    return 1 if n["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
