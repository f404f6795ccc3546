"""Quality of accelerated samples against the full-compute output from the same noise:
PSNR and SSIM (torchmetrics' implementations on pixels mapped from [-1, 1] to [0, 1]: SSIM's
luminance term is not shift-invariant, and on [-1, 1] an inverted image scores high), and the
accuracy of the prepared classifier on the samples (its class vs the conditioning class).

PSNR is capped at ``PSNR_CAP`` dB: identical outputs (a policy that skipped nothing) would be
infinite, which no mean or table can hold.
"""
from __future__ import annotations

import torch
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure

PSNR_CAP = 100.0
DATA_RANGE = 1.0


def _images(x: torch.Tensor) -> torch.Tensor:
    """[B, (F,) C, H, W] in [-1, 1] -> [B*F, C, H, W] in [0, 1]."""
    x = (x.clamp(-1, 1).float() + 1) / 2
    return x.flatten(0, 1) if x.dim() == 5 else x


def psnr_db(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per-sample PSNR (dB) of x against ref, capped at PSNR_CAP (clips: over all their frames)."""
    n = x.shape[0]
    a, b = _images(x).reshape(n, -1, *x.shape[-2:]), _images(ref).reshape(n, -1, *x.shape[-2:])
    p = peak_signal_noise_ratio(a, b, data_range=DATA_RANGE, reduction="none", dim=(1, 2, 3))
    return torch.nan_to_num(p, posinf=PSNR_CAP).clamp(max=PSNR_CAP)


def ssim(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per-sample SSIM (Gaussian window 7, sigma 1.5: the images are 16-24 px); clips: mean over frames."""
    n = x.shape[0]
    s = structural_similarity_index_measure(_images(x), _images(ref), data_range=DATA_RANGE,
                                            kernel_size=7, sigma=1.5, reduction="none")
    return s.view(n, -1).mean(1)


@torch.no_grad()
def class_accuracy(classifier: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Share of samples the classifier assigns to their conditioning class."""
    return float((classifier(x.clamp(-1, 1)).argmax(1) == y).float().mean())


def summary(x: torch.Tensor, ref: torch.Tensor, y: torch.Tensor, classifier: torch.nn.Module) -> dict:
    return {"psnr_db": float(psnr_db(x, ref).mean()), "ssim": float(ssim(x, ref).mean()),
            "class_acc": class_accuracy(classifier, x, y), "ref_class_acc": class_accuracy(classifier, ref, y)}
