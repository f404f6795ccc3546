"""Fixtures for the infra tests: fresh service directories, removed afterwards."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def service_dir():
    """A fresh directory other local users can traverse (PostgreSQL runs as `postgres` under root)."""
    d = Path(tempfile.mkdtemp(prefix="dtlab-infra-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def module_service_dir():
    d = Path(tempfile.mkdtemp(prefix="dtlab-infra-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)
