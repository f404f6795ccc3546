"""Flavours of an experiment: ``full`` (the board), ``debug`` (the tiny one tests run) and ``paper`` (the
papers' sizes, for GPU nodes; issue "Run where researchers run: GPUs").

A run picks one with the root key ``flavour`` (``debug=true`` is the short form of ``flavour=debug``).
The ``debug:`` block and the ``paper:`` block's ``set`` are dotted overrides that
:func:`pipelines.experiment.apply_debug` applies; the ``paper:`` block also states its ``estimate``
(FLOPs, wall minutes on its GPUs at :data:`PAPER_SUSTAINED_FLOPS` each, GPU memory, the count in words).
"""
from __future__ import annotations

from typing import Any

from components.core.errors import ConfigError, require

FLAVOURS = ("full", "debug", "paper")
# what the paper flavour's stated GPU time assumes: sustained fp32 (no TF32) on one H100 SXM, about a third of
# its 67 TFLOP/s fp32 peak (small kernels, no fusion); ``minutes`` (wall, on ``gpus`` GPUs) = flops / (gpus x
# this) / 60, which tests check
PAPER_SUSTAINED_FLOPS = 22e12
_ESTIMATE_KEYS = {"flops", "minutes", "memory_gb", "basis"}      # and optionally gpus (default 1)


def flavour_overrides(flavour: str) -> list[str]:
    """The command-line overrides that select a flavour (what reproduce and the board pass on)."""
    require(flavour in FLAVOURS, "flavour", flavour, "one of " + ", ".join(FLAVOURS))
    return {"full": [], "debug": ["debug=true"], "paper": ["flavour=paper"]}[flavour]


def flavour_of(cfg: dict) -> str:
    """The run's flavour from the root keys ``flavour`` (full | debug | paper) and ``debug``
    (``debug=true`` is ``flavour=debug``, kept as its short form); ConfigError on a bad pair."""
    flavour, debug = cfg.get("flavour") or "full", cfg.get("debug", False)
    require(flavour in FLAVOURS, "flavour", flavour, "one of " + ", ".join(FLAVOURS))
    require(isinstance(debug, bool), "debug", debug, "true or false")
    if debug and flavour == "paper":
        raise ConfigError("debug", debug, f"false with flavour={flavour} (a run has one flavour)")
    return "debug" if debug else flavour


def normalise_flavour(cfg: dict) -> dict:
    """Write the flavour into both root keys (``flavour``, and ``debug`` true exactly for debug), so
    code reading either agrees."""
    cfg["flavour"] = flavour_of(cfg)
    cfg["debug"] = cfg["flavour"] == "debug"
    return cfg


def flavour_block(exp: dict, flavour: str) -> dict:
    """The dotted overrides a flavour applies: the ``debug`` block, the ``paper`` block's ``set``."""
    if flavour == "debug":
        block = exp.get("debug") or {}
        require(isinstance(block, dict), "experiment.debug", block, "a mapping: dotted.key -> value")
        return block
    if flavour == "paper":
        paper = exp.get("paper")
        require(isinstance(paper, dict), "flavour", "paper",
                f"a flavour this experiment has (experiment {exp.get('name')!r} has no paper block; "
                "`dtlab list` marks the experiments that do)")
        return paper_block(paper)["set"]
    return {}


def paper_block(paper: Any) -> dict:
    """The ``paper`` block checked: ``estimate`` (flops, minutes, memory_gb: positive numbers;
    basis: the count behind them) and ``set`` (dotted keys, as in ``debug``)."""
    key = "experiment.paper"
    require(isinstance(paper, dict), key, paper, "a mapping with estimate and set")
    extra = sorted(set(paper) - {"estimate", "set"})
    if extra:
        raise ConfigError(f"{key}.{extra[0]}", paper[extra[0]], "unknown key; allowed: estimate, set")
    est, sets = paper.get("estimate"), paper.get("set")
    require(isinstance(sets, dict) and sets, f"{key}.set", sets, "a mapping: dotted.key -> value (the paper's sizes)")
    require(isinstance(est, dict), f"{key}.estimate", est, "a mapping: flops, minutes, memory_gb, basis")
    missing = sorted(_ESTIMATE_KEYS - set(est))
    extra = sorted(set(est) - _ESTIMATE_KEYS - {"gpus"})
    if missing or extra:
        k = (missing or extra)[0]
        raise ConfigError(f"{key}.estimate.{k}", est.get(k), "the keys flops, minutes, memory_gb, basis (and gpus)")
    gpus = est.get("gpus", 1)
    require(isinstance(gpus, int) and not isinstance(gpus, bool) and 1 <= gpus <= 64, f"{key}.estimate.gpus", gpus,
            "an integer in [1, 64]: the GPUs the flavour needs at once (default 1)")
    for k in ("flops", "minutes", "memory_gb"):
        v = est[k]
        require(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, f"{key}.estimate.{k}", v,
                "a positive number")
    require(isinstance(est["basis"], str) and est["basis"].strip(), f"{key}.estimate.basis", est["basis"],
            "the FLOP and memory count the estimate comes from, in words")
    return paper


def flavour_label(spec) -> str:
    """What the lines naming a run add for its flavour: "" (full), " · DEBUG flavour", " · PAPER flavour"."""
    return "" if spec.flavour == "full" else f" · {spec.flavour.upper()} flavour"


def paper_notes(spec) -> list[str]:
    """For a paper-flavour spec: its estimate, and the variants whose technique runs on cpu only (they
    run there, a GPU held or not, until the technique declares cuda). [] in the other flavours."""
    from components.core.registry import get_technique

    if spec.flavour != "paper":
        return []
    est = spec.raw["paper"]["estimate"]
    gpus = est.get("gpus", 1)
    out = [f"paper flavour: about {est['minutes']:g} minutes and {est['memory_gb']:g} GB per GPU on {gpus} "
           f"GPU{'s' if gpus > 1 else ''} ({est['flops']:.2g} FLOPs at {PAPER_SUSTAINED_FLOPS / 1e12:g} TFLOP/s "
           f"sustained per GPU; {est['basis']})"]
    cpu_only = sorted({v.technique for v in spec.variants if "cuda" not in get_technique(v.technique).devices})
    if cpu_only:
        out.append("paper flavour: technique(s) " + ", ".join(cpu_only) + " run on cpu only (they declare no cuda "
                   "device yet), so their variants run on cpu whatever GPUs the run holds")
    return out
