"""One registry of kinds: techniques, prepare steps, strategies, blocks, policies, codecs, services.

Every pluggable piece registers itself where it is defined, with one mechanism::

    @register("strategy", "fedavg", summary="FedAvg: weighted mean of client models")
    class FedAvg(...): ...

and is found by ``get(kind, name)`` (a ConfigError naming the key and the known names when it is
not there). Techniques and prepare steps register through :func:`technique` and
:func:`prepare_step`, which also describe their params and the prepared inputs they need.

Nothing is imported to find an entry: :mod:`components.core.manifest` reads every registration
from the source (an AST scan, cached per file), so ``get`` imports only the module that registers
the entry, and :func:`entries` / :func:`names` list every kind without importing any. A module
that does not parse or import is one line (:func:`broken`), and only the lookups that need it
fail. :func:`discover` still imports everything, for the few places that need every object.
A family is a package folder under ``components/`` (:func:`families`): a new folder is a new family.
"""
from __future__ import annotations

import importlib
import inspect
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from components.core.errors import ConfigError
from components.core.manifest import Broken, Index, Listing, Manifest, default_cache_file, one_line_error

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
    module: str = ""                   # the module whose import registered it

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
    validate: Callable[..., None] | None = None   # (params, experiment[, inputs]): see technique()
    inputs: tuple[str, ...] = ()       # names of the prepared inputs it reads (ctx.input(name))
    devices: tuple[str, ...] = ("cpu",)   # where it runs (ctx.device): cpu, or cpu and cuda

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
    devices: tuple[str, ...] = ("cpu",)   # where it runs (ctx.device): cpu, or cpu and cuda
    per_device: bool = False           # its output depends on the device (a measured time): the key holds it

    @property
    def file(self) -> str:
        return _relpath(inspect.getsourcefile(self.fn))


_REGISTRY: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
_PACKAGE_DIR = Path(__file__).resolve().parents[1]          # components/
# the index lookups consult; tests point it at a temporary package tree
_INDEX = Index(_PACKAGE_DIR, "components", default_cache_file(_PACKAGE_DIR))
_IMPORT_FAILED: dict[str, Broken] = {}                       # module -> why it did not import
_dynamic_imported: set[str] = set()
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


