"""Multimodal request streams (the sheet's Part A): Poisson arrivals, 1/2/4 images per request,
256-1280 ViT patches per image (64-320 LLM tokens after Qwen2-VL's 2x2 merge), 50-200 text
tokens, lognormal output lengths with mean ~200.

A stream depends only on (seed, rate): every system is evaluated on the very same requests.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Request:
    rid: int
    arrival: float
    vit_tokens: list[int]      # encoder patches per image
    text_tokens: int
    out_tokens: int

    @property
    def image_llm_tokens(self) -> list[int]:
        return [-(-t // 4) for t in self.vit_tokens]

    @property
    def prompt_tokens(self) -> int:
        return sum(self.image_llm_tokens) + self.text_tokens


def stream(seed: int, rate: float, n: int, *, image_counts=(1, 2, 4), image_probs=(0.6, 0.25, 0.15),
           tokens=(256, 1280), text=(50, 200), out_mean: float = 200.0, out_sigma: float = 0.7,
           out_max: int = 1024) -> list[Request]:
    """``n`` requests arriving as a Poisson process of ``rate`` req/s, drawn from (seed, rate) alone."""
    rng = np.random.default_rng([int(seed), int(round(rate * 1000))])
    gaps = rng.exponential(1.0 / rate, size=n)
    arrivals = np.cumsum(gaps) - gaps[0]
    mu = np.log(out_mean) - out_sigma ** 2 / 2
    reqs = []
    for i in range(n):
        k = int(rng.choice(image_counts, p=image_probs))
        vit = [int(v) for v in rng.integers(tokens[0], tokens[1] + 1, size=k)]
        out = int(np.clip(round(rng.lognormal(mu, out_sigma)), 2, out_max))
        reqs.append(Request(i, float(arrivals[i]), vit, int(rng.integers(text[0], text[1] + 1)), out))
    return reqs
