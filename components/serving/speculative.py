"""Token-level speculative decoding (Leviathan et al. 2023; vLLM "draft model"), greedy.

The small model drafts ``gamma`` tokens; the base model checks them in one forward pass
(:meth:`LMSession.verify`), keeps the longest prefix equal to its own greedy choices and adds
its own next token. The output is therefore *exactly* the base model's greedy output; only the
cost changes: a round costs gamma small decodes plus one base pass (gamma tokens batched like a
prefill, one decode) and yields accepted+1 tokens. It is SpecReason's baseline and, stacked,
the way SpecReason's base model writes the steps it regenerates.

Works with any pair of clients that have ``generate(prefix, max_new, stop, temperature, seed)``
and ``verify(prefix, draft)`` (local :class:`LMSession` or the Serve deployments' clients).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SDStats:
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0

    def add(self, other: "SDStats") -> "SDStats":
        self.rounds += other.rounds
        self.drafted += other.drafted
        self.accepted += other.accepted
        return self

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")


def speculative_generate(draft, target, prefix: list[int], max_new: int, stop=frozenset(), gamma: int = 4,
                         context: int | None = None, draft_temperature: float = 0.0,
                         seed: int | None = None) -> tuple[list[int], SDStats]:
    """``target``'s greedy continuation of ``prefix`` (until a ``stop`` token, kept, or ``max_new``).

    ``context`` caps the total length like ``GPT.generate`` does (default: no cap beyond max_new).
    """
    if context is not None:
        max_new = min(max_new, context - len(prefix))
    out: list[int] = []
    st = SDStats()
    while len(out) < max_new:
        cur = prefix + out
        room = max_new - len(out) - 1          # the target adds one token of its own per round
        if context is not None:
            room = min(room, context - len(cur))
        g = max(0, min(gamma, room))
        d = draft.generate(cur, g, stop, draft_temperature,
                           None if seed is None else seed * 7919 + st.rounds) if g > 0 else []
        a, nxt = target.verify(cur, d)
        st.rounds += 1
        st.drafted += len(d)
        st.accepted += a
        new = d[:a] + [nxt]
        for t in new:
            out.append(t)
            if t in stop or len(out) >= max_new:
                return out, st
    return out, st
