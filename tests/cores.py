"""Both cores side by side: the native core where it is built, and the pure-Python reference.

:func:`use_core` points every dispatched name (:data:`DISPATCHED`) at one core for a test.
The native side is skipped where the extension is not built, except under ``CI=true``,
where a missing native core fails the test (CI builds it).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import msgpack
import pytest

from evidence_ledger.format import core, encoding, entries, framing
from evidence_ledger.tlog import entry_batch, merkle

CORES = ("reference", "native")


def compiled() -> Any:
    """The native core's module; skips (fails under CI=true) where it is not built."""
    if core.compiled is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the native core is not built (CI builds it: pip install with cargo)")
        pytest.skip("the native core is not built (pip install with cargo on PATH)")
    return core.compiled


DISPATCHED: list[tuple[ModuleType, str, Any, Any]] = [
    (framing, "split_frames", framing.split_frames_reference, framing.split_frames_native),
    (encoding, "decode", encoding.decode_reference, encoding.decode_native),
    (entries, "entry_hash", entries.entry_hash_reference, "entry_hash"),
    (entries, "decode_entry", entries.decode_entry_reference, entries.decode_entry_native),
    (entries, "_unpack_checked", msgpack.unpackb, "decode"),
    (merkle, "leaf_hash", merkle.leaf_hash_reference, "leaf_hash"),
    (merkle, "node_hash", merkle.node_hash_reference, "node_hash"),
    (merkle, "root_of_leaves", merkle.root_of_leaves_reference, "root_of_leaves"),
    (merkle, "CompactRange", merkle.CompactRangeReference, "CompactRange"),
    (entry_batch, "read_entries", entry_batch.read_entries_reference,
     entry_batch.read_entries_native),
]
"""(module, name, reference, native) for every name :mod:`evidence_ledger.format.core`
binds at import; native is a Python wrapper, or the name of a compiled function."""


def use_core(which: str, monkeypatch: pytest.MonkeyPatch, *namespaces: ModuleType) -> None:
    """Point every dispatched name at the ``reference`` or ``native`` core, in its module
    and in ``namespaces`` (modules that imported the name itself)."""
    for module, name, reference, native in DISPATCHED:
        if which == "reference":
            chosen = reference
        else:
            chosen = getattr(compiled(), native) if isinstance(native, str) else native
        for namespace in (module, *namespaces):
            if namespace is module or hasattr(namespace, name):
                monkeypatch.setattr(namespace, name, chosen)
