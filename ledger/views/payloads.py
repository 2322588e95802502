"""A ledger's payload values, read for people: a digest named by a unique prefix, the value
behind a payload or an arguments digest, and the values a violation compared.

The ledger-reading glue around :mod:`evidence_ledger.views.values` (pure). A value is read
bounded (at most :data:`~evidence_ledger.views.values.PREVIEW_BYTES` + 1 bytes kept; the
rest is only hashed) and held to its digest: stored bytes that do not hash to their name
are ``damaged`` and never shown. What the log says of a digest (its redaction, which entries
name it, which payload holds the arguments an arguments digest names) takes one pass over
the log, keeping only what concerns the digests asked about, or is read from a trace's
entries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from evidence_ledger.format.entries import PAYLOAD_FIELDS, Entry
from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.record.redact import arguments_not_payload
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.payload_store import Payloads
from evidence_ledger.verify.findings import Finding
from evidence_ledger.views.values import (
    PREVIEW_BYTES,
    Redaction,
    Value,
    ValueDiff,
    argument_payloads,
    digest_prefix,
    pick_digest,
    redactions_of,
)

__all__ = ["ENTRY_VALUES", "LedgerValues", "payload_digest", "read_value", "value_by_prefix",
           "values_for_findings", "values_of_entries"]

_CHUNK = 1 << 20  # bytes per read while hashing the rest of a large payload

ENTRY_VALUES = {
    "args_payload": "arguments", "result_digest": "result", "message_digest": "message",
    "item_digest": "item", "output_digest": "output", "history_digest": "history",
    "policy_digest": "policy",
}
"""Payload field of an entry body -> what its value is, in words (every field of
:data:`~evidence_ledger.format.entries.PAYLOAD_FIELDS`)."""


def read_value(store: Payloads, digest: bytes, redactions: dict[bytes, Redaction],
               ) -> Value:
    """The value of payload ``digest`` (32 bytes): ``redacted`` when a redaction entry
    erased it, ``missing`` when no file holds it, ``damaged`` when the file's bytes do not
    hash to ``digest``, else ``present`` with at most ``PREVIEW_BYTES`` of them kept
    (``cut`` beyond) and its ``size`` in bytes. Memory: at most ``PREVIEW_BYTES`` + 1 MiB.

    Raises:
        OSError: if the file exists but cannot be read.
    """
    if digest in redactions:
        return Value.of(digest, None, redactions)
    view = store.open(digest)
    if view is None:
        return Value(digest, "missing")
    with view as stream:
        size = stream.size
        head = stream.read(PREVIEW_BYTES + 1)
        hasher = hashlib.sha256(head)
        for chunk in iter(lambda: stream.read(_CHUNK), b""):
            hasher.update(chunk)
    if hasher.digest() != digest:
        return Value(digest, "damaged", size=size)
    return dataclasses.replace(Value.of(digest, head, redactions), size=size)


@dataclass
class LedgerValues:
    """Values of one ledger's payloads and arguments digests, each read when asked for.

    Attributes:
        store: the ledger's payload store.
        redactions: payload digest -> its redaction (every ``redaction`` entry).
        arguments: arguments digest -> the payload holding those arguments (an
            ``args_payload``), for the digests known (32 bytes each).
    """

    store: Payloads
    redactions: dict[bytes, Redaction]
    arguments: dict[bytes, bytes] = field(default_factory=dict)

    def payload(self, digest: bytes) -> Value:
        """The payload ``digest`` (:func:`read_value`)."""
        return read_value(self.store, digest, self.redactions)

    def arguments_value(self, args_digest: bytes) -> Value:
        """The arguments an arguments digest names: the payload named by that digest (the
        copy a decision keeps of arguments its approver was shown, or a raw arguments
        payload that is its own canonical form) when there is one, else the arguments
        payload of an entry with that digest, else ``unrecorded``; its ``args_digest`` is
        ``args_digest``."""
        value = self.payload(args_digest)
        if value.state == "missing":
            held = self.arguments.get(args_digest)
            value = Value(args_digest, "unrecorded") if held is None else self.payload(held)
        return dataclasses.replace(value, args_digest=args_digest)

    def diff(self, finding: Finding, *, max_lines: int = 6) -> ValueDiff | None:
        """The values ``finding`` compared and their diff (at most ``max_lines`` lines),
        or None when its rule compares no values (``compared`` is None)."""
        if finding.compared is None:
            return None
        expected, got = (self.arguments_value(d) for d in finding.compared)
        return ValueDiff.of(finding, expected, got, max_lines=max_lines)

    def of_entry(self, entry: Entry) -> list[tuple[str, Value]]:
        """What ``entry`` names, in words (:data:`ENTRY_VALUES`), with each value: the
        arguments a decision's approver was shown (when it names them), then each payload
        field that is set, in :data:`~evidence_ledger.format.entries.PAYLOAD_FIELDS`
        order."""
        body = entry.body
        found = [(ENTRY_VALUES[name], self.payload(body[name]))
                 for name in PAYLOAD_FIELDS if body.get(name) is not None]
        if entry.kind == "decision" and body["args_digest"] is not None:
            found.insert(0, ("arguments shown", self.arguments_value(body["args_digest"])))
        return found


def values_of_entries(store: Payloads, entries: Iterable[Entry],
                      redaction_entries: Iterable[Entry]) -> LedgerValues:
    """The values of a part of a ledger without reading its log: the arguments digests
    of ``entries`` (a trace's) and the redactions ``redaction_entries`` record (every
    ``redaction`` entry of the ledger, else a redacted payload reads as missing)."""
    return LedgerValues(store, redactions_of(redaction_entries), argument_payloads(entries))


def values_for_findings(book: Ledger, findings: Sequence[Finding]) -> LedgerValues:
    """The values ``findings`` compared (:attr:`Finding.compared`): one pass over the log
    for its redactions and the payloads holding those arguments (none when no finding
    compares values). The pass stops quietly at a damaged record (``verify`` reports it):
    what lies past it reads as not recorded."""
    wanted = {digest for f in findings if f.compared is not None for digest in f.compared}
    if not wanted:
        return LedgerValues(book.payloads, {})
    redacting: list[Entry] = []

    def log() -> Iterator[Entry]:
        with contextlib.suppress(EvidenceError):  # damaged: verify reports it; values before
            for entry, _ in book.entries():
                if entry.kind == "redaction":
                    redacting.append(entry)
                yield entry

    arguments = argument_payloads(log(), wanted)
    return LedgerValues(book.payloads, redactions_of(redacting), arguments)


@dataclass
class _Named:
    """What one pass over the log says of the digests that start with a prefix.

    Attributes:
        redactions: every redaction of the ledger.
        payloads: payload digests entries name (payload fields and redactions).
        arguments: arguments digests of calls and executions -> their arguments payload.
        others: arguments digests only other entries name -> (kind, seq) of the first.
    """

    redactions: dict[bytes, Redaction]
    payloads: set[bytes]
    arguments: dict[bytes, bytes]
    others: dict[bytes, tuple[str, int]]


def _matcher(prefix: str) -> Callable[[bytes], bool]:
    """Whether a 32-byte digest's hex starts with ``prefix`` (lowercase hex), on bytes."""
    head = bytes.fromhex(prefix[: len(prefix) // 2 * 2])
    if len(prefix) % 2 == 0:
        return lambda digest: digest.startswith(head)
    nibble, at = int(prefix[-1], 16), len(head)
    return lambda digest: digest.startswith(head) and digest[at] >> 4 == nibble


def _scan(book: Ledger, prefix: str) -> _Named:
    """One pass over the log: its redactions and every digest starting with ``prefix``
    that an entry names (memory: the redactions and the matches)."""
    match = _matcher(prefix)
    redacting: list[Entry] = []
    named = _Named({}, set(), {}, {})
    for entry, _ in book.entries():
        body = entry.body
        if entry.kind == "redaction":
            redacting.append(entry)
        named.payloads.update(body[name] for name in PAYLOAD_FIELDS
                              if body.get(name) is not None and match(body[name]))
        args = body.get("args_digest")
        if args is None or not match(args):
            continue
        if entry.kind in ("call", "execution"):
            named.arguments.setdefault(args, body["args_payload"])
        else:
            named.others.setdefault(args, (entry.kind, entry.seq))
    named.redactions = redactions_of(redacting)
    named.payloads.update(d for d in named.redactions if match(d))
    return named


def value_by_prefix(book: Ledger, text: str) -> Value:
    """The value a digest or a unique prefix of one names (``sha256:`` optional, at least
    :data:`~evidence_ledger.views.values.MIN_PREFIX_HEX` hex digits): a payload (a file in
    ``payloads/``, or one an entry names: then ``redacted``, ``missing`` or ``damaged``
    when it cannot be shown), or the arguments an arguments digest names (see
    :meth:`LedgerValues.arguments_value`). One pass over the log.

    Raises:
        UsageError: for a malformed digest, one no entry or payload file has, an ambiguous
            prefix (naming the matches), or an arguments digest whose arguments the ledger
            does not hold.
        EvidenceError: at a damaged record of the log.
    """
    prefix = digest_prefix(text)
    named = _scan(book, prefix)
    digest = pick_digest(prefix, [*named.payloads, *book.payloads.with_prefix(prefix),
                                  *named.arguments, *named.others], "payload or arguments")
    values = LedgerValues(book.payloads, named.redactions, named.arguments)
    if digest not in named.arguments and digest not in named.others:
        return values.payload(digest)
    value = values.arguments_value(digest)
    if value.state == "unrecorded":
        kind, seq = named.others[digest]
        raise UsageError(f"sha256:{digest.hex()} is the digest of arguments a {kind} entry "
                         f"names (seq {seq}); the ledger holds no copy of those arguments")
    return value


def payload_digest(book: Ledger, text: str) -> bytes:
    """The payload digest (32 bytes) a digest or a unique prefix of one names, among the
    payload files and the payloads entries name. A whole digest is returned as it is,
    without reading the log; a prefix takes one pass.

    Raises:
        UsageError: for a malformed digest, a prefix no payload has (naming the payload of
            the call's arguments when it is an arguments digest), or an ambiguous one.
        EvidenceError: at a damaged record of the log.
    """
    prefix = digest_prefix(text)
    if len(prefix) == 64:
        return bytes.fromhex(prefix)
    named = _scan(book, prefix)
    payloads = [*named.payloads, *book.payloads.with_prefix(prefix)]
    if not payloads and len(named.arguments) == 1:
        raise arguments_not_payload(*next(iter(named.arguments.items())))
    return pick_digest(prefix, payloads)


class CheckedReader:
    """A payload file read to its end, hashed as it is read: the read that reaches the end
    raises when the bytes read do not have the payload's digest (the file was changed or
    replaced since it was checked, or is damaged), so nothing streamed passes for the
    payload unnoticed.

    Args:
        stream: the payload file, open for binary reading.
        digest: its 32-byte SHA-256.
    """

    def __init__(self, stream: BinaryIO, digest: bytes) -> None:
        self._stream = stream
        self._digest = digest
        self._hash = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all that is left when negative); b"" at the end.

        Raises:
            EvidenceError: at the end, if the bytes read do not hash to the digest.
        """
        chunk = self._stream.read(size)
        self._hash.update(chunk)
        if (not chunk or size < 0) and self._hash.digest() != self._digest:
            raise EvidenceError(
                f"payload sha256:{self._digest.hex()} changed while it was read: the "
                "bytes written do not match its digest (run verify)")
        return chunk
