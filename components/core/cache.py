"""Content-addressed cache for prepare-stage outputs.

Key = sha256 of (step name, its parsed params with defaults filled in, the keys of its upstream
steps, the seed for seeded steps, and the source of every ``components/`` module the step's
module imports, transitively). Two experiments that prepare the same thing with the same code
share one entry; an edit to a model the step trains (say models/gpt.py) makes a new one, an edit
to a technique's run function in another module does not. Entries are pickles written atomically
(write to a temp file, then rename) so a crashed run never leaves a half entry.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, Callable

# Plumbing every step imports that cannot change what a step computes: not hashed, so that adding
# a registry kind or an error message does not rebuild every cached model.
_NOT_HASHED = frozenset({"components.core.registry", "components.core.errors"})


def user_cache_dir() -> Path:
    """dtlab's per-user cache directory, for what is shared by every checkout and runs folder (the
    registry manifest, the empty MLflow store): ``$DTLAB_CACHE_HOME``, else ``$XDG_CACHE_HOME/dtlab``,
    else ``~/.cache/dtlab``."""
    explicit = os.environ.get("DTLAB_CACHE_HOME")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")) / "dtlab"


def _module_file(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.origin and spec.origin.endswith(".py") else None


def _imports_of(name: str, path: str) -> set[str]:
    """``components.*`` modules a module imports anywhere in its source (static, no import)."""
    tree = ast.parse(Path(path).read_text())
    pkg = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import module`
    return {m for m in found if m == "components" or m.startswith("components.")}


@functools.lru_cache(maxsize=None)
def module_closure(name: str) -> tuple[str, ...]:
    """``name`` and every components/ module it imports, transitively (sorted)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        path = _module_file(mod)
        if path is None:
            continue
        seen.add(mod)
        if mod not in _NOT_HASHED:  # plumbing's own imports (the registry's manifest, ...) are plumbing too
            todo += sorted(_imports_of(mod, path) - seen)
    return tuple(sorted(seen - _NOT_HASHED))


def code_version(fn: Callable) -> str:
    """Hash of the source of ``fn``'s module and of every components/ module it imports."""
    h = hashlib.sha256()
    mod = inspect.getmodule(fn)
    names = module_closure(mod.__name__) if mod is not None else ()
    for name in names:
        h.update(name.encode() + b"\0" + Path(_module_file(name)).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def canonical_params(params: Any) -> Any:
    """Parsed params (a dataclass, defaults filled in) as plain JSON-able data."""
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        return dataclasses.asdict(params)
    return params


def cache_key(step: str, params: Any, version: str, upstream: dict[str, str] | None = None,
              seed: int | None = None) -> str:
    blob = json.dumps({"step": step, "params": canonical_params(params), "code": version,
                       "upstream": upstream or {}, "seed": seed}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class StageCache:
    """A folder of pickled stage outputs, one file per key."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / f"{key}.pkl"

    def has(self, key: str) -> bool:
        return self.path(key).exists()

    def load(self, key: str) -> Any:
        with open(self.path(key), "rb") as f:
            return pickle.load(f)

    def save(self, key: str, value: Any) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, self.path(key))
        return self.path(key)
