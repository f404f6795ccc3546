"""Every project exception survives pickling with its message and fields (a failure inside a Ray task
reaches the driver as raised, never as "Failed to deserialize exception").

The classes are discovered by walking components/, pipelines/ and hydra_plugins/, so a new one is
covered without editing this file.
"""
import importlib
import inspect
import pickle
import pkgutil
import typing

import pytest

from components.core.errors import ConfigError, require

PACKAGES = ("components", "pipelines", "hydra_plugins")
SAMPLE = {str: "key.name", int: 3, float: 2.5, bool: True}   # a value per annotated constructor type


def _project_exceptions() -> tuple[list[type], dict[str, str]]:
    """Every exception class defined in the project's modules, and the modules that failed to import."""
    found: dict[str, type] = {}
    broken: dict[str, str] = {}
    for pkg_name in PACKAGES:
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg_name}.",
                                          onerror=lambda name: broken.setdefault(name, "package failed")):
            try:
                mod = importlib.import_module(info.name)
            except Exception as e:  # noqa: BLE001  reported by the discovery test (its classes would be missed)
                broken[info.name] = repr(e)
                continue
            for _, cls in inspect.getmembers(mod, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == mod.__name__:
                    found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[k] for k in sorted(found)], broken


EXCEPTIONS, BROKEN = _project_exceptions()


def _instance(cls: type) -> BaseException:
    """An instance built from the constructor's own signature (one message when it takes *args)."""
    init = cls.__init__
    if init is BaseException.__init__ or any(init is getattr(b, "__init__", None) for b in
                                             (Exception, ValueError, RuntimeError, KeyError, MemoryError)):
        return cls("a message naming what failed")
    hints = typing.get_type_hints(init)
    args = []
    for name, p in list(inspect.signature(init).parameters.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        args.append(p.default if p.default is not p.empty else SAMPLE.get(hints.get(name), f"<{name}>"))
    return cls(*args)


def test_discovery_finds_the_known_exceptions():
    # Assert: every module imported (else its classes go unchecked), and the walk sees the classes a grep
    # finds (a walk that silently found nothing would pass the rest)
    assert BROKEN == {}
    names = {c.__name__ for c in EXCEPTIONS}
    assert {"ConfigError", "MemoryCapExceeded", "ShardActorDied", "MissingMetric", "ServerDied"} <= names


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda c: c.__name__)
def test_exception_round_trips_through_pickle(cls):
    # Prepare
    err = _instance(cls)
    # Execute
    back = pickle.loads(pickle.dumps(err))
    # Assert: same type, message, args and fields
    assert type(back) is cls
    assert str(back) == str(err)
    assert back.args == err.args
    assert vars(back) == vars(err)


def test_config_error_keeps_key_value_allowed_after_pickling():
    # Prepare
    try:
        require(False, "experiment.common.compactfusion.shards", 8, "at most resources.nodes=4")
    except ConfigError as e:
        err = e
    err.__notes__ = ["raised in a Ray task"]
    # Execute
    back = pickle.loads(pickle.dumps(err))
    # Assert
    assert (back.key, back.value, back.allowed) == ("experiment.common.compactfusion.shards", 8,
                                                    "at most resources.nodes=4")
    assert str(back) == "experiment.common.compactfusion.shards=8: at most resources.nodes=4"
    assert back.__notes__ == ["raised in a Ray task"]


def test_config_error_raised_in_a_ray_task_reaches_the_driver_with_its_fields(ray_session):
    # Prepare: a task whose check fails (compactfusion's calibrated-link check fails this way at run time)
    ray = ray_session

    @ray.remote(num_cpus=0)
    def check():
        require(False, "presets.latency", "2us", "a per-message latency below 1.82e-06 s")

    # Execute
    with pytest.raises(ConfigError) as e:
        ray.get(check.remote())
    # Assert: the driver sees the error itself (not "Failed to deserialize exception"), fields intact
    assert (e.value.key, e.value.value) == ("presets.latency", "2us")
    assert "presets.latency='2us': a per-message latency below 1.82e-06 s" in str(e.value)
