"""The payload store of a ledger directory, by its format version: one file per payload
(version 1, :class:`~evidence_ledger.storage.payloads.PayloadStore`) or payload segments
(version 2, :class:`~evidence_ledger.storage.segment_store.SegmentStore`). Both answer the
same calls (put, put_stream, flush, sync, get, open, check, scrub, remove ...)."""

from __future__ import annotations

from pathlib import Path

from evidence_ledger.storage.payloads import PayloadStore
from evidence_ledger.storage.segment_store import SegmentStore

Payloads = PayloadStore | SegmentStore
"""A ledger's payload store, of either format version."""


def open_payloads(directory: Path, version: int) -> Payloads:
    """The payload store of the ledger in ``directory``, written in format ``version``."""
    return PayloadStore(directory) if version == 1 else SegmentStore(directory)
