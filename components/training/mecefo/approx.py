"""The three MeCeFO approximations on the shared GPT's blocks (pre-LN, parallel, FAL, FAL+), each
switchable, and the saved-activation accounting.

For one micro-batch run in MeCeFO mode every block computes (spec sheet, per-layer rules):

1. ``skip_attn``: ``h = x + stopgrad(A(LN1 x))``: the attention runs forward outside autograd, so
   backward reaches ``x`` through the residual only and the attention weights get no gradient from
   this micro-batch; nothing of the attention is stored.
2. ``recompute_ffn``: the FFN (LN2 + MLP) is activation-checkpointed: only its input is stored and
   the FFN is recomputed in backward.
3. ``lowrank``: each FFN linear ``W (out x in)`` with input ``X`` keeps only ``X P`` (tokens x r) and
   its weight gradient is ``(G^T (X P)) P^T``; the input gradient ``G W`` stays exact. ``basis``:
   ``svd`` (the paper's low-rank gradient approximation: ``P`` = the top-r right singular vectors of
   ``W``, so ``P P^T`` projects the gradient onto the subspace the weight already spans; biased, no
   rescaling) or ``gaussian`` (the spec sheet's default: ``P = N(0, 1/r)`` drawn per layer, linear and
   step, ``E[P P^T] = I``: unbiased, but one draw inflates the gradient's norm; on the experiment's GPT
   after 300 steps, rank in/8: cosine 0.34 and norm 3.0x the exact FFN weight gradient, against 0.72 and
   0.72x for svd: ``benchmarks/bench_mecefo.py --basis-probe``). At ``r >= in``, ``P = I`` and the weight gradient is
   exact (the same custom backward, so the exactness check covers it).

   The svd basis is refreshed periodically, not per micro-batch (the sheet: every 200 steps,
   ``refresh``): :class:`Bases` holds every FFN linear's P, computed by every replica at the steps that
   are multiples of ``refresh`` from the weights of that step, which every replica of synchronous data
   parallelism holds alike. So P does not depend on who carries a micro-batch or in which order the
   replicas run, and the SVDs cost ``Bases.seconds`` once per window, not once per taken micro-batch
   (per micro-batch they made a taken micro-batch dearer than an exact one on the timing model).

The attention a skipped micro-batch does not differentiate gets its step gradient from the
micro-batches that computed it: :func:`skipped_params` names those parameters (LN1, attention, FAL+'s
first-signal norm) and the step's reduction takes their mean over the computing micro-batches
(``attn_mean``; the sum over all n micro-batches / n would shrink it by the skipped share).

:func:`approximated` swaps the blocks' forward for the duration of one micro-batch, so the model
itself (``GPT.forward``) is reused unchanged. :class:`SavedBytes` counts what autograd keeps for
backward (``torch.autograd.graph.saved_tensors_hooks``), parameters excluded, each storage once.

Device: everything runs where the model's weights are (``ctx.device``); micro-batches drawn on cpu are
moved there by :func:`microbatch_loss`, and gaussian projections are drawn from cpu generators and
moved, so a seed gives the same draws on any device.
"""
from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from components.core import devices
from components.core.errors import require
from components.core.timing import timed
from components.training.on_device import device_of

BLOCKS = ("pre_ln", "parallel", "fal", "fal_plus")   # blocks of the shared GPT the rules apply to
BASES = ("svd", "gaussian")                           # the low-rank weight-gradient projection


@dataclass(frozen=True)
class Approx:
    """Which approximations a MeCeFO micro-batch uses; ``rank`` 0: in/8 per linear (the sheet's r)."""

    skip_attn: bool = True
    recompute_ffn: bool = True
    lowrank: bool = True
    rank: int = 0
    basis: str = "svd"        # svd: top-r right singular vectors of W; gaussian: N(0, 1/r) per step
    attn_mean: bool = True    # a skipped attention's gradient: mean over the micro-batches that computed it
    refresh: int = 200        # svd: steps between recomputing the bases (:class:`Bases`); 1: every step

    def r(self, fan_in: int) -> int:
        """Rank of the weight-gradient sketch of a linear with ``fan_in`` inputs (fan_in: exact)."""
        if not self.lowrank:
            return fan_in
        return min(fan_in, self.rank) if self.rank else max(1, fan_in // 8)

    @property
    def exact(self) -> bool:
        """Gradients equal exact ones (recomputation changes memory and time only)."""
        return not self.skip_attn and not self.lowrank


def check_basis(basis: str, key: str = "basis") -> None:
    require(basis in BASES, key, basis, "one of " + ", ".join(BASES))


def check_refresh(refresh: int, key: str = "refresh") -> None:
    require(isinstance(refresh, int) and not isinstance(refresh, bool) and refresh >= 1, key, refresh,
            "a positive number of steps between svd basis refreshes (1: every step)")


def check_rank(rank: int, d_model: int, key: str = "rank") -> None:
    require(isinstance(rank, int) and 0 <= rank <= 4 * d_model, key, rank,
            f"0 (in/8 per FFN linear) or a rank in [1, {4 * d_model}] (the FFN width 4 x d_model)")


class LowRankLinear(torch.autograd.Function):
    """``y = x W^T + b``; stores ``x P`` and returns the weight gradient ``(G^T x P) P^T``."""

    @staticmethod
    def forward(ctx, x, weight, bias, P):
        xp = x.reshape(-1, x.shape[-1]) @ P
        ctx.save_for_backward(xp, weight, P)
        ctx.x_shape, ctx.has_bias = x.shape, bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, gy):
        xp, weight, P = ctx.saved_tensors
        g = gy.reshape(-1, gy.shape[-1])
        gx = (g @ weight).view(ctx.x_shape)
        gw = (g.t() @ xp) @ P.t()
        return gx, gw, g.sum(0) if ctx.has_bias else None, None


