"""The Gatekeeper loss (arXiv 2502.19335, stage 2).

For a batch of N predictions (examples, or tokens of an LM) with argmax y_hat_i::

    L = alpha * (1/N) sum_{i: y_hat_i == y_i} CE(p_i, y_i)
      + (1 - alpha) * (1/N) sum_{i: y_hat_i != y_i} KL(p_i || U_K)

KL(p || U_K) = sum_k p_k log(K p_k) = log K - H(p): minimising it on mistakes raises their entropy,
so the small model's confidence separates its correct from its incorrect answers. Both sums are
divided by the full N (not by |C| or |W|). The correct/incorrect split is taken from the argmax
and carries no gradient.
"""
import math

import torch
from torch.nn import functional as F

from components.core.errors import require


def kl_to_uniform(logp: torch.Tensor) -> torch.Tensor:
    """KL(p || Uniform_K) per row from log-probabilities (..., K): sum_k p_k (log p_k + log K)."""
    return (logp.exp() * (logp + math.log(logp.shape[-1]))).sum(-1)


def gatekeeper_loss(logits: torch.Tensor, target: torch.Tensor, alpha: float,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """Gatekeeper loss over logits (..., K) and integer targets (...); ``mask`` (...) keeps the
    positions that count (LM padding / prompt tokens out). N = number of kept positions."""
    require(0.0 < alpha < 1.0, "alpha", alpha, "a weight in (0, 1)")
    k = logits.shape[-1]
    logits = logits.reshape(-1, k)
    target = target.reshape(-1)
    if mask is not None:
        keep = mask.reshape(-1).bool()
        logits, target = logits[keep], target[keep]
    n = target.numel()
    if n == 0:
        return logits.sum() * 0.0
    logp = F.log_softmax(logits.float(), dim=-1)
    correct = (logp.detach().argmax(-1) == target)
    ce = -logp.gather(1, target[:, None]).squeeze(1)
    kl = kl_to_uniform(logp)
    l_corr = torch.where(correct, ce, torch.zeros_like(ce)).sum() / n
    l_incorr = torch.where(correct, torch.zeros_like(kl), kl).sum() / n
    return alpha * l_corr + (1.0 - alpha) * l_incorr
