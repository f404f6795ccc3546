"""One registry of kinds: techniques, prepare steps, strategies, blocks, policies, codecs, services.

Every pluggable piece registers itself where it is defined, with one mechanism::

    @register("strategy", "fedavg", summary="FedAvg: weighted mean of client models")
    class FedAvg(...): ...

and is found by ``get(kind, name)`` (a ConfigError naming the key and the known names when it is
not there). Techniques and prepare steps register through :func:`technique` and
:func:`prepare_step`, which also describe their params and the prepared inputs they need.
:func:`discover` imports every module under ``components`` so ``dtlab list`` and the DAG see
them all; each entry knows the file that defines it.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from components.core.errors import ConfigError

FAMILIES = ("core", "compression", "training", "federated", "serving", "diffusion",
            "simulation", "algorithms", "data", "models", "coding")

# kind -> what it holds (``dtlab list KIND``). A new kind is one line here.
KINDS: dict[str, str] = {
    "technique": "techniques and baselines: fn(params, ctx) -> Result, one seed per call",
    "prepare_step": "prepare steps: fn(params, ctx) -> output, cached by content",
    "strategy": "federated strategies (server + client halves)",
    "ddp_strategy": "data-parallel optimizer-step strategies on Ray Train",
    "block": "transformer blocks for the shared GPT (GPTConfig.block)",
    "placement_policy": "simulation placement policies",
    "allocation_policy": "simulation allocation policies",
    "eviction_policy": "cache eviction policies (KV blocks, semantic-cache entries)",
    "codec": "compression codecs (numpy, with bit counting)",
    "torch_codec": "compression codecs for DDP comm hooks (torch, packed)",
    "matrix_codec": "codecs of token x channel matrices (K/V residuals: components/compression/residual.py)",
    "reuse_policy": "diffusion block runners that reuse computation across denoising steps",
    "service": "standing HTTP services (dtlab serve NAME)",
}


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    obj: Any
    summary: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def file(self) -> str:
        target = getattr(self.obj, "fn", self.obj)
        try:
            return _relpath(inspect.getsourcefile(target))
        except TypeError:
            return "?"


@dataclass(frozen=True)
class Technique:
    name: str
    family: str
    summary: str
    fn: Callable[..., Any]
    params: type | None
    validate: Callable[[Any, dict], None] | None = None
    inputs: tuple[str, ...] = ()       # names of the prepared inputs it reads (ctx.input(name))

    @property
    def file(self) -> str:
        return _relpath(inspect.getsourcefile(self.fn))


@dataclass(frozen=True)
class PrepareStep:
    name: str
    summary: str
    fn: Callable[..., Any]
    params: type | None
    inputs: tuple[str, ...] = ()       # names of the prepare outputs it consumes
    seeded: bool = False               # one output per seed of the variants that need it

    @property
    def file(self) -> str:
        return _relpath(inspect.getsourcefile(self.fn))


_REGISTRY: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
_discovered = False


def _relpath(path: str | None) -> str:
    if path is None:
        return "?"
    root = Path(__file__).resolve().parents[2]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return path


def _where(obj: Any) -> str:
    target = getattr(obj, "fn", obj)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"


def add(kind: str, name: str, obj: Any, summary: str = "", **meta) -> Any:
    """Register ``obj`` as ``name`` of ``kind``; the same object twice is fine, two objects not."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {sorted(KINDS)} (add it to KINDS)")
    table = _REGISTRY[kind]
    prev = table.get(name)
    if prev is not None and _where(prev.obj) != _where(obj):
        raise ValueError(f"{kind} {name!r} registered twice ({_where(prev.obj)} and {_where(obj)})")
    if not summary:
        doc = inspect.getdoc(getattr(obj, "fn", obj)) or ""
        summary = doc.strip().splitlines()[0] if doc.strip() else ""
    table[name] = Entry(kind, name, obj, summary.strip(), dict(meta))
    return obj


def register(kind: str, name: str, *, summary: str = "", **meta):
    """Decorator form of :func:`add`: ``@register("block", "fal")`` over a class or function."""

    def deco(obj):
        add(kind, name, obj, summary, **meta)
        return obj

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


def get(kind: str, name: str, key: str | None = None) -> Entry:
    """The entry ``name`` of ``kind``; ConfigError(key, name, the known names) if there is none."""
    table = _REGISTRY[kind]
    if name not in table:
        discover()
    if name not in table:
        raise ConfigError(key or kind, name, f"unknown {kind.replace('_', ' ')}; known: " + ", ".join(sorted(table)))
    return table[name]


def lookup(kind: str, name: str, key: str | None = None) -> Any:
    """The registered object itself (class, function, dataclass) of ``get(kind, name)``."""
    return get(kind, name, key).obj


def entries(kind: str) -> dict[str, Entry]:
    """Every entry of ``kind``, after discovery."""
    discover()
    if kind not in KINDS:
        raise ConfigError("kind", kind, "one of " + ", ".join(sorted(KINDS)))
    return dict(_REGISTRY[kind])


def names(kind: str) -> list[str]:
    return sorted(entries(kind))


# --------------------------------------------------------------------- techniques and prepare steps
def technique(name: str, *, family: str, summary: str, params: type | None = None,
              validate: Callable[[Any, dict], None] | None = None, inputs: tuple[str, ...] | list[str] = ()):
    """Register ``fn(params, ctx) -> Result`` as technique ``name`` (a baseline registers the same way).

    ``params`` is a dataclass checked before Ray starts (keys, types, its ``check()`` for ranges);
    ``validate(params, experiment)`` may add checks that need the whole experiment config.
    ``inputs`` names the prepared outputs it reads with ``ctx.input(name)``; the experiment binds
    each to a prepare entry (by the same name, or ``inputs: {name: entry}`` on the variant).
    The function runs one seed (``ctx.seed``); the DAG runs the experiment's seeds.
    """
    if family not in FAMILIES:
        raise ValueError(f"family {family!r} is not one of {FAMILIES}")

    def deco(fn):
        add("technique", name, Technique(name, family, summary.strip(), fn, params, validate, tuple(inputs)),
            summary, family=family)
        return fn

    return deco


def prepare_step(name: str, *, summary: str, params: type | None = None,
                 inputs: tuple[str, ...] | list[str] = (), seeded: bool = False):
    """Register ``fn(params, ctx) -> output`` as a cacheable prepare step ``name``.

    ``inputs`` names the prepare outputs it consumes (``ctx.input(name)``); ``seeded`` steps are
    built once per seed (``ctx.seed``) of the variants that need them, and the seed is in their
    cache key. Keep a step in a module of its own: its cache key hashes that module and every
    components/ module it imports, so code it does not use must not live beside it.
    """

    def deco(fn):
        add("prepare_step", name, PrepareStep(name, summary.strip(), fn, params, tuple(inputs), seeded), summary)
        return fn

    return deco


def get_technique(name: str, key: str = "technique") -> Technique:
    return get("technique", name, key).obj


def get_prepare_step(name: str, key: str = "step") -> PrepareStep:
    return get("prepare_step", name, key).obj
