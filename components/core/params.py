"""Typed technique parameters: a dataclass per technique, checked before Ray starts.

``parse_params(cls, raw, where)`` rejects unknown keys, coerces ints to floats where a float is
declared, refuses wrong types and non-finite floats (NaN always; infinity unless the field's
default is infinite or its metadata says ``{"finite": False}``), then calls the dataclass's
``check()`` for ranges. Every failure is
a :class:`ConfigError` naming the full key (``where.key``), the value and what is allowed.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, get_args, get_origin

from components.core.errors import ConfigError


def _type_name(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _coerce(tp: Any, value: Any, key: str, allow_inf: bool = False) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, key, allow_inf)
            except ConfigError as e:
                errors.append(e.allowed)
        raise ConfigError(key, value, " or ".join(errors))
    if origin is Literal:
        if value in get_args(tp):
            return value
        raise ConfigError(key, value, _type_name(tp))
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(key, value, f"a list of {_type_name(get_args(tp)[0]) if get_args(tp) else 'values'}")
        inner = get_args(tp)[0] if get_args(tp) else Any
        return [_coerce(inner, v, f"{key}[{i}]", allow_inf) for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(key, value, "a mapping")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, value, "true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(key, value, "an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            f = float(value)
            if math.isnan(f) or (math.isinf(f) and not allow_inf):
                raise ConfigError(key, value, "a finite number" if not allow_inf else "a number (not NaN)")
            return f
        raise ConfigError(key, value, "a number")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(key, value, "a string")
    if dataclasses.is_dataclass(tp):
        return parse_params(tp, value, key)
    return value


def _allows_inf(f: dataclasses.Field) -> bool:
    """Infinity is a meaningful value only where the field says so (an infinite default: "no cap")."""
    if "finite" in f.metadata:
        return not f.metadata["finite"]
    return isinstance(f.default, float) and math.isinf(f.default)


def parse_params(cls: type, raw: dict | None, where: str = "params") -> Any:
    """Build ``cls`` (a dataclass) from ``raw``, checking keys, types and ranges."""
    raw = dict(raw or {})
    if not isinstance(raw, dict):
        raise ConfigError(where, raw, "a mapping of parameters")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        key = unknown[0]
        raise ConfigError(f"{where}.{key}", raw[key], "unknown key; allowed: " + ", ".join(sorted(fields)))
    values = {}
    for name, f in fields.items():
        if name in raw:
            values[name] = _coerce(hints[name], raw[name], f"{where}.{name}", _allows_inf(f))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{where}.{name}", None, f"required ({_type_name(hints[name])})")
    obj = cls(**values)
    check = getattr(obj, "check", None)
    if check is not None:
        try:
            check()
        except ConfigError as e:
            if not e.key.startswith(where):
                raise ConfigError(f"{where}.{e.key}", e.value, e.allowed) from None
            raise
    return obj
