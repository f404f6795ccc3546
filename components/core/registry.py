"""Technique and prepare-step registry: the one place experiments find their code.

A technique is a function ``fn(params, ctx) -> Result`` registered with :func:`technique`;
a prepare step is ``fn(params, ctx) -> object`` registered with :func:`prepare_step`. Modules
register themselves on import; :func:`discover` imports every module under ``components`` so
``dtlab list`` and the DAG see them all. Each entry knows the file that implements it.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from components.core.errors import ConfigError

FAMILIES = ("core", "compression", "training", "federated", "serving", "diffusion",
            "simulation", "algorithms", "data", "models")


@dataclass(frozen=True)
class Technique:
    name: str
    family: str
    summary: str
    fn: Callable[..., Any]
    params: type | None
    validate: Callable[[Any, dict], None] | None = None

    @property
    def file(self) -> str:
        return _relpath(inspect.getsourcefile(self.fn))


@dataclass(frozen=True)
class PrepareStep:
    name: str
    summary: str
    fn: Callable[..., Any]
    params: type | None

    @property
    def file(self) -> str:
        return _relpath(inspect.getsourcefile(self.fn))


TECHNIQUES: dict[str, Technique] = {}
PREPARE_STEPS: dict[str, PrepareStep] = {}
_discovered = False


def _relpath(path: str | None) -> str:
    if path is None:
        return "?"
    root = Path(__file__).resolve().parents[2]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return path


def technique(name: str, *, family: str, summary: str, params: type | None = None,
              validate: Callable[[Any, dict], None] | None = None):
    """Register ``fn(params, ctx)`` as technique ``name`` (a baseline registers the same way).

    ``params`` is a dataclass checked before Ray starts (keys, types, its ``check()`` for ranges);
    ``validate(params, experiment)`` may add checks that need the whole experiment config (for
    example k against the dimension of the prepared problem). Both raise ConfigError.
    """
    if family not in FAMILIES:
        raise ValueError(f"family {family!r} is not one of {FAMILIES}")

    def deco(fn):
        prev = TECHNIQUES.get(name)
        if prev is not None and prev.fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"technique {name!r} registered twice ({prev.file} and {fn.__module__})")
        TECHNIQUES[name] = Technique(name, family, summary.strip(), fn, params, validate)
        return fn

    return deco


def prepare_step(name: str, *, summary: str, params: type | None = None):
    """Register ``fn(params, ctx)`` as a cacheable prepare step ``name``."""

    def deco(fn):
        PREPARE_STEPS[name] = PrepareStep(name, summary.strip(), fn, params)
        return fn

    return deco


def discover() -> None:
    """Import every module below ``components`` once, so all registrations run."""
    global _discovered
    if _discovered:
        return
    import components

    for mod in pkgutil.walk_packages(components.__path__, "components."):
        if mod.name.split(".")[-1].startswith("_") and not mod.ispkg:
            continue
        importlib.import_module(mod.name)
    _discovered = True


def get_technique(name: str, key: str = "technique") -> Technique:
    discover()
    if name not in TECHNIQUES:
        raise ConfigError(key, name, "unknown technique; known: " + ", ".join(sorted(TECHNIQUES)))
    return TECHNIQUES[name]


def get_prepare_step(name: str, key: str = "step") -> PrepareStep:
    discover()
    if name not in PREPARE_STEPS:
        raise ConfigError(key, name, "unknown prepare step; known: " + ", ".join(sorted(PREPARE_STEPS)))
    return PREPARE_STEPS[name]
