"""Which core runs the hot paths: the compiled one or the pure-Python reference.

The native core (``evidence_ledger._native._core``, Rust, built from ``ledger/_native/`` by
``pip install`` where cargo exists) mirrors the frame parser, the canonical MessagePack
decoder and the hashes of :mod:`~evidence_ledger.format.framing`,
:mod:`~evidence_ledger.format.encoding`, :mod:`~evidence_ledger.format.entries` and
:mod:`evidence_ledger.tlog.merkle`. Those modules keep the pure-Python code as the reference
(``*_reference``) and bind their public names, once at import, to the native version when
:data:`native` is set; the public API is the same either way.
"""

from __future__ import annotations

import os
from types import ModuleType

PURE_VARIABLE = "EVIDENCE_LEDGER_PURE"
"""Set to anything but "" or "0" to run the pure-Python core even where the native one is
built."""


def _compiled() -> ModuleType | None:
    try:
        from evidence_ledger._native import _core
    except ImportError:  # built without cargo, or the build failed: pure it is
        return None
    return _core


compiled = _compiled()
"""The native core's module where it is built (whatever :data:`PURE_VARIABLE` says), else
None: the parity tests compare it with the reference."""

native = None if os.environ.get(PURE_VARIABLE, "") not in ("", "0") else compiled
"""The native core's module when it runs the hot paths, else None."""



def core_in_use() -> str:
    """Which core runs the hot paths: ``"native core"`` or ``"pure-Python core"`` (as
    ``evidence-ledger --version`` names it)."""
    return "native core" if native is not None else "pure-Python core"
