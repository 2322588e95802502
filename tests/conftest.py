"""Every test gets a cache folder of its own: default indexes (under
``$XDG_CACHE_HOME/evidence-ledger/index/``) never land in the user's cache, nor are
shared between tests run in parallel."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_cache_home(tmp_path_factory: pytest.TempPathFactory,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
