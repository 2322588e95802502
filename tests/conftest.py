"""Tests keep default indexes (``$XDG_CACHE_HOME/evidence-ledger/index/``) in a cache
folder of their own process, set before any fixture runs: never in the user's cache."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="evidence-ledger-test-cache-")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(os.environ["XDG_CACHE_HOME"], ignore_errors=True)
