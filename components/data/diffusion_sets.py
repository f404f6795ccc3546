"""Data made here for the diffusion techniques: sklearn's digits upscaled to 16x16 (or any size),
and a synthetic moving-shapes clip set (frames x size x size, 1-2 bouncing shapes of one type;
the type is the class). Pixels in [-1, 1], float32; labels int64.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from components.core.errors import require
from components.data.digits import load_digits_arrays

SHAPES = ("square", "disc", "bar")


def digits_images(size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 digits bilinearly upscaled from 8x8 to ``size`` x ``size``: x [N, 1, size, size]."""
    require(size >= 8, "size", size, "at least 8 pixels")
    x, y = load_digits_arrays()
    img = torch.from_numpy(x).view(-1, 1, 8, 8)
    if size != 8:
        img = F.interpolate(img, size=(size, size), mode="bilinear", align_corners=False)
    return (img.clamp(0, 1) * 2 - 1).numpy().astype(np.float32), y


def _draw(kind: int, cy: float, cx: float, r: float, size: int) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    if SHAPES[kind] == "square":
        return ((np.abs(yy - cy) <= r) & (np.abs(xx - cx) <= r)).astype(np.float32)
    if SHAPES[kind] == "disc":
        return (((yy - cy) ** 2 + (xx - cx) ** 2) <= r * r).astype(np.float32)
    return ((np.abs(yy - cy) <= r * 0.45) & (np.abs(xx - cx) <= r * 1.6)).astype(np.float32)   # bar


def moving_shapes(n: int, frames: int = 8, size: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` clips x [n, frames, 1, size, size]: 1-2 shapes of one type bouncing off the walls."""
    require(n >= 1, "n", n, "a positive number of clips")
    require(frames >= 2, "frames", frames, "at least 2 frames")
    rng = np.random.default_rng(seed)
    out = np.zeros((n, frames, 1, size, size), np.float32)
    y = rng.integers(0, len(SHAPES), n)
    for i in range(n):
        for _ in range(rng.integers(1, 3)):
            r = rng.uniform(0.12, 0.2) * size
            pos = rng.uniform(r + 1, size - r - 1, 2)
            vel = rng.uniform(-1.5, 1.5, 2) * size / 16
            for f in range(frames):
                out[i, f, 0] = np.maximum(out[i, f, 0], _draw(int(y[i]), pos[0], pos[1], r, size))
                pos = pos + vel
                for a in range(2):   # bounce
                    if pos[a] < r or pos[a] > size - r:
                        vel[a] = -vel[a]
                        pos[a] = np.clip(pos[a], r, size - r)
    return out * 2 - 1, y.astype(np.int64)
