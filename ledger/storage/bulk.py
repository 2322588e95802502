"""Bulk passes over a log: what they share."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["gc_paused"]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC for a pass over a whole log (``verify``, an index build):
    millions of small acyclic containers would otherwise trigger collections that rescan
    every object kept, a cost that grows with what the pass holds. Restores the GC as it
    was (nested use is fine)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
