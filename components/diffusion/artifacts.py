"""Sample artifacts logged beside a policy's metrics: a PNG grid (full compute | policy | difference)
and, for clips, an animated GIF. Shared by every diffusion technique."""
from __future__ import annotations

import torch

from components.core.plotting import fig_png, figure


def grid_png(ref: torch.Tensor, x: torch.Tensor, y: torch.Tensor, title: str) -> bytes:
    """Full compute (top), the policy (middle), |difference| on a 0-0.1 scale (bottom; pixels span 2):
    one sample per class. Tensors on any device (drawn from cpu copies)."""
    ref, x, y = ref.cpu(), x.cpu(), y.cpu()
    idx = [int(torch.nonzero(y == k)[0]) for k in torch.unique(y)][:10]
    frame = (lambda t: t[:, t.shape[1] // 2]) if x.dim() == 5 else (lambda t: t)   # clips: middle frame
    r, s = frame(ref[idx]).clamp(-1, 1), frame(x[idx]).clamp(-1, 1)
    fig, axes = figure(1.1 * len(idx), 3.6, ncols=len(idx), nrows=3)
    for j in range(len(idx)):
        for row, img, cmap in ((0, r[j, 0], "gray"), (1, s[j, 0], "gray"), (2, (r[j, 0] - s[j, 0]).abs(), "magma")):
            ax = axes[row, j]
            ax.imshow(img.numpy(), cmap=cmap, vmin=0 if row == 2 else -1, vmax=0.1 if row == 2 else 1)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[0, j].set_title(str(int(y[idx[j]])), fontsize=8)
    axes[0, 0].set_ylabel("full", fontsize=8)
    axes[1, 0].set_ylabel(title, fontsize=8)
    axes[2, 0].set_ylabel("|diff| 0-0.1", fontsize=8)
    return fig_png(fig, dpi=80)


def gif_bytes(ref: torch.Tensor, x: torch.Tensor, y: torch.Tensor, scale: int = 4) -> bytes:
    """Clips as an animated GIF: per class one pair (full | policy), frame by frame (any device)."""
    import io

    from PIL import Image

    ref, x, y = ref.cpu(), x.cpu(), y.cpu()
    idx = [int(torch.nonzero(y == k)[0]) for k in torch.unique(y)][:4]
    pairs = torch.cat([torch.cat([ref[i], torch.ones_like(ref[i][..., :1]), x[i]], dim=-1) for i in idx], dim=-2)
    frames = ((pairs.clamp(-1, 1) + 1) * 127.5).to(torch.uint8)[:, 0].numpy()          # [F, H, W]
    imgs = [Image.fromarray(f).resize((f.shape[1] * scale, f.shape[0] * scale), Image.NEAREST) for f in frames]
    buf = io.BytesIO()
    imgs[0].save(buf, format="GIF", save_all=True, append_images=imgs[1:], duration=150, loop=0)
    return buf.getvalue()
