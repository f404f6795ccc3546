"""A run's ``verbose`` switch for every process it starts, and third-party import chatter kept quiet.

``verbose=true`` (checked before Ray starts) becomes ``DTLAB_VERBOSE``, which the Ray set-up
(components.core.raytools.log_level) reads: Ray and Serve log INFO only then. Shared by the CLI,
the Hydra job (pipelines/) and the launcher and sweeper (hydra_plugins/), so it sits below both.
"""
from __future__ import annotations

import logging
import os

from components.core.errors import ConfigError

ENV = "DTLAB_VERBOSE"
# third-party loggers that log INFO at import into a run's or a multirun's output: faiss's loader
# announces the AVX2/AVX512 build it picks and prints the ModuleNotFoundError of the other
QUIET_LOGGERS = ("faiss.loader",)


def quiet_loggers() -> None:
    """Third-party import chatter at WARNING (a job that imports faiss prints nothing about it)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def apply_verbose(cfg: dict) -> bool:
    """``cfg['verbose']`` (true or false; else ConfigError) into ``DTLAB_VERBOSE``; quiet loggers unless verbose."""
    v = cfg.get("verbose", False)
    if not isinstance(v, bool):
        raise ConfigError("verbose", v, "true or false")
    os.environ[ENV] = "1" if v else "0"
    if not v:
        quiet_loggers()
    return v
