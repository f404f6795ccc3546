"""Tiny torch models for 8x8 load_digits: three heterogeneous private architectures and the
small auxiliary model that every client shares in model-heterogeneous federated learning.

Every model is ``body`` (input -> embedding) followed by ``head`` (embedding -> logits), so
prototype methods (FedProto) can read the embedding. The private models share the embedding
width ``emb_dim`` (FedProto averages class prototypes across clients); their bodies differ in
depth, width and kind (MLP vs CNN), which is the model heterogeneity the methods must bridge.
"""
from __future__ import annotations

import torch
from torch import nn

PRIVATE_ARCHS = ("mlp_small", "mlp_deep", "cnn")
N_FEATURES = 64        # 8x8 pixels
N_CLASSES = 10


class SmallNet(nn.Module):
    """body -> embedding -> head; ``forward`` returns logits, ``embed`` the embedding."""

    def __init__(self, body: nn.Module, emb_dim: int, n_classes: int = N_CLASSES, name: str = ""):
        super().__init__()
        self.body, self.head, self.name = body, nn.Linear(emb_dim, n_classes), name

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class _ConvBody(nn.Module):
    """8 3x3 filters on the 8x8 image, 2x2 max-pool, then a linear map to the embedding."""

    def __init__(self, emb_dim: int, filters: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(1, filters, 3, padding=1)
        self.fc = nn.Linear(filters * 16, emb_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.relu(self.conv(x.view(-1, 1, 8, 8)))
        z = torch.max_pool2d(z, 2).flatten(1)
        return torch.relu(self.fc(z))


def make_private(arch: str, emb_dim: int = 32, n_classes: int = N_CLASSES) -> SmallNet:
    """One of the heterogeneous private models: mlp_small (64-32|10), mlp_deep (64-128-64-32|10),
    cnn (conv 8x3x3, pool, 128-32|10). ``|`` marks the embedding the head reads."""
    if arch == "mlp_small":
        body = nn.Sequential(nn.Linear(N_FEATURES, emb_dim), nn.ReLU())
    elif arch == "mlp_deep":
        body = nn.Sequential(nn.Linear(N_FEATURES, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                             nn.Linear(64, emb_dim), nn.ReLU())
    elif arch == "cnn":
        body = _ConvBody(emb_dim)
    else:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(PRIVATE_ARCHS)}")
    return SmallNet(body, emb_dim, n_classes, arch)


def make_aux(hidden: int = 16, n_classes: int = N_CLASSES) -> SmallNet:
    """The small homogeneous auxiliary model (64-16|10): the only model that is aggregated in
    FML and PHP-FL. Kept much smaller than the private models so it cannot replace them."""
    return SmallNet(nn.Sequential(nn.Linear(N_FEATURES, hidden), nn.ReLU()), hidden, n_classes, "aux")


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
