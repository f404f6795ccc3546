"""One model's prefix-cached decoding state for one request, with token accounting.

Mimics vLLM prefix caching for a single sequence: the session keeps the KV cache of the tokens
it has seen; a call with a new prefix reuses the longest common prefix, crops the rest
(``KVCache.crop``) and prefills only the missing tokens. Every call charges a
:class:`~components.serving.cost.Usage` under the model's name: prefill = tokens fed that were
not cached, decode = tokens the model emitted, one call. The last emitted token is fed lazily
by the next call (as vLLM does), so it is charged there as one prefill token.

Operations: :meth:`generate` (greedy or sampled until a stop token), :meth:`next_logits` (the
distribution after a prefix: one scoring decode, used by the judge), :meth:`verify` (greedy
verification of a drafted continuation in one pass, for speculative decoding) and
:meth:`loglik` (mean log-likelihood of a continuation in one pass).
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

from components.core.errors import require
from components.models.gpt import GPT
from components.serving.cost import Usage


def _lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class LMSession:
    """Prefix-cached calls to one model for one request; charges ``usage[name]``."""

    def __init__(self, model: GPT, name: str, usage: Usage | None = None):
        self.model, self.name = model, name
        self.usage = usage if usage is not None else Usage()
        self.context = model.cfg.context
        self.cache = model.new_cache()
        self.ids: list[int] = []
        self._next: torch.Tensor | None = None  # logits after self.ids

    # ------------------------------------------------------------------ internals
    def _feed(self, toks: list[int]) -> torch.Tensor:
        logits = self.model(torch.tensor([toks], dtype=torch.long), cache=self.cache)[0]
        self.ids.extend(toks)
        self._next = logits[-1]
        return logits

    def _reuse(self, prefix: list[int]) -> int:
        """Crop the cache to the reusable part of ``prefix`` (at most len-1); returns that length."""
        require(1 <= len(prefix) <= self.context, "prefix", len(prefix), f"1..{self.context} tokens (model context)")
        keep = min(_lcp(self.ids, prefix), len(prefix) - 1)
        if keep < len(self.ids):
            self.cache.crop(keep)
            del self.ids[keep:]
            self._next = None
        return keep

    def _sync(self, prefix: list[int]) -> tuple[torch.Tensor, int]:
        """Logits after ``prefix`` and the number of tokens prefilled to get them."""
        if self._next is not None and len(self.ids) == len(prefix) and _lcp(self.ids, prefix) == len(prefix):
            return self._next, 0
        keep = self._reuse(prefix)
        self._feed(prefix[keep:])
        return self._next, len(prefix) - keep

    # ------------------------------------------------------------------ calls
    @torch.no_grad()
    def generate(self, prefix: list[int], max_new: int, stop: frozenset[int] | set[int] = frozenset(),
                 temperature: float = 0.0, seed: int | None = None) -> list[int]:
        """Continue ``prefix`` until a token in ``stop`` (kept) or ``max_new`` tokens (context-capped)."""
        max_new = min(max_new, self.context - len(prefix))
        logits, prefill = self._sync(prefix)
        gen = torch.Generator().manual_seed(int(seed)) if temperature > 0 and seed is not None else None
        out: list[int] = []
        while len(out) < max_new:
            if temperature > 0:
                tok = int(torch.multinomial(F.softmax(logits / temperature, -1), 1, generator=gen))
            else:
                tok = int(logits.argmax())
            out.append(tok)
            if tok in stop or len(out) >= max_new:
                break
            logits = self._feed([tok])[-1]
        self.usage.charge(self.name, prefill=prefill, decode=len(out))
        return out

    @torch.no_grad()
    def next_logits(self, prefix: list[int]) -> torch.Tensor:
        """Distribution of the token after ``prefix``: one scoring decode (prefill + 1 token)."""
        logits, prefill = self._sync(prefix)
        self.usage.charge(self.name, prefill=prefill, decode=1)
        return logits.clone()

    @torch.no_grad()
    def verify(self, prefix: list[int], draft: list[int]) -> tuple[int, int]:
        """Greedy verification of ``draft`` after ``prefix`` in one forward pass.

        Returns (accepted, next): the longest prefix of ``draft`` equal to the model's own greedy
        tokens, and the model's greedy token after it (the correction, or the bonus token when all
        were accepted). The cache keeps prefix + accepted tokens. Charged: the fed tokens as
        prefill (one batched pass, like a prefill) and one decode token.
        """
        require(len(prefix) + len(draft) <= self.context, "draft", len(draft),
                f"at most {self.context - len(prefix)} tokens (model context)")
        if not draft:
            logits, prefill = self._sync(prefix)
            self.usage.charge(self.name, prefill=prefill, decode=1)
            return 0, int(logits.argmax())
        keep = self._reuse(prefix)
        fed = prefix[keep:] + draft
        logits = self._feed(fed)
        preds = logits[len(prefix) - 1 - keep:]          # preds[i] predicts draft[i]; preds[-1] the bonus
        greedy = preds.argmax(-1).tolist()
        a = 0
        while a < len(draft) and greedy[a] == draft[a]:
            a += 1
        if a < len(draft):
            self.cache.crop(len(prefix) + a)
            del self.ids[len(prefix) + a:]
        self._next = preds[a]
        self.usage.charge(self.name, prefill=len(fed), decode=1)
        return a, int(greedy[a])

    @torch.no_grad()
    def loglik(self, prefix: list[int], cont: list[int]) -> float:
        """Mean log-probability of ``cont`` after ``prefix``, one parallel pass (prefill only)."""
        require(len(cont) >= 1 and len(prefix) + len(cont) <= self.context, "continuation", len(cont),
                f"1..{self.context - len(prefix)} tokens")
        keep = self._reuse(prefix)
        fed = prefix[keep:] + cont
        logits = self._feed(fed)
        preds = logits[len(prefix) - 1 - keep:-1]
        lp = F.log_softmax(preds, -1).gather(1, torch.tensor(cont)[:, None]).mean()
        self.usage.charge(self.name, prefill=len(fed), decode=0)
        return float(lp)
