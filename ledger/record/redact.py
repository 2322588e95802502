"""Redaction: erase one payload without breaking a single hash, proof or checkpoint.

Entries hold only payload digests, so erasing a payload file changes no entry. The
payload's bytes are overwritten with zeros where they are stored and synced first, then the
``redaction`` entry is appended, then the file is removed (:func:`redact` says what a crash
in between leaves, and how running it again finishes it). A payload already erased under its
redaction is refused; one recorded again after its redaction is redacted anew. No software
erase reaches blocks an SSD remaps, copy-on-write and snapshotting file systems, backups,
or other links to the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from evidence_ledger.format.entries import PAYLOAD_FIELDS
from evidence_ledger.format.errors import StorageError, UsageError
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger


@dataclass(frozen=True)
class Redaction:
    """What :func:`redact` did.

    Attributes:
        seq: seq of the ``redaction`` entry that covers the payload.
        appended: True when that entry was appended now; False when an earlier
            redaction, interrupted before its file was removed, was finished.
        erased: True when a payload file was removed (False: it was already gone).
        digest: the payload's digest (32 bytes).
    """

    seq: int
    appended: bool
    erased: bool
    digest: bytes


def arguments_not_payload(args_digest: bytes, payload: bytes) -> UsageError:
    """The error for an arguments digest (RFC 8785 form) given where a payload digest is
    wanted, naming ``payload``: the payload (the arguments as the model wrote them) a call
    with that arguments digest stored them as."""
    return UsageError(f"sha256:{args_digest.hex()} is an arguments digest: the arguments are "
                      f"stored as payload sha256:{payload.hex()}: give that")


def _last_mentions(ledger: Ledger, digest: bytes
                   ) -> tuple[int | None, int | None, bytes | None]:
    """Seqs of the last entry naming payload ``digest`` (a payload field, or a decision's
    ``args_digest``: the copy of the arguments its approver was shown) and of its last
    ``redaction``; and the arguments payload of a call whose arguments digest ``digest`` is
    (None: none)."""
    named = redacted = stored_as = None
    for entry, _ in ledger.entries():
        body = entry.body
        if entry.kind == "redaction" and body["digest"] == digest:
            redacted = entry.seq
        elif any(body.get(name) == digest for name in PAYLOAD_FIELDS) or (
                entry.kind == "decision" and body["args_digest"] == digest):
            named = entry.seq
        elif entry.kind == "call" and body["args_digest"] == digest:
            stored_as = body["args_payload"]
    return named, redacted, stored_as


def redact(writer: EvidenceWriter, digest: bytes, reason: str, by: str | None = None) -> Redaction:
    """Erase the payload ``digest`` and record a ``redaction`` entry for it (unless one
    recorded after the last entry naming it already covers it), in this order: its bytes
    overwritten with zeros where they are stored and synced, then the entry appended
    durably, then its file removed. A redaction cut short before its entry leaves the
    zeroed payload beside its marker, which ``verify`` names in a notice, and running it
    again finishes it;
    cut short after its entry, running it again removes the file without a second entry.

    Raises:
        UsageError: if no entry names that payload, ``reason`` is empty, or the payload
            is already redacted (its redaction recorded and its file gone): nothing is
            appended.
        StorageError: if the payload cannot be overwritten (nothing is appended), the entry
            cannot be appended, or the file cannot be removed.
    """
    ledger = writer.ledger
    ledger.require_exists()
    if not reason.strip():
        raise UsageError("a redaction needs a --reason")
    with writer.atomic():  # holds the writer lock: no other redaction slips in between
        named, redacted, stored_as = _last_mentions(ledger, digest)
        if named is None:
            if stored_as is not None:
                raise arguments_not_payload(digest, stored_as)
            raise UsageError(f"no entry names payload sha256:{digest.hex()}")
        appended = redacted is None or redacted < named
        stored = ledger.payloads.scrub(digest)
        if not (appended or stored):
            ledger.payloads.remove(digest)  # a marker a crash left after the removal
            raise UsageError(f"payload sha256:{digest.hex()} is already redacted "
                             f"(seq {redacted})")
        if appended:
            writer.redaction(digest=digest, reason=reason, by=by)
            redacted = writer.size - 1
    assert redacted is not None
    try:
        erased = ledger.payloads.remove(digest)
    except StorageError as exc:
        raise StorageError(f"redaction recorded, but {exc}") from exc
    return Redaction(redacted, appended, erased, digest)
