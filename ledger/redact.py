"""Redaction: erase one payload without breaking a single hash, proof or checkpoint.

Entries hold only payload digests, so erasing a payload file changes no entry. The
``redaction`` entry is appended first (durable intent), then the file is removed; a crash
in between leaves a recorded redaction whose payload still exists, and running the same
redaction again finishes it.
"""

from __future__ import annotations

from .entries import PAYLOAD_FIELDS
from .errors import StorageError, UsageError
from .log import Ledger
from .writer import EvidenceWriter


def payload_is_named(ledger: Ledger, digest: bytes) -> bool:
    """True when some entry names ``digest`` (32 bytes) in a payload field."""
    return any(
        entry.body.get(name) == digest for entry, _ in ledger.entries() for name in PAYLOAD_FIELDS
    )


def redact(writer: EvidenceWriter, digest: bytes, reason: str, by: str | None = None) -> bool:
    """Record a ``redaction`` entry for ``digest`` and erase that payload.

    Returns True when a payload file was erased, False when it was already gone.

    Raises:
        UsageError: if no entry names that payload, or ``reason`` is empty.
        StorageError: if the entry cannot be appended or the file cannot be removed.
    """
    ledger = writer.ledger
    ledger.require_exists()
    if not reason.strip():
        raise UsageError("a redaction needs a --reason")
    if not payload_is_named(ledger, digest):
        raise UsageError(f"no entry names payload sha256:{digest.hex()}")
    writer.redaction(digest=digest, reason=reason, by=by)
    try:
        return ledger.payloads.erase(digest)
    except StorageError as exc:
        raise StorageError(f"redaction recorded, but {exc}") from exc
