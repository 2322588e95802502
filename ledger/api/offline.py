"""Checks that need no ledger: a proof bundle, a signed checkpoint and its witnesses'
cosignatures, an export, a session store.

Each takes the evidence as bytes or as the path of its file (an export: its directory),
and verifier keys as C2SP strings. Verifying a bundle or a checkpoint imports only the pure
stages (``format``, ``tlog``, ``verify``, ``bundle.verify``): the base install is enough.
Verifying an export needs the ``[query]`` extra (its rows are derived again with DuckDB).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from evidence_ledger.api.extras import load
from evidence_ledger.api.keys import verifier_keys as _strings
from evidence_ledger.bundle.verify import MAX_BUNDLE_BYTES, VerifiedBundle
from evidence_ledger.bundle.verify import verify_bundle as _verify_bundle
from evidence_ledger.format.errors import UsageError
from evidence_ledger.sessions.report import ScanReport, scan_store
from evidence_ledger.sessions.stores import MESSAGES_TABLE
from evidence_ledger.storage.files import read_input
from evidence_ledger.tlog.checkpoint import VerifiedCheckpoint
from evidence_ledger.tlog.checkpoint import verify_checkpoint as _verify_checkpoint
from evidence_ledger.tlog.cosignature import (
    QuorumError,
    WitnessPolicy,
    WitnessQuorum,
    check_quorum,
)
from evidence_ledger.tlog.note import MAX_NOTE_BYTES, Verifier

if TYPE_CHECKING:
    from evidence_ledger.api.handle import Ledger, Progress
    from evidence_ledger.index.export_check import ExportCheck

__all__ = [
    "check_witnesses",
    "scan_sessions",
    "verify_bundle",
    "verify_checkpoint",
    "verify_export",
]

_HEAD = 4096
"""Bytes of a bundle file read first: one that does not start as a JSON object there is
refused without reading the rest (a file of zeros, say)."""

Evidence = bytes | str | os.PathLike[str]
"""The evidence itself (``bytes``), or the path of the file holding it."""


def _bytes(evidence: Evidence, largest: int, what: str) -> bytes:
    """The evidence: as given, or read from its file (refused unread past ``largest``
    bytes, the largest ``what`` its format allows)."""
    if isinstance(evidence, bytes):
        return evidence
    if isinstance(evidence, str) and ("\n" in evidence or len(evidence) > 4096):
        raise TypeError("a str is the path of the evidence file: pass the evidence itself "
                        "as bytes")
    return read_input(evidence, largest=largest, what=what)


def verify_bundle(bundle: Evidence, verifier_keys: str | Sequence[str]) -> VerifiedBundle:
    """Verify a proof bundle offline: the DSSE signature, the signed checkpoint, every
    inclusion proof, hash link and bundled payload, and the verdict re-derived from the
    bundled entries (see ``evidence_ledger.bundle.verify``).

    Args:
        bundle: the bundle file's bytes, or its path (at most 1 GiB).
        verifier_keys: the ledger's C2SP verifier key strings; one must have signed both
            the envelope and the checkpoint.

    Returns:
        The verified bundle. Its ``verdict`` may hold violations: a bundle proving a
        violation is an authentic bundle.

    Raises:
        BundleError: (an EvidenceError, exit 1) naming the part that is not authentic.
        UsageError: for no key, a malformed or ambiguous key, or an unreadable file.
    """
    verifiers = [Verifier.from_vkey(v) for v in _strings(verifier_keys)]
    if not isinstance(bundle, bytes):  # not JSON from its first bytes: read no more
        head = read_input(bundle, limit=_HEAD)
        if head.lstrip()[:1] != b"{":
            return _verify_bundle(head, verifiers)  # names what is wrong from these alone
    return _verify_bundle(_bytes(bundle, MAX_BUNDLE_BYTES, "bundle"), verifiers)


def verify_checkpoint(
    note: Evidence, verifier_keys: str | Sequence[str], origin: str | None = None
) -> VerifiedCheckpoint:
    """Verify a C2SP signed checkpoint (c2sp.org/tlog-checkpoint) against trusted keys.

    Args:
        note: the signed note's bytes (UTF-8, at most 1 MiB), or its path.
        verifier_keys: trusted C2SP verifier key strings; at least one must have signed.
        origin: the expected origin (default: the signing key's name).

    Raises:
        EvidenceError: for a malformed note or checkpoint, a wrong origin, or no valid
            signature by a trusted key.
        UsageError: for a malformed key or an unreadable file.
    """
    verifiers = [Verifier.from_vkey(v) for v in _strings(verifier_keys)]
    return _verify_checkpoint(_bytes(note, MAX_NOTE_BYTES, "signed note"), verifiers, origin)


def verify_export(
    directory: str | os.PathLike[str],
    verifier_keys: str | Sequence[str],
    *,
    ledger: Ledger | None = None,
    progress: Progress | None = None,
) -> ExportCheck:
    """Verify an export (``Ledger.export``) on its own: the signature over its manifest and
    its checkpoint, every file's SHA-256, the root of the entries it carries against the
    checkpoint, and every row derived again from those entries (see
    ``evidence_ledger.index.export_check``). Memory does not grow with the size of the
    entries file beyond the derived rows.

    Args:
        directory: the export directory (holds ``manifest.json``).
        verifier_keys: the ledger's C2SP verifier key strings; one must have signed both
            the manifest and the checkpoint.
        ledger: also check that this ledger's root at the export's tree size is the
            export's (``Ledger.verify_export`` passes itself).
        progress: ``progress(entries_done, entries_done, tree_size)`` as the rows are
            derived.

    Returns:
        The check: ``ok``, and ``problems``, one line per mismatch naming the file.

    Raises:
        UsageError: for no key, a malformed or ambiguous key, a directory without
            ``manifest.json``, or a ``ledger`` that holds none.
        EvidenceError: if ``manifest.json`` is not an export manifest.
        MissingExtraError: without the ``[query]`` extra.
    """
    from evidence_ledger.storage.ledger_dir import Ledger as LedgerDirectory

    verifiers = [Verifier.from_vkey(v) for v in _strings(verifier_keys)]
    check_module = load("evidence_ledger.index.export_check", "query", "verify-export")
    check: ExportCheck = check_module.verify_export(
        directory, verifiers, None if ledger is None else LedgerDirectory(ledger.directory),
        progress=progress)
    return check


def check_witnesses(
    note: Evidence, witness_keys: str | Sequence[str], min_witnesses: int | None = None
) -> WitnessQuorum:
    """Check that a signed checkpoint carries valid cosignatures (c2sp.org/tlog-cosignature)
    by at least ``min_witnesses`` of the witnesses' keys: the quorum that makes a split view
    need every one of them to lie. Check the log's own signature first
    (:func:`verify_checkpoint`); lines by other keys are ignored.

    Args:
        note: the signed note's bytes (at most 1 MiB), or its path; e.g. a stored
            checkpoint, or a bundle's ``checkpoint_note`` encoded.
        witness_keys: the witnesses' cosignature verifier keys (type 0x04,
            ``SigningKey.witness_key``; ``evidence-ledger witness key``).
        min_witnesses: how many must have cosigned (default 1).

    Returns:
        The quorum: who cosigned, and when (POSIX seconds).

    Raises:
        QuorumError: (an EvidenceError, exit 1; rule ``witness_quorum``) if fewer than
            ``min_witnesses`` cosigned, or a cosignature by a given key does not verify.
        EvidenceError: for a malformed note or checkpoint.
        UsageError: for no key, a malformed key, a minimum out of ``1..len(keys)``, or an
            unreadable file.
    """
    policy = WitnessPolicy.from_keys(_strings(witness_keys), min_witnesses)
    if policy is None:
        raise UsageError("at least one witness key (--witness-key) is needed")
    quorum = check_quorum(_bytes(note, MAX_NOTE_BYTES, "signed note"), policy)
    if not quorum.ok:
        raise QuorumError(quorum)
    return quorum


def scan_sessions(
    source: str | os.PathLike[str],
    *,
    session_id: str | None = None,
    messages_table: str = MESSAGES_TABLE,
) -> ScanReport:
    """Scan a session store, read-only, for tool items out of order: orphan outputs,
    outputs before their calls, dangling calls, duplicated call ids
    (``schemas/scan-report.schema.json`` via ``to_json()``; ``report.ok`` when clean).

    Args:
        source: an SDK ``SQLiteSession`` file, or a JSON Lines dump of
            ``{"session_id": ..., "item": {...}}`` objects.

    Raises:
        UsageError: if the file is missing or of neither shape, or ``session_id`` is
            unknown.
    """
    return scan_store(source, session_id=session_id, messages_table=messages_table)
