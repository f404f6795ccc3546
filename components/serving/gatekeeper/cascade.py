"""One Gatekeeper run on the digits cascade, per seed: stage-2 arms and their scoring.

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

    def check(self):
        require(self.epochs >= 1, "epochs", self.epochs, "a positive number of stage-2 epochs")
        require(self.lr > 0, "lr", self.lr, "a positive learning rate")
        require(self.batch >= 1, "batch", self.batch, "a positive batch size")
        require(self.confidence in ("max_prob", "neg_entropy"), "confidence", self.confidence, "max_prob or neg_entropy")
        require(all(0 < r < 1 for r in self.ratios) and self.ratios, "ratios", self.ratios, "deferral ratios in (0, 1)")


def small_model(seed_prep: dict, hidden: int) -> D.SmallMLP:
    m = D.SmallMLP(hidden)
    m.load_state_dict(seed_prep["small_state"])
    return m


def run_arm(seed_prep: dict, method: str, s2: Stage2, alpha: float = 0.5, hidden: int = 16
            ) -> tuple[D.SmallMLP, float, np.ndarray, np.ndarray]:
    """Stage 2 for one arm on one seed. Returns (model, temperature, probs_val, probs_test)."""
    require(method in METHODS, "method", method, "one of " + ", ".join(METHODS))
    torch.manual_seed(seed_prep["seed"])
    model = small_model(seed_prep, hidden)
    sp = seed_prep["split"]
    if method != "untuned":
        D.train(model, sp.x_train, sp.y_train, s2.epochs, s2.lr, s2.batch, seed=1000 + seed_prep["seed"],
                loss="gatekeeper" if method == "gatekeeper" else "ce", alpha=alpha)
    lv, lt = D.logits_of(model, sp.x_val), D.logits_of(model, sp.x_test)
    t = D.fit_temperature(lv, sp.y_val) if method == "temperature" else 1.0
    return model, t, D.softmax(lv, t), D.softmax(lt, t)


def score(seed_prep: dict, probs_val: np.ndarray, probs_test: np.ndarray, s2: Stage2,
          split: str = "test") -> CascadeReport:
    """Cascade figures on the test split (tau from validation), or on validation itself."""
    sp = seed_prep["split"]
    if split == "val":
        conf = D.confidence(probs_val, s2.confidence)
        return evaluate_cascade(conf, conf, probs_val.argmax(1) == sp.y_val, seed_prep["large_val_pred"] == sp.y_val,
                                tuple(s2.ratios))
    return evaluate_cascade(D.confidence(probs_val, s2.confidence), D.confidence(probs_test, s2.confidence),
                            probs_test.argmax(1) == sp.y_test, seed_prep["large_test_pred"] == sp.y_test, tuple(s2.ratios))


def model_costs(prep: dict) -> dict[str, TokenCost]:
    """Per-call cost of each classifier: one forward pass priced like one decoded token."""
    return {"small": TokenCost.from_params(prep["n_params"]["small"]),
            "large": TokenCost.from_params(prep["n_params"]["large"])}


def arm_metrics(prep: dict, seed_prep: dict, probs_val: np.ndarray, probs_test: np.ndarray, s2: Stage2
                ) -> tuple[dict, CascadeReport]:
    """Flat metrics (cost in simulated seconds per item and relative to large-only) and the report."""
    rep = score(seed_prep, probs_val, probs_test, s2)
    c = model_costs(prep)
    c_s, c_l = c["small"].seconds(decode=1), c["large"].seconds(decode=1)
    m = rep.metrics(c_s, c_l)
    for k in [k for k in m if k.startswith("cost_")]:
        m[k.replace("cost_", "cost_rel_")] = m[k] / c_l
    return m, rep


def seed_metrics(prep: dict, seed_prep: dict, method: str, s2: Stage2, alpha: float = 0.5
                 ) -> tuple[dict, CascadeReport, tuple[np.ndarray, np.ndarray]]:
    """Run one arm on one seed: (flat metrics incl. temperature, report, (probs_val, probs_test))."""
    _, t, pv, pt = run_arm(seed_prep, method, s2, alpha, prep["small_hidden"])
    m, rep = arm_metrics(prep, seed_prep, pv, pt, s2)
    m["temperature"] = t
    return m, rep, (pv, pt)


def mean_se(rows: list[dict]) -> dict[str, float]:
    """Mean over seeds of every metric, plus ``<name>_se`` (standard error; 0 for one seed)."""
    out = {}
    for k in rows[0]:
        v = np.array([r[k] for r in rows], float)
        v = v[np.isfinite(v)]
        out[k] = float(v.mean()) if len(v) else float("nan")
        out[f"{k}_se"] = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0
    return out


def paired(a: list[float], b: list[float]) -> tuple[float, float]:
    """Mean and standard error of the per-seed differences a - b."""
    d = np.array(a, float) - np.array(b, float)
    d = d[np.isfinite(d)]
    if not len(d):
        return float("nan"), float("nan")
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")


def mean_curve(reports: list[CascadeReport], points: int = 101) -> tuple[list[float], dict[str, list[float]]]:
    """Deferral curves averaged over seeds on a common r grid."""
    grid = np.linspace(0, 1, points)
    curves = {}
    for k in ("real", "random", "ideal"):
        curves[k] = np.mean([np.interp(grid, r.curves["r"], r.curves[k]) for r in reports], axis=0).tolist()
    return grid.tolist(), curves

