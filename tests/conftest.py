"""Tests keep default indexes (``$XDG_CACHE_HOME/evidence-ledger/index/``) in a cache
folder of their own process, set before any fixture runs: never in the user's cache."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from .cores import CORES, use_core


def pytest_configure(config: pytest.Config) -> None:
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="evidence-ledger-test-cache-")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(os.environ["XDG_CACHE_HOME"], ignore_errors=True)


@pytest.fixture(params=CORES)
def core(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test on the pure-Python reference, then on the native core (skipped where it
    is not built, failed under CI=true): every name the core binds, also as the test
    module imported it (``tests/cores.py``)."""
    use_core(request.param, monkeypatch, request.module)
    return str(request.param)
