"""Task A of the Gatekeeper sheet: corrupted load_digits, a small MLP and a large CNN.

Corruption (fixed per item, from the seed): one random k x k occlusion (pixels set to 0) and
additive Gaussian pixel noise, clipped to [0, 1]; optional symmetric label noise on the TRAIN
split only. Split 60/20/20 (train / validation / test), stratified by nothing (random).

Training is plain Adam on mini-batches with a seeded batch order; stage 2 (Gatekeeper or
continued CE) restarts Adam from the stage-1 weights with the same batch schedule, so the two
stage-2 arms differ only in their loss.
"""
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from components.core.errors import require
from components.data.digits import load_digits_arrays
from components.serving.gatekeeper.loss import gatekeeper_loss

N_CLASSES = 10


@dataclass
class Split:
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_train_clean: np.ndarray        # before corruption: fresh corruptions augment the large model


def corrupt(x: np.ndarray, rng: np.random.Generator, occlusion: int, noise_sigma: float) -> np.ndarray:
    """One random occlusion square (set to 0) per image, then Gaussian noise, clipped to [0, 1]."""
    x = x.reshape(-1, 8, 8).copy()
    if occlusion:
        rc = rng.integers(0, 8 - occlusion + 1, size=(len(x), 2))
        for i, (r, c) in enumerate(rc):
            x[i, r:r + occlusion, c:c + occlusion] = 0.0
    return np.clip(x + rng.normal(0.0, noise_sigma, x.shape), 0.0, 1.0).astype(np.float32).reshape(-1, 64)


def corrupted_digits(seed: int, occlusion: int = 3, noise_sigma: float = 0.3, label_noise: float = 0.0,
                     fractions: tuple[float, float] = (0.6, 0.2)) -> Split:
    require(0 <= occlusion <= 8, "occlusion", occlusion, "a square size in [0, 8] pixels")
    require(noise_sigma >= 0, "noise_sigma", noise_sigma, "a non-negative standard deviation")
    require(0 <= label_noise < 0.9, "label_noise", label_noise, "a fraction in [0, 0.9)")
    x, y = load_digits_arrays()
    rng = np.random.default_rng(seed)
    clean = x
    x = corrupt(x, rng, occlusion, noise_sigma)
    perm = rng.permutation(len(x))
    n_tr, n_va = int(fractions[0] * len(x)), int(fractions[1] * len(x))
    tr, va, te = perm[:n_tr], perm[n_tr:n_tr + n_va], perm[n_tr + n_va:]
    y_tr = y[tr].copy()
    if label_noise > 0:
        flip = rng.random(len(tr)) < label_noise
        y_tr[flip] = (y_tr[flip] + rng.integers(1, N_CLASSES, flip.sum())) % N_CLASSES
    return Split(x[tr], y_tr, x[va], y[va], x[te], y[te], clean[tr])


class SmallMLP(nn.Module):
    """64 - hidden - 10 MLP (hidden=16: 1,210 parameters)."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, N_CLASSES))

    def forward(self, x):
        return self.net(x)


class LargeCNN(nn.Module):
    """conv 32 -> conv 64 -> 2x2 max-pool -> fc 128 -> 10 on the 8x8 image (~152k parameters)."""

    def __init__(self, c1: int = 32, c2: int = 64, fc: int = 128):
        super().__init__()
        self.c1 = nn.Conv2d(1, c1, 3, padding=1)
        self.c2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.fc = nn.Linear(c2 * 16, fc)
        self.out = nn.Linear(fc, N_CLASSES)

    def forward(self, x):
        z = F.relu(self.c1(x.view(-1, 1, 8, 8)))
        z = F.max_pool2d(F.relu(self.c2(z)), 2).flatten(1)
        return self.out(F.relu(self.fc(z)))


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def train(model: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int, lr: float, batch: int, seed: int,
          loss: str = "ce", alpha: float = 0.5, weight_decay: float = 0.0, augment=None) -> list[float]:
    """Mini-batch Adam for ``epochs``; ``loss`` is "ce" or "gatekeeper" (with ``alpha``).
    ``augment(x, rng)`` (optional) redraws the inputs every epoch. Returns the mean loss per
    epoch. Deterministic given ``seed`` (batch order, augmentation)."""
    require(loss in ("ce", "gatekeeper"), "loss", loss, "ce or gatekeeper")
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    xt, yt = torch.tensor(x), torch.tensor(y)  # copies: Ray hands prepared arrays over read-only
    g = torch.Generator().manual_seed(seed)
    model.train()
    history = []
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        if augment is not None:
            xt = torch.from_numpy(augment(x, rng))
        perm = torch.randperm(len(xt), generator=g)
        tot = 0.0
        for i in range(0, len(xt), batch):
            idx = perm[i:i + batch]
            logits = model(xt[idx])
            l = F.cross_entropy(logits, yt[idx]) if loss == "ce" else gatekeeper_loss(logits, yt[idx], alpha)
            opt.zero_grad()
            l.backward()
            opt.step()
            tot += l.item() * len(idx)
        history.append(tot / len(xt))
    model.eval()
    return history


@torch.no_grad()
def logits_of(model: nn.Module, x: np.ndarray) -> np.ndarray:
    model.eval()
    return model(torch.tensor(x)).numpy()  # a copy: ``x`` may be a read-only array from Ray


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    z = logits / temperature
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def fit_temperature(logits_val: np.ndarray, y_val: np.ndarray) -> float:
    """Temperature scaling (Guo et al. 2017): T minimising validation NLL, on a log grid then refined."""
    def nll(t):
        p = softmax(logits_val, t)
        return -np.log(np.maximum(p[np.arange(len(y_val)), y_val], 1e-12)).mean()

    grid = np.geomspace(0.05, 20.0, 121)
    best = grid[int(np.argmin([nll(t) for t in grid]))]
    fine = np.geomspace(best / 1.08, best * 1.08, 41)
    return float(fine[int(np.argmin([nll(t) for t in fine]))])


def confidence(probs: np.ndarray, kind: str = "max_prob") -> np.ndarray:
    """g(x): max softmax probability, or negative entropy."""
    if kind == "max_prob":
        return probs.max(-1)
    if kind == "neg_entropy":
        return (probs * np.log(np.maximum(probs, 1e-12))).sum(-1)
    raise ValueError(f"confidence kind {kind!r}: max_prob or neg_entropy")
