"""Discrete-event simulation of one GPU serving a multimodal LLM (SimPy).

Systems (``system``):

- ``tm``: time multiplexing, vLLM-V1-like. One engine loop; each step schedules the running
  decodes, then prefill chunks FCFS within the chunked-prefill token budget; the vision encoder
  runs inside the step, on the whole GPU, for the not-yet-encoded images that the scheduled chunks
  cover (encoder cache on: each image once; a chunk is cut before an image that would pass the
  encoder budget). Decodes wait for the encoder part of the step.
- ``sis`` / ``static`` / ``mask``: space multiplexing. The encoder is its own process (own stream)
  beside the decoder engine; a request is prefilled only once all its images are encoded. The
  decoder's and the encoder's SM counts are set at every decoder step: by SIS
  (:func:`.scheduling.sis_decoder_sms`), or a fixed split (``static``: the encoder's share and the
  decoder's rest, each capped even while the other idles), or the released code's partition
  (``mask``: the encoder's stream on a fixed SM mask, the decoder's stream unmasked, so a decoder
  kernel takes every SM the encoder's kernel does not hold and the whole GPU while the encoder
  idles; its encoder scheduler is FCFS, one request per step). The encoder
  runs a batch layer by layer and reads its SM count at every layer; while the encoder runs, a
  decoder layer takes (1 + gamma) longer (HBM is shared). Both run kernel by kernel (the encoder
  per ViT layer, the decoder per LLM layer): a kernel keeps its SMs until it ends, and a new kernel
  takes the SMs of the current decision that are free, so the two never hold more SMs than exist.

Both systems share the decoder step model (continuous batching, chunked prefill, first token at the
end of a request's prefill) and the GPU cost model (:class:`.calibration.GPU`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from components.serving.spaceserve.calibration import GPU
from components.serving.spaceserve.scheduling import encoder_batch, sis_cost_decoder_sms, sis_decoder_sms
from components.serving.spaceserve.workload import Request


@dataclass
class SimConfig:
    system: str = "sis"              # tm | sis | static | mask
    encoder_order: str = "twsrft"    # fcfs | srpt | twsrft (space-multiplexed systems; tm is fcfs)
    window_s: float = 0.03           # TWSRFT window W
    beta: float = 1000.0             # TWSRFT/SRPT aging, ViT tokens of priority per second waited
    eps: float = 0.05                # SIS: decoder step within (1 + eps) of its full-GPU time
    sis_rule: str = "eps"            # eps (the sheet's rule) | cost (J = t_dec + mu * max(0, drain - D))
    mu: float = 1.0                  # cost rule: weight of the encoder-backlog penalty
    deadline_s: float = 0.05         # cost rule: D, the backlog drain time tolerated without penalty
    static_enc_share: float = 0.3    # static, mask: encoder's fixed SM share
    enc_budget: int = 8192           # ViT tokens per encoder batch (= 2048 LLM tokens)
    chunk_tokens: int = 2048         # chunked-prefill token budget per decoder step
    max_batch: int = 256             # requests decoding or prefilling at once
    enc_slices: int = 32             # encoder batch = this many layer kernels (repartition points)
    max_sim_s: float = 1e5           # safety stop (simulated seconds)


@dataclass
class SimResult:
    ttft: np.ndarray
    tpot: np.ndarray
    enc_completion: np.ndarray
    makespan: float
    tokens: int
    enc_stall_share: float           # of decoder-step time with decodes waiting: spent in the encoder
    enc_sm_share: float              # of the GPU's SM-seconds, the part the encoder computed on
    timeline: list = field(default_factory=list)   # (t, encoder SMs) at every change
    unfinished: int = 0              # requests not done at the safety stop (their figures are NaN)
    peak_sms: int = 0                # most SMs in use at once (encoder kernel + decoder step); <= the GPU's


class _State:
    """Per-request progress shared by both simulators."""

    def __init__(self, reqs: list[Request]):
        self.reqs = reqs
        n = len(reqs)
        self.prompt = [r.prompt_tokens for r in reqs]
        self.prefilled = [0] * n
        self.generated = [0] * n
        self.first = [np.nan] * n
        self.finish = [np.nan] * n
        self.enc_done = [np.nan] * n
        self.encoded = [[False] * len(r.vit_tokens) for r in reqs]
        self.running: list[int] = []      # decoding
        self.prefill_q: list[int] = []    # ready to prefill (space-multiplexed) / waiting (tm), FCFS
        self.n_done = 0

    def build_step(self, chunk: int, max_batch: int, tm_encoder=None):
        """(decodes, [(rid, n prefill tokens)], encoder images) of the next step.

        ``tm_encoder``: the encoder budget (ViT tokens) when the encoder runs inside the step (time
        multiplexing): the images the scheduled chunks cover are encoded first, and a chunk is cut
        before an image that would pass the budget."""
        decodes = self.running[:max_batch]
        budget = chunk - len(decodes)
        prefill, enc, used = [], [], 0
        for rid in self.prefill_q:
            if budget <= 0 or len(decodes) + len(prefill) >= max_batch:
                break
            start = self.prefilled[rid]
            n = min(budget, self.prompt[rid] - start)
            if tm_encoder is not None:
                pos = 0
                r = self.reqs[rid]
                for j, L in enumerate(r.image_llm_tokens):
                    if pos >= start + n:
                        break
                    if pos + L > start and not self.encoded[rid][j]:
                        if (enc or used) and used + r.vit_tokens[j] > tm_encoder:
                            n = pos - start
                            break
                        enc.append((rid, j))
                        used += r.vit_tokens[j]
                    pos += L
                if n <= 0:
                    break
            prefill.append((rid, n))
            budget -= n
        return decodes, prefill, enc

    def step_shape(self, decodes, prefill) -> tuple:
        ctx = sum(self.prompt[r] + self.generated[r] for r in decodes)
        npre = sum(n for _, n in prefill)
        pctx = (sum(n * (self.prefilled[r] + n / 2) for r, n in prefill) / npre) if npre else 0.0
        return len(decodes), float(ctx), npre, pctx

    def apply_step(self, now: float, decodes, prefill, done_ev):
        for rid in decodes:
            self.generated[rid] += 1
            if self.generated[rid] >= self.reqs[rid].out_tokens:
                self.finish[rid] = now
                self.running.remove(rid)
                self._done(done_ev)
        for rid, n in prefill:
            self.prefilled[rid] += n
            if self.prefilled[rid] >= self.prompt[rid]:
                self.prefill_q.remove(rid)
                self.first[rid] = now
                self.generated[rid] = 1
                if self.reqs[rid].out_tokens <= 1:
                    self.finish[rid] = now
                    self._done(done_ev)
                else:
                    self.running.append(rid)

    def _done(self, done_ev):
        self.n_done += 1
        if self.n_done == len(self.reqs) and not done_ev.triggered:
            done_ev.succeed()

    def result(self, end: float, stall: float, step_time: float, enc_share: float, timeline) -> SimResult:
        arr = np.array([r.arrival for r in self.reqs])
        first, fin = np.array(self.first), np.array(self.finish)
        out = np.array([r.out_tokens for r in self.reqs])
        m = out > 1
        tpot = (fin[m] - first[m]) / (out[m] - 1)
        return SimResult(first - arr, tpot, np.array(self.enc_done) - arr, end, int(out.sum()),
                         stall / step_time if step_time > 0 else 0.0, enc_share, timeline,
                         int(np.isnan(fin).sum()))


class _Signal:
    """A re-armable wake-up: ``wait()`` gives an event that the next ``fire()`` triggers."""

    def __init__(self, env):
        self.env, self.ev = env, env.event()

    def wait(self):
        return self.ev

    def fire(self):
        if not self.ev.triggered:
            self.ev.succeed()
        self.ev = self.env.event()


def simulate(reqs: list[Request], gpu: GPU, cfg: SimConfig, keep_timeline: bool = False) -> SimResult:
    """Run one system on one request stream to completion; per-request TTFT, TPOT, encoder completion."""
    env = simpy.Environment()
    st = _State(reqs)
    done = env.event()
    if cfg.system == "tm":
        _run_tm(env, st, gpu, cfg, done)
        env.run(until=simpy.AnyOf(env, [done, env.timeout(cfg.max_sim_s)]))
        res = st.result(env.now, st.tm_stall, st.tm_steps, st.tm_enc_s / max(env.now, 1e-12), [])
        res.peak_sms = gpu.sms                # one kernel at a time, on the whole GPU
        return res
    return _run_space(env, st, gpu, cfg, done, keep_timeline)


def _arrivals(env, st: _State, on_arrive):
    for r in st.reqs:
        if r.arrival > env.now:
            yield env.timeout(r.arrival - env.now)
        on_arrive(r.rid)


def _run_tm(env, st: _State, gpu: GPU, cfg: SimConfig, done):
    wake = _Signal(env)
    st.tm_stall = st.tm_steps = st.tm_enc_s = 0.0

    def arrive(rid):
        st.prefill_q.append(rid)
        wake.fire()

    def engine():
        while True:
            if not st.running and not st.prefill_q:
                yield wake.wait()
                continue
            decodes, prefill, enc = st.build_step(cfg.chunk_tokens, cfg.max_batch, tm_encoder=cfg.enc_budget)
            t_enc = 0.0
            if enc:
                toks = [st.reqs[r].vit_tokens[j] for r, j in enc]
                t_enc = gpu.enc_time(gpu.enc_flops(toks), gpu.sms, sum(toks)) + gpu.k_enc
            dt = t_enc + gpu.iter_time(gpu.sms, *st.step_shape(decodes, prefill))
            if decodes:
                st.tm_stall += t_enc
                st.tm_steps += dt
            if t_enc:
                st.tm_enc_s += t_enc - gpu.k_enc
                yield env.timeout(t_enc)
                for r, j in enc:
                    st.encoded[r][j] = True
                    if all(st.encoded[r]):
                        st.enc_done[r] = env.now
            yield env.timeout(dt - t_enc)
            st.apply_step(env.now, decodes, prefill, done)

    env.process(_arrivals(env, st, arrive))
    env.process(engine())


def _run_space(env, st: _State, gpu: GPU, cfg: SimConfig, done, keep_timeline: bool) -> SimResult:
    S = gpu.sms
    static_enc = gpu.round_sms(cfg.static_enc_share * S) if cfg.system in ("static", "mask") else None
    pending: dict[int, list] = {}          # rid -> [(image index, vit tokens)] not yet in a batch
    enc_wake, dec_wake, part_changed, slice_done = _Signal(env), _Signal(env), _Signal(env), _Signal(env)
    # held: SMs of the encoder kernel in flight; dec_sms: of the decoder step in flight. A kernel keeps
    # its SMs until it ends, so a new partition only hands out SMs that are free (never held + dec > S).
    state = {"s_enc": static_enc if static_enc is not None else S, "busy": False, "held": 0, "dec_sms": 0, "peak": 0,
             "sm_seconds": 0.0, "pending_flops": 0.0, "pending_tokens": 0,
             "inflight_flops": 0.0, "inflight_tokens": 0}
    timeline = [(0.0, state["s_enc"])]

    def set_enc(s_enc: int):
        if static_enc is not None or s_enc == state["s_enc"]:
            return
        state["s_enc"] = s_enc
        if keep_timeline:
            timeline.append((env.now, s_enc))
        part_changed.fire()

    def arrive(rid):
        pending[rid] = list(enumerate(st.reqs[rid].vit_tokens))
        state["pending_flops"] += gpu.enc_flops(st.reqs[rid].vit_tokens)
        state["pending_tokens"] += sum(st.reqs[rid].vit_tokens)
        enc_wake.fire()

    def encoder():
        last = -np.inf
        while True:
            if not pending:
                yield enc_wake.wait()
                continue
            if cfg.encoder_order == "twsrft" and env.now < last + cfg.window_s:
                yield env.timeout(last + cfg.window_s - env.now)
            last = env.now
            queue = [(rid, st.reqs[rid].arrival, imgs) for rid, imgs in pending.items()]
            batch = encoder_batch(queue, env.now, cfg.encoder_order, cfg.enc_budget, cfg.beta)
            for rid, j in batch:
                pending[rid] = [(i, t) for i, t in pending[rid] if i != j]
                if not pending[rid]:
                    del pending[rid]
            state["busy"] = True
            toks = [st.reqs[r].vit_tokens[j] for r, j in batch]
            total = gpu.enc_flops(toks)
            work = total / cfg.enc_slices
            state["pending_flops"] -= total
            state["pending_tokens"] -= sum(toks)
            state["inflight_flops"], state["inflight_tokens"] = total, sum(toks)
            yield env.timeout(gpu.k_enc)
            for _ in range(cfg.enc_slices):
                while min(state["s_enc"], S - state["dec_sms"]) < gpu.tpc:
                    yield part_changed.wait()
                s_run = min(state["s_enc"], S - state["dec_sms"])
                dt = gpu.enc_time(work, s_run, sum(toks))
                state["held"] = s_run
                state["peak"] = max(state["peak"], s_run + state["dec_sms"])
                state["sm_seconds"] += s_run * dt
                yield env.timeout(dt)
                state["held"] = 0
                slice_done.fire()
                state["inflight_flops"] -= work
            state["busy"] = False
            state["inflight_flops"], state["inflight_tokens"] = 0.0, 0
            for r, j in batch:
                st.encoded[r][j] = True
                if all(st.encoded[r]):
                    st.enc_done[r] = env.now
                    st.prefill_q.append(r)
            dec_wake.fire()

    def decoder():
        while True:
            if not st.running and not st.prefill_q:
                set_enc(S)                     # an idle decoder leaves every SM to the encoder
                yield dec_wake.wait()
                continue
            decodes, prefill, _ = st.build_step(cfg.chunk_tokens, cfg.max_batch)
            shape = st.step_shape(decodes, prefill)
            if cfg.system == "mask":
                s_dec = S                      # unmasked: every SM the encoder's kernel does not hold
            elif static_enc is not None:
                s_dec = S - static_enc
            elif cfg.sis_rule == "cost":
                backlog = max(0.0, state["pending_flops"]) + max(0.0, state["inflight_flops"])
                tokens = min(cfg.enc_budget, state["pending_tokens"] + state["inflight_tokens"])
                s_dec = sis_cost_decoder_sms(gpu, shape, backlog, max(tokens, 1), cfg.mu, cfg.deadline_s)
            else:
                s_dec = sis_decoder_sms(gpu, shape, cfg.eps, state["busy"] or bool(pending))
            if static_enc is None:
                set_enc(S - s_dec)             # the SIS decision: the encoder's next kernels get the rest
            # the step runs layer by layer; each layer's kernels take the SMs of the decision that are
            # free (an encoder kernel launched before the decision keeps its SMs until it ends)
            nbytes, flops = gpu.iter_cost(*shape)
            yield env.timeout(gpu.k_dec)
            if s_dec == S and state["held"] == 0 and static_enc is None:
                # the encoder has nothing pending (SIS gave the decoder the whole GPU): none joins mid-step
                state["dec_sms"] = S
                state["peak"] = max(state["peak"], S)
                yield env.timeout(gpu.kernel_time(S, nbytes, flops))
                state["dec_sms"] = 0
                part_changed.fire()
                st.apply_step(env.now, decodes, prefill, done)
                continue
            for _ in range(gpu.dec_layers):
                while S - state["held"] < gpu.tpc:
                    yield slice_done.wait()
                s_run = min(s_dec, S - state["held"])
                state["dec_sms"] = s_run
                state["peak"] = max(state["peak"], s_run + state["held"])
                yield env.timeout(gpu.kernel_time(s_run, nbytes / gpu.dec_layers, flops / gpu.dec_layers,
                                                  corun=state["held"] > 0))
                state["dec_sms"] = 0
                part_changed.fire()
            st.apply_step(env.now, decodes, prefill, done)

    env.process(_arrivals(env, st, arrive))
    env.process(encoder())
    env.process(decoder())
    env.run(until=simpy.AnyOf(env, [done, env.timeout(cfg.max_sim_s)]))
    res = st.result(env.now, 0.0, 1.0, state["sm_seconds"] / (S * max(env.now, 1e-12)), timeline)
    res.peak_sms = state["peak"]
    return res
