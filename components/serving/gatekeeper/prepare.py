"""Prepare step ``gatekeeper_digits``, built per seed: the corrupted load_digits split, the
stage-1 (CE) small MLP and the large CNN, with the large model's validation/test predictions.

Kept apart from the techniques so editing them does not invalidate the cached models (the
cache key covers this module and what it imports: :mod:`.digits`, :mod:`.loss`).
"""
from dataclasses import dataclass

import torch

from components.core.errors import require
from components.core.registry import prepare_step
from components.serving.gatekeeper import digits as D


@dataclass
class DigitsCascadeParams:
    occlusion: int = 2              # side of the random occluding square (pixels)
    noise_sigma: float = 0.2        # Gaussian pixel noise
    label_noise: float = 0.0        # symmetric label flips on the train split
    small_hidden: int = 16          # small MLP 64-h-10
    small_epochs: int = 30          # stage 1 (CE)
    small_lr: float = 3e-3
    large_epochs: int = 40          # large CNN, fresh corruptions every epoch
    large_lr: float = 2e-3
    batch: int = 64

    def check(self):
        require(0 <= self.occlusion <= 8, "occlusion", self.occlusion, "a square size in [0, 8]")
        require(self.noise_sigma >= 0, "noise_sigma", self.noise_sigma, "a non-negative standard deviation")
        require(0 <= self.label_noise < 0.9, "label_noise", self.label_noise, "a fraction in [0, 0.9)")
        require(self.small_hidden >= 1, "small_hidden", self.small_hidden, "a positive width")
        require(self.small_epochs >= 1 and self.large_epochs >= 1, "small_epochs", self.small_epochs, "positive epochs")
        require(self.small_lr > 0 and self.large_lr > 0, "small_lr", self.small_lr, "positive learning rates")
        require(self.batch >= 1, "batch", self.batch, "a positive batch size")


@prepare_step("gatekeeper_digits", params=DigitsCascadeParams, seeded=True,
              summary="Corrupted load_digits (occlusion + noise) for one seed, 60/20/20 split; stage-1 CE small MLP "
                      "and large CNN trained, large predictions on val/test cached.")
def prepare_digits_cascade(p: DigitsCascadeParams, ctx) -> dict:
    torch.set_num_threads(1)
    seed = ctx.seed
    sp = D.corrupted_digits(seed, p.occlusion, p.noise_sigma, p.label_noise)
    torch.manual_seed(seed)
    small = D.SmallMLP(p.small_hidden)
    D.train(small, sp.x_train, sp.y_train, p.small_epochs, p.small_lr, p.batch, seed)
    ctx.progress(1, 2)
    # the large CNN's initial weights from the seed alone, not from what the small model drew before it: two
    # entries that differ only in the small model (today's setting and *_overconf) share one large model
    torch.manual_seed(seed)
    large = D.LargeCNN()
    D.train(large, sp.x_train_clean, sp.y_train, p.large_epochs, p.large_lr, p.batch, seed,
            augment=lambda x, rng: D.corrupt(x, rng, p.occlusion, p.noise_sigma))
    ctx.progress(2, 2)
    return {"seed": seed, "split": sp, "small_hidden": p.small_hidden,
            "small_state": small.state_dict(), "large_state": large.state_dict(),
            "large_val_pred": D.logits_of(large, sp.x_val).argmax(1),
            "large_test_pred": D.logits_of(large, sp.x_test).argmax(1),
            "n_params": {"small": D.n_params(small), "large": D.n_params(large)},
            "params": {"occlusion": p.occlusion, "noise_sigma": p.noise_sigma, "label_noise": p.label_noise}}
