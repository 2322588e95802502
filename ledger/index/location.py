"""Where a ledger's index lives by default: in the user's cache, never in the ledger.

Reading a ledger (``query``, ``trace``, ``export``) writes nothing into its directory, so
a ledger someone was sent (read-only, on a mount, or to be kept byte-identical) is read
as it is. The default index of a ledger is::

    $XDG_CACHE_HOME/evidence-ledger/index/<identity>/<place>/index.duckdb

(``~/.cache`` when ``XDG_CACHE_HOME`` is unset or not an absolute path, as the XDG Base
Directory Specification says), with its ``.state``, ``.lock`` and ``.wal`` beside it, in
folders of mode 0700. ``<identity>`` is the first 32 hex digits of
``SHA-256(origin || 0x00 || leaf hash of entry 0)``: the ledger's origin (that of its
first stored checkpoint; empty before one is signed) and the RFC 9162 leaf hash of its
first entry (none for an empty log). ``<place>`` is the first 16 hex digits of the SHA-256
of the ledger directory's resolved path: two ledgers that share an identity (a copy that
has moved on, a fork) never rebuild or read each other's index, while
``rm -r $XDG_CACHE_HOME/evidence-ledger/index/<identity>`` drops every index of one ledger.
``--index FILE`` names another file, ``<ledger>/index.duckdb`` included (where the index
lived before).
"""

from __future__ import annotations

import hashlib
import os
import weakref
from pathlib import Path

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.format.framing import Record
from evidence_ledger.storage.checkpoint_store import CheckpointStore
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.merkle import leaf_hash

__all__ = ["INDEX_NAME", "cache_home", "default_index_path", "ledger_identity"]

INDEX_NAME = "index.duckdb"

_KNOWN: weakref.WeakKeyDictionary[Ledger, str] = weakref.WeakKeyDictionary()


def cache_home() -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache``.

    Raises:
        UsageError: when neither can be told (no ``$HOME`` and no home directory in the
            user database).
    """
    configured = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(configured):
        return Path(configured)
    try:
        return Path.home() / ".cache"
    except RuntimeError:
        raise UsageError("no cache folder for the index: set XDG_CACHE_HOME, or pass "
                         "--index FILE") from None


def ledger_identity(ledger: Ledger) -> str:
    """32 lowercase hex digits naming ``ledger`` (see the module docstring); reads the
    first stored checkpoint and the first record of the log, nothing more, once per
    ``ledger`` object (so one operation uses one index, even if a checkpoint is signed
    meanwhile)."""
    if ledger in _KNOWN:
        return _KNOWN[ledger]
    origin = b""
    store = CheckpointStore(ledger)
    try:
        numbered = store.files()[0]
        if numbered:
            origin = store.read(*numbered[0]).checkpoint.origin.encode()
    except EvidenceError:  # damaged or unreadable checkpoints name no origin; verify says
        origin = b""
    first = next(iter(ledger.store.scan()), None)
    leaf = leaf_hash(first.data) if isinstance(first, Record) else b""
    identity = _KNOWN[ledger] = hashlib.sha256(origin + b"\x00" + leaf).hexdigest()[:32]
    return identity


def default_index_path(ledger: Ledger) -> Path:
    """The default index file of ``ledger`` (see the module docstring); not created here.

    Raises:
        UsageError: see :func:`cache_home`.
    """
    place = hashlib.sha256(os.fsencode(ledger.directory.resolve())).hexdigest()[:16]
    return (cache_home() / "evidence-ledger" / "index" / ledger_identity(ledger) / place
            / INDEX_NAME)
