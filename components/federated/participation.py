"""Participation patterns as data: how likely each client is to show up in a round.

A pattern is a mapping (from the experiment YAML) such as ``{pattern: linear, lo: 0.1, hi: 0.9}``.
``PATTERNS`` names each kind with its defaults; :func:`client_probs` turns one into a probability
per client (assigned to clients in a seeded random order, so p is independent of the data split)
and :func:`sample_round` draws one round's participants: independent Bernoulli(p_i) draws, with
at least one participant guaranteed (if nobody shows up, one client is drawn with weight p_i).
"""
from __future__ import annotations

import numpy as np

from components.core.errors import ConfigError, require

PATTERNS: dict[str, dict] = {
    # evenly spaced from lo to hi (PHP-FL's "linear" pattern)
    "linear": {"lo": 0.1, "hi": 0.9},
    # two groups: a share `frac_high` of clients at `high`, the rest at `low`
    "bimodal": {"high": 0.8, "low": 0.1, "frac_high": 0.5},
    # p_i = clip(top / i^power, floor, top) for i = 1..n (a few frequent, many rare clients)
    "long_tail": {"top": 0.9, "power": 0.7, "floor": 0.05},
    # every client alike: the control without unequal participation
    "uniform": {"p": 0.5},
    # explicit probabilities, one per client
    "custom": {"probs": None},
}


def check_pattern(cfg: dict, n_clients: int, key: str = "participation") -> dict:
    """Validated copy of a pattern mapping with defaults filled in; raises ConfigError."""
    require(isinstance(cfg, dict) and "pattern" in cfg, key, cfg, "a mapping with 'pattern' (" + ", ".join(PATTERNS) + ")")
    name = cfg["pattern"]
    require(name in PATTERNS, f"{key}.pattern", name, "one of " + ", ".join(PATTERNS))
    extra = sorted(set(cfg) - {"pattern"} - set(PATTERNS[name]))
    if extra:
        raise ConfigError(f"{key}.{extra[0]}", cfg[extra[0]], f"unknown key for pattern {name}; allowed: " + ", ".join(PATTERNS[name]))
    out = {**PATTERNS[name], **cfg}
    for k, v in out.items():
        if k in ("pattern", "probs", "power", "frac_high"):
            continue
        require(isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0, f"{key}.{k}", v,
                "a probability in [0, 1]")
    if name == "linear":
        require(out["lo"] <= out["hi"], f"{key}.lo", out["lo"], f"<= hi ({out['hi']})")
    if name == "bimodal":
        require(0.0 <= out["frac_high"] <= 1.0, f"{key}.frac_high", out["frac_high"], "a fraction in [0, 1]")
    if name == "long_tail":
        require(isinstance(out["power"], (int, float)) and out["power"] >= 0, f"{key}.power", out["power"], "a non-negative exponent")
        require(out["floor"] <= out["top"], f"{key}.floor", out["floor"], f"<= top ({out['top']})")
    if name == "custom":
        probs = out["probs"]
        require(isinstance(probs, (list, tuple)) and len(probs) == n_clients, f"{key}.probs", probs,
                f"a list of {n_clients} probabilities (one per client)")
        for i, v in enumerate(probs):
            require(isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0, f"{key}.probs[{i}]", v,
                    "a probability in [0, 1]")
        require(max(probs) > 0, f"{key}.probs", probs, "at least one positive probability")
    return out


def pattern_levels(cfg: dict, n_clients: int) -> np.ndarray:
    """The probabilities of a pattern, in the pattern's own order (before assignment to clients)."""
    c = check_pattern(cfg, n_clients)
    name = c["pattern"]
    if name == "linear":
        return np.linspace(c["lo"], c["hi"], n_clients)
    if name == "bimodal":
        n_high = int(round(c["frac_high"] * n_clients))
        return np.array([c["high"]] * n_high + [c["low"]] * (n_clients - n_high), dtype=float)
    if name == "long_tail":
        i = np.arange(1, n_clients + 1, dtype=float)
        return np.clip(c["top"] / i ** c["power"], c["floor"], c["top"])
    if name == "uniform":
        return np.full(n_clients, float(c["p"]))
    return np.asarray(c["probs"], dtype=float)


def client_probs(cfg: dict, n_clients: int, rng: np.random.Generator) -> np.ndarray:
    """Participation probability of each client: the pattern's levels in a seeded random order
    (custom lists keep their order: they name clients)."""
    levels = pattern_levels(cfg, n_clients)
    if cfg["pattern"] == "custom":
        return levels
    return levels[rng.permutation(n_clients)]


def sample_round(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices of this round's participants: Bernoulli(p_i) each, at least one."""
    picked = np.flatnonzero(rng.random(len(probs)) < probs)
    if picked.size == 0:
        picked = np.array([rng.choice(len(probs), p=probs / probs.sum())])
    return picked