def projection(weight: torch.Tensor, r: int, gen: torch.Generator | None, basis: str = "svd") -> torch.Tensor:
    """P (in x r) for a linear's ``weight`` (out x in), on its device: its top-r right singular vectors
    (``svd``) or Gaussian / sqrt(r) (``gaussian``, unbiased sketch; drawn from the cpu generator ``gen``
    and moved, the same draw on any device); the identity at full rank."""
    fan_in = weight.shape[1]
    if r >= fan_in:
        return torch.eye(fan_in, device=weight.device)
    if basis == "svd":
        return torch.linalg.svd(weight.detach(), full_matrices=False).Vh[:r].t().contiguous()
    return torch.randn(fan_in, r, generator=gen).to(weight.device) / math.sqrt(r)


def ffn_linears(model) -> list:
    """Every block's two FFN linears (up, down): the weights MeCeFO sketches."""
    return [lin for blk in model.blocks for lin in (blk.mlp[0], blk.mlp[2])]


class Bases:
    """One replica's svd projections (``a.basis == "svd"``), refreshed at the steps that are multiples of
    ``a.refresh`` from the weights of that step (:meth:`at`, called by the training loops every step
    before anything is computed). ``seconds``: the last refresh on the clock of the weights' device
    (``components.core.devices.clock``: thread CPU time on cpu, wall time to the device's sync on cuda);
    ``refreshes``: how many ran. Its state travels with a replica's weights (:meth:`state` /
    :meth:`load`), so a replica restarted mid-window uses its neighbour's P, as if it had never been down."""

    def __init__(self, a: "Approx"):
        self.a = a
        self.Ps: list[torch.Tensor] | None = None     # P (in x r) of every FFN linear, ffn_linears order
        self.seconds, self.refreshes = 0.0, 0

    @property
    def active(self) -> bool:
        return self.a.lowrank and self.a.basis == "svd"

    def at(self, model, step: int) -> "Bases":
        """Refresh from ``model``'s weights if ``step`` opens a window (or none is held yet)."""
        if self.active and (self.Ps is None or step % self.a.refresh == 0):
            self.refresh(model)
        return self

    def refresh(self, model) -> None:
        lins = ffn_linears(model)
        dev = str(lins[0].weight.device)
        with timed(devices.clock(dev)) as t:
            self.Ps = [projection(lin.weight, self.a.r(lin.in_features), None, "svd") for lin in lins]
            devices.synchronize(dev)
        self.seconds = t.s
        self.refreshes += 1

    def of_block(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Block ``i``'s (P_up, P_down)."""
        return self.Ps[2 * i], self.Ps[2 * i + 1]

    def state(self) -> list[torch.Tensor] | None:
        return None if self.Ps is None else [P.clone() for P in self.Ps]

    def load(self, state: list[torch.Tensor] | None) -> None:
        self.Ps = None if state is None else [P.clone() for P in state]


def skipped_params(model) -> list[torch.nn.Parameter]:
    """The parameters a micro-batch with the attention skipped gives no gradient: each block's LN1 and
    attention, and FAL+'s first-signal norm (layer 0's a1 is computed outside autograd too)."""
    out = []
    for blk in model.blocks:
        for mod in (blk.ln1, blk.attn, getattr(blk, "ln_first", None)):
            if mod is not None:
                out += list(mod.parameters())
    return out


def skipped_mask(model) -> torch.Tensor:
    """Boolean mask over the flat parameter vector (``model.parameters()`` order) of :func:`skipped_params`."""
    ids = {id(p) for p in skipped_params(model)}
    return torch.cat([torch.full((p.numel(),), id(p) in ids, device=p.device) for p in model.parameters()])


def _ffn(blk, h: torch.Tensor, Ps) -> torch.Tensor:
    """LN2 + MLP of a pre-LN block, its two linears with sketched weight gradients when ``Ps``."""
    up, act, down, drop = blk.mlp
    z = blk.ln2(h)
    if Ps is None:
        return drop(down(act(up(z))))
    z = LowRankLinear.apply(z, up.weight, up.bias, Ps[0])
    return drop(LowRankLinear.apply(act(z), down.weight, down.bias, Ps[1]))


def block_forward(blk, x: torch.Tensor, a: Approx, Ps, ctx=None) -> torch.Tensor:
    """One block under MeCeFO rules ``a`` (``Ps``: the two FFN projections, or None).

    The rules are per sub-layer, so they carry over to every block of the shared GPT: pre-LN, the
    GPT-J parallel block, FAL and FAL+. The attention (and, in FAL/FAL+, the first-attention signal a1
    it writes in layer 0 into the forward's ``ctx``, a :class:`~components.models.gpt.BlockContext`)
    runs outside autograd when skipped; the FFN is recomputed and sketched on whatever input its block
    gives it (``x + a1`` in a later FAL block)."""
    from components.models.gpt import FALBlock, FALPlusBlock, ParallelBlock

    grad = torch.no_grad() if a.skip_attn else nullcontext()
    with grad:
        att = blk.attn(blk.ln1(x), blk.layer, None)

    def ffn(z):
        if a.recompute_ffn and torch.is_grad_enabled() and z.requires_grad:
            return checkpoint(_ffn, blk, z, Ps, use_reentrant=True)
        return _ffn(blk, z, Ps)

    if isinstance(blk, FALBlock):
        if blk.layer == 0:
            with grad:
                ctx.a1 = blk.first_signal(att)
            h = x + att
            return h + ffn(h)
        if isinstance(blk, FALPlusBlock):
            h = x + att
            return h + ffn(h + ctx.a1)
        return x + att + ffn(x + ctx.a1)
    if isinstance(blk, ParallelBlock):
        return x + att + ffn(x)
    h = x + att                        # pre-LN; the residual path keeps its gradient either way
    return h + ffn(h)


def check_model(model) -> None:
    """MeCeFO's per-layer rules need the pre-LN sub-layers (ln1, attn, ln2, 4x MLP) in every block."""
    require(model.cfg.block in BLOCKS, "block", model.cfg.block,
            "one of " + ", ".join(BLOCKS) + " (MeCeFO's per-layer rules are written for these)")


@contextmanager
def approximated(model, a: Approx | None, gen: torch.Generator | None = None, bases: Bases | None = None):
    """Run ``model`` with MeCeFO blocks inside the block; None: exact. Projections: the svd ``bases``
    held for this window, else computed now (svd of the current weights; gaussian drawn from ``gen``)."""
    if a is None:
        yield model
        return
    check_model(model)
    gen = gen or torch.Generator().manual_seed(0)
    held = (bases is not None and bases.Ps is not None and a.lowrank and a.basis == "svd"
            and bases.a.rank == a.rank)
    for i, blk in enumerate(model.blocks):
        up, _, down, _ = blk.mlp
        Ps = None
        if held:
            Ps = bases.of_block(i)
        elif a.lowrank:
            Ps = tuple(projection(lin.weight, a.r(lin.in_features), gen, a.basis) for lin in (up, down))
        blk.forward = (lambda b, P: lambda x, cache=None, ctx=None: block_forward(b, x, a, P, ctx))(blk, Ps)
    try:
        yield model
    finally:
        for blk in model.blocks:
            del blk.forward


def microbatch_loss(model, x, y, a: Approx | None, gen: torch.Generator | None = None,
                    bases: Bases | None = None) -> torch.Tensor:
    """Mean next-token cross-entropy of one micro-batch, exact (``a`` None) or under MeCeFO rules, on the
    model's device (``x``, ``y`` drawn on cpu are moved there)."""
    dev = device_of(model)
    with approximated(model, a, gen, bases):
        return model(x.to(dev), y.to(dev))[1]


class SavedBytes:
    """Bytes autograd saves for backward inside the block: non-parameter tensors, each storage once."""

    def __init__(self, model=None):
        self._params = {p.untyped_storage().data_ptr() for p in model.parameters()} if model is not None else set()
        self._seen: dict[int, int] = {}

    def _pack(self, t: torch.Tensor):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in self._params and not isinstance(t, torch.nn.Parameter):
            self._seen[ptr] = max(self._seen.get(ptr, 0), st.nbytes())
        return t

    @property
    def nbytes(self) -> int:
        return sum(self._seen.values())

    def __enter__(self):
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


def flat_grad(model) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in model.parameters()])


def grad_of(model, x, y, a: Approx | None, gen: torch.Generator | None = None, scale: float = 1.0,
            bases: Bases | None = None) -> torch.Tensor:
    """Flat gradient of ``scale`` x one micro-batch's loss (``.grad`` cleared before and after)."""
    model.zero_grad(set_to_none=True)
    (microbatch_loss(model, x, y, a, gen, bases) * scale).backward()
    g = flat_grad(model)
    model.zero_grad(set_to_none=True)
    return g
