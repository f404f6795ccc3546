"""Content-addressed cache for prepare-stage outputs.

Key = sha256 of (step name, its resolved params, the source of the step's module and of the
modules it names in ``code_deps``). Two experiments that prepare the same thing with the same code
share one entry; editing the code or a parameter makes a new one. Entries are pickles written
atomically (write to a temp file, then rename) so a crashed run never leaves a half entry.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable


def code_version(fn: Callable, extra_modules: Iterable[str] = ()) -> str:
    """Hash of the source of ``fn``'s module and of ``extra_modules``."""
    h = hashlib.sha256()
    mods = [inspect.getmodule(fn)] + [importlib.import_module(m) for m in extra_modules]
    for mod in mods:
        src = inspect.getsource(mod) if mod is not None else ""
        h.update(src.encode())
    return h.hexdigest()[:16]


def cache_key(step: str, params: Any, version: str) -> str:
    blob = json.dumps({"step": step, "params": params, "code": version}, sort_keys=True, default=str)
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
