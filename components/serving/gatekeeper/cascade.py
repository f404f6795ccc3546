"""One Gatekeeper arm on the digits cascade of one seed (prepared by :mod:`.prepare`) and its scoring.

Shared by the techniques (``gatekeeper``, ``cascade_baseline``, ``gatekeeper_alpha_sweep``,
``gatekeeper_served``) so every arm of a comparison is the same code with a different loss:

- ``untuned``       the stage-1 CE model as is (max-softmax deferral)
- ``ce_continued``  stage 2 with plain CE for the same extra epochs (the fair control)
- ``temperature``   ``ce_continued`` + temperature scaling fitted on validation NLL
- ``gatekeeper``    stage 2 with the Gatekeeper loss at ``alpha``
"""
from dataclasses import dataclass, field

import numpy as np
import torch

from components.core.errors import require
from components.serving.cost import TokenCost
from components.serving.gatekeeper import digits as D
from components.serving.gatekeeper.metrics import CascadeReport, evaluate_cascade

METHODS = ("untuned", "ce_continued", "temperature", "gatekeeper")


@dataclass
class Stage2:
    """Stage-2 schedule and deferral settings shared by every arm."""

    epochs: int = 10
    lr: float = 3e-3
    batch: int = 64
    confidence: str = "max_prob"          # max_prob | neg_entropy
    ratios: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.3])
    fresh_noise: bool = False             # stage 2 on a fresh corruption of the clean training images every
                                          # epoch (the same draws for every arm), not on the fixed corrupted
                                          # split stage 1 saw: a stage-1 model that fits its training set makes
                                          # no mistakes there for Gatekeeper's L_incorr to act on

    def check(self):
        require(self.epochs >= 1, "epochs", self.epochs, "a positive number of stage-2 epochs")
        require(self.lr > 0, "lr", self.lr, "a positive learning rate")
        require(self.batch >= 1, "batch", self.batch, "a positive batch size")
        require(self.confidence in ("max_prob", "neg_entropy"), "confidence", self.confidence, "max_prob or neg_entropy")
        require(all(0 < r < 1 for r in self.ratios) and self.ratios, "ratios", self.ratios, "deferral ratios in (0, 1)")


def small_model(prep: dict) -> D.SmallMLP:
    m = D.SmallMLP(prep["small_hidden"])
    m.load_state_dict(prep["small_state"])
    return m


def run_arm(prep: dict, method: str, s2: Stage2, alpha: float = 0.5
            ) -> tuple[D.SmallMLP, float, np.ndarray, np.ndarray]:
    """Stage 2 for one arm on the prepared seed. Returns (model, temperature, probs_val, probs_test)."""
    require(method in METHODS, "method", method, "one of " + ", ".join(METHODS))
    torch.manual_seed(prep["seed"])
    model = small_model(prep)
    sp = prep["split"]
    if method != "untuned":
        x, augment = sp.x_train, None
        if s2.fresh_noise:
            occ, sigma = prep["params"]["occlusion"], prep["params"]["noise_sigma"]
            x, augment = sp.x_train_clean, (lambda xc, rng: D.corrupt(xc, rng, occ, sigma))
        D.train(model, x, sp.y_train, s2.epochs, s2.lr, s2.batch, seed=1000 + prep["seed"],
                loss="gatekeeper" if method == "gatekeeper" else "ce", alpha=alpha, augment=augment)
    lv, lt = D.logits_of(model, sp.x_val), D.logits_of(model, sp.x_test)
    t = D.fit_temperature(lv, sp.y_val) if method == "temperature" else 1.0
    return model, t, D.softmax(lv, t), D.softmax(lt, t)


def score(prep: dict, probs_val: np.ndarray, probs_test: np.ndarray, s2: Stage2,
          split: str = "test") -> CascadeReport:
    """Cascade figures on the test split (tau from validation), or on validation itself."""
    sp = prep["split"]
    if split == "val":
        conf = D.confidence(probs_val, s2.confidence)
        return evaluate_cascade(conf, conf, probs_val.argmax(1) == sp.y_val, prep["large_val_pred"] == sp.y_val,
                                tuple(s2.ratios), calib_test=probs_val.max(1))
    return evaluate_cascade(D.confidence(probs_val, s2.confidence), D.confidence(probs_test, s2.confidence),
                            probs_test.argmax(1) == sp.y_test, prep["large_test_pred"] == sp.y_test, tuple(s2.ratios),
                            calib_test=probs_test.max(1))


def model_costs(prep: dict) -> dict[str, TokenCost]:
    """Per-call cost of each classifier: one forward pass priced like one decoded token."""
    return {"small": TokenCost.from_params(prep["n_params"]["small"]),
            "large": TokenCost.from_params(prep["n_params"]["large"])}


def arm_metrics(prep: dict, probs_val: np.ndarray, probs_test: np.ndarray, s2: Stage2
                ) -> tuple[dict, CascadeReport]:
    """Flat metrics (cost in simulated seconds per item and relative to large-only) and the report."""
    rep = score(prep, probs_val, probs_test, s2)
    c = model_costs(prep)
    c_s, c_l = c["small"].seconds(decode=1), c["large"].seconds(decode=1)
    m = rep.metrics(c_s, c_l)
    for k in [k for k in m if k.startswith("cost_")]:
        m[k.replace("cost_", "cost_rel_")] = m[k] / c_l
    return m, rep


def evaluate_arm(prep: dict, method: str, s2: Stage2, alpha: float = 0.5
                 ) -> tuple[dict, CascadeReport, tuple[np.ndarray, np.ndarray]]:
    """Run one arm: (flat metrics incl. temperature, report, (probs_val, probs_test))."""
    _, t, pv, pt = run_arm(prep, method, s2, alpha)
    m, rep = arm_metrics(prep, pv, pt, s2)
    m["temperature"] = t
    return m, rep, (pv, pt)