def _registering_module() -> str:
    """The module whose top-level code called into the registry (the one a lookup must import)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return frame.f_globals.get("__name__", "?") if frame is not None else "?"


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
    table[name] = Entry(kind, name, obj, summary.strip(), dict(meta), _registering_module())
    return obj


def register(kind: str, name: str, *, summary: str = "", **meta):
    """Decorator form of :func:`add`: ``@register("block", "fal")`` over a class or function."""

    def deco(obj):
        add(kind, name, obj, summary, **meta)
        return obj

    return deco


# ------------------------------------------------------------------------------ the index
def manifest(refresh: bool = False) -> Manifest:
    """What every module under components/ registers, read from the source (nothing imported)."""
    return _INDEX.manifest(refresh)


def families() -> tuple[str, ...]:
    """The known families: the package folders under components/ (a new folder is a new family)."""
    return _INDEX.families()


def __getattr__(name: str):
    if name == "FAMILIES":  # the former constant, now read from the folders
        return families()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _error_line(e: BaseException, file: str) -> str:
    """An import error in one line: the exception, and where in the package tree it was raised."""
    if isinstance(e, SyntaxError):
        return one_line_error(e, _INDEX.rel(e.filename) if e.filename else None, e.lineno, file)
    root = _INDEX.root.resolve()
    for fr in reversed(traceback.extract_tb(e.__traceback__)):  # the deepest frame inside the tree
        if fr.filename and Path(fr.filename).resolve().is_relative_to(root):
            return one_line_error(e, _INDEX.rel(fr.filename), fr.lineno, file)
    return one_line_error(e, None, None, file)


def _import(module: str) -> Broken | None:
    """Import one module; a failure (any exception at import) is kept as its one-line Broken."""
    if module in _IMPORT_FAILED:
        return _IMPORT_FAILED[module]
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - a broken module must not take the command down
        file = _INDEX.manifest().files.get(module, module)
        _IMPORT_FAILED[module] = Broken(module, file, _error_line(e, file))
        return _IMPORT_FAILED[module]
    return None


def _import_dynamic(man: Manifest) -> None:
    """Import the modules whose registrations the scan could not read, once each."""
    for module in man.dynamic:
        if module not in _dynamic_imported:
            _dynamic_imported.add(module)
            _import(module)


def broken() -> list[Broken]:
    """Modules that do not parse (from the scan) or did not import (in this process), one line each."""
    out = {b.module: b for b in manifest().broken}
    out.update(_IMPORT_FAILED)
    return list(out.values())


def discover() -> list[Broken]:
    """Import every module below ``components`` once, so all registrations run (for the places
    that need every object). A module that fails to import is skipped and returned, not raised."""
    global _discovered
    if not _discovered:
        for module in manifest().modules:
            _import(module)
        _discovered = True
    return broken()


def _check_kind(kind: str) -> dict[str, Entry]:
    if kind not in KINDS:
        raise ConfigError("kind", kind, "one of " + ", ".join(sorted(KINDS)))
    return _REGISTRY[kind]


def _load(kind: str, name: str, key: str) -> None:
    """Import the module the manifest names for (kind, name); ConfigError in one line if it cannot."""
    what = f"{kind.replace('_', ' ')} {name!r}"
    man = manifest()
    hits = man.find(kind, name)
    if not hits:                       # a file added since this process read the manifest
        man = manifest(refresh=True)
        hits = man.find(kind, name)
    if len({h.module for h in hits}) > 1:
        raise ConfigError(key, name, f"{what} is registered twice: " + " and ".join(f"{h.file}:{h.line}" for h in hits))
    if hits:
        failed = _import(hits[0].module)
        if failed is not None:
            raise ConfigError(key, name, f"{what} is registered in {failed.file}, "
                                         f"which does not import: {failed.error}")
    if name not in _REGISTRY[kind]:
        _import_dynamic(man)
    if name not in _REGISTRY[kind]:
        unreadable = [b for b in man.broken if _mentions(b.file, name)]
        if unreadable:  # most likely registered in a file that does not parse: say that, not "unknown"
            raise ConfigError(key, name, f"not found: {what} is likely in {unreadable[0].file}, which cannot be "
                                         f"read: {unreadable[0].error}")
        known = sorted(set(man.of(kind)) | set(_REGISTRY[kind]))
        raise ConfigError(key, name, f"unknown {kind.replace('_', ' ')}; known: " + ", ".join(known))


def _mentions(file: str, name: str) -> bool:
    """Whether a file that does not parse spells ``name`` as a string literal (for the error hint)."""
    try:
        text = (_INDEX.root.parent / file).read_text(errors="replace")
    except OSError:
        return False
    return f'"{name}"' in text or f"'{name}'" in text


def get(kind: str, name: str, key: str | None = None) -> Entry:
    """The entry ``name`` of ``kind``, importing only the module that registers it.

    ConfigError(key, name, ...) in one line when it is unknown (with the known names) or its module
    does not import (with the module's file and the error)."""
    table = _check_kind(kind)
    if name not in table:
        _load(kind, name, key or kind)
    return table[name]


def lookup(kind: str, name: str, key: str | None = None) -> Any:
    """The registered object itself (class, function, dataclass) of ``get(kind, name)``."""
    return get(kind, name, key).obj


def _listing(e: Entry) -> Listing:
    """A registration made at run time (not in the source scan) in the manifest's shape."""
    params = getattr(e.obj, "params", None)
    return Listing(kind=e.kind, name=e.name, module=e.module, file=e.file, summary=e.summary, meta=dict(e.meta),
                   params=f"{params.__module__}.{params.__qualname__}" if isinstance(params, type) else "")


def entries(kind: str) -> dict[str, Listing]:
    """Every entry of ``kind`` as listed in the source (name, module, file, summary, family, params),
    without importing it; ``.obj`` on one imports its module. Registrations made at run time (and
    by modules the scan could not read) are included."""
    table = _check_kind(kind)
    man = manifest()
    _import_dynamic(man)
    out = man.of(kind)
    for name, e in table.items():
        if name not in out:
            out[name] = _listing(e)
    return out


def names(kind: str) -> list[str]:
    return sorted(entries(kind))


# --------------------------------------------------------------------- techniques and prepare steps
def technique(name: str, *, family: str, summary: str, params: type | None = None,
              validate: Callable[..., None] | None = None, inputs: tuple[str, ...] | list[str] = (),
              devices: tuple[str, ...] = ("cpu",)):
    """Register ``fn(params, ctx) -> Result`` as technique ``name`` (a baseline registers the same way).

    ``family`` is a package folder under components/ (:func:`families`).
    ``params`` is a dataclass checked before Ray starts (keys, types, its ``check()`` for ranges);
    ``validate(params, experiment)`` may add checks that need the whole experiment config; a hook with a
    third parameter, ``validate(params, experiment, inputs)``, also gets the variant's bindings: each
    declared input name -> the PrepareSpec it is bound to (``.name``, ``.step``, ``.params`` parsed).
    ``inputs`` names the prepared outputs it reads with ``ctx.input(name)``; the experiment binds
    each to a prepare entry (by the same name, or ``inputs: {name: entry}`` on the variant).
    The function runs one seed (``ctx.seed``); the DAG runs the experiment's seeds.
    ``devices``: where it runs, ``("cpu",)`` or ``("cpu", "cuda")`` for one that puts its tensors on
    ``ctx.device``; an experiment asking for another device is refused before Ray starts.
    """
    known = families()
    if not devices or not set(devices) <= {"cpu", "cuda"}:
        raise ValueError(f"technique {name!r}: devices {devices!r} must be a non-empty subset of ('cpu', 'cuda')")
    if family not in known:
        raise ValueError(f"family {family!r} is not one of {known} (a family is a package folder under components/)")

    def deco(fn):
        add("technique", name, Technique(name, family, summary.strip(), fn, params, validate, tuple(inputs),
                                            tuple(devices)),
            summary, family=family)
        return fn

    return deco


def prepare_step(name: str, *, summary: str, params: type | None = None,
                 inputs: tuple[str, ...] | list[str] = (), seeded: bool = False,
                 devices: tuple[str, ...] = ("cpu",), per_device: bool = False):
    """Register ``fn(params, ctx) -> output`` as a cacheable prepare step ``name``.

    ``inputs`` names the prepare outputs it consumes (``ctx.input(name)``); ``seeded`` steps are
    built once per seed (``ctx.seed``) of the variants that need them, and the seed is in their
    cache key. Keep a step in a module of its own: its cache key hashes that module and every
    components/ module it imports, so code it does not use must not live beside it.
    ``devices``: ``("cpu", "cuda")`` for a step that puts its tensors on ``ctx.device`` (it runs on a
    GPU when the experiment's tasks are given one); its output is handed to the cache on cpu and
    its key does not hold the device, so a trained model made on a GPU serves a cpu run too. A step
    whose output depends on the device (a measured time) says ``per_device=True``: the device it
    will run on is then in its key.
    """
    if not devices or not set(devices) <= {"cpu", "cuda"}:
        raise ValueError(f"prepare step {name!r}: devices {devices!r} must be a non-empty subset of ('cpu', 'cuda')")

    def deco(fn):
        add("prepare_step", name, PrepareStep(name, summary.strip(), fn, params, tuple(inputs), seeded,
                                              tuple(devices), per_device), summary)
        return fn

    return deco


def get_technique(name: str, key: str = "technique") -> Technique:
    return get("technique", name, key).obj


def get_prepare_step(name: str, key: str = "step") -> PrepareStep:
    return get("prepare_step", name, key).obj
