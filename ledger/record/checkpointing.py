"""Signing a checkpoint: the ledger's current tree head, verified from the log, signed and
stored (``evidence-ledger checkpoint``); or the head at an earlier size, signed and handed
out unstored (an export's, :func:`sign_tree_head`).

Only an intact log that extends the latest stored checkpoint is signed, so the log never
signs two inconsistent checkpoints (c2sp.org/tlog-checkpoint). The store is
:mod:`evidence_ledger.storage.checkpoint_store`; the note format
:mod:`evidence_ledger.tlog.checkpoint`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.record.witnessing import request_cosignatures
from evidence_ledger.storage.checkpoint_store import CheckpointStore, StoredCheckpoint
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.log_proofs import checked_log_root
from evidence_ledger.tlog.checkpoint import Checkpoint, parse_checkpoint
from evidence_ledger.tlog.note import Signer, parse_note, sign_note
from evidence_ledger.tlog.witness_protocol import Witness
from evidence_ledger.verify.findings import INTEGRITY
from evidence_ledger.verify.records import Report, verify_records

__all__ = ["create_checkpoint", "sign_tree_head"]


def _origin(signers: Sequence[Signer]) -> str:
    """The origin of the checkpoints ``signers`` sign: the first one's name.

    Raises:
        UsageError: if there is no signer.
    """
    if not signers:
        raise UsageError("at least one --key is needed to sign a checkpoint")
    return signers[0].name


def _latest(
    store: CheckpointStore, origin: str
) -> tuple[StoredCheckpoint | None, Checkpoint | None]:
    """The latest stored checkpoint and its tree head (None, None when there is none).

    Raises:
        EvidenceError: if it does not parse.
        UsageError: if its origin is not ``origin``.
    """
    latest = store.latest()
    if latest is None:
        return None, None
    try:
        previous = parse_checkpoint(parse_note(latest.data).text)
    except EvidenceError as exc:
        raise EvidenceError(
            f"latest checkpoint {latest.path} is unreadable ({exc}); run verify"
        ) from exc
    if previous.origin != origin:
        raise UsageError(
            f"the ledger's checkpoints have origin {previous.origin!r}; the first "
            f"key is named {origin!r}"
        )
    return latest, previous


def create_checkpoint(
    ledger: Ledger | str | os.PathLike[str] | None,
    signers: Sequence[Signer],
    head: Report | None = None,
    witnesses: Sequence[Witness] = (),
) -> StoredCheckpoint:
    """Sign the ledger's current tree head with every signer, have it cosigned by the
    witnesses, and store it.

    The origin is the first signer's name (and must match the origin of the stored
    checkpoints). Refuses to sign unless the tree extends the latest stored checkpoint.
    The checkpoint is stored with the log's signatures and then the cosignature line of
    every witness that cosigned, in the order given (:mod:`evidence_ledger.record.witnessing`);
    one that refused or failed leaves no line, and says why in ``witnesses``. It is
    stored all the same: the log signed it, and a checkpoint short of its witnesses is
    what ``verify --min-witnesses`` reports (rule ``witness_quorum``).

    Args:
        ledger: the ledger or its directory.
        signers: one or more keys; one signature line each, in order.
        head: a verifier :class:`~evidence_ledger.verify.records.Report` of this ledger's log,
        taken just
            before (as :func:`evidence_ledger.verify.audit.verify_ledger` gives it, holding the root
            at the latest stored checkpoint's size): its tree head is signed, saving a second pass
            over the log. None (or a report without that root): the head is computed from the log
            here.
        witnesses: witnesses to ask for cosignatures (none: the log's signatures only).

    Returns:
        The stored checkpoint; ``data`` is the signed note exactly as stored, ``witnesses``
        what each witness answered.

    Raises:
        UsageError: if there is no ledger, no key, or the origin differs from the
            stored checkpoints'.
        EvidenceError: if the log is damaged, or does not extend the latest checkpoint
            (rolled back or rewritten), or that checkpoint is unreadable.
        StorageError: if the checkpoint cannot be written.
    """
    origin = _origin(signers)
    store = CheckpointStore(ledger)
    with store.lock():
        latest, previous = _latest(store, origin)
        # The head is computed from log.bin itself (never from the derived tree/ cache),
        # and only an intact log is signed.
        report = head
        if report is None or (previous is not None and previous.size not in report.roots):
            report = verify_records(
                store.ledger.scan(), roots_at=() if previous is None else (previous.size,)
            )
        broken = [v for v in report.violations if v.rule == INTEGRITY]
        if broken:
            raise EvidenceError(
                f"refusing to sign: the log is damaged at seq {broken[0].seq} "
                f"({broken[0].detail}); run verify"
            )
        if previous is not None and (
            previous.size > report.tree_size or report.root(previous.size) != previous.root
        ):
            raise EvidenceError(
                f"refusing to sign: the ledger ({report.tree_size} entries) does not extend "
                f"checkpoint {latest.number if latest else 0} (tree size {previous.size}); "
                "it was rolled back or rewritten (run verify)"
            )
        checkpoint = Checkpoint(origin, report.tree_size, report.root_hash)
        note = sign_note(checkpoint.to_text(), signers)
        results = request_cosignatures(store.ledger, note, checkpoint, witnesses)
        lines = "".join(r.cosignature for r in results if r.cosignature is not None)
        stored = store.append(note + lines.encode("utf-8"))
        return dataclasses.replace(stored, witnesses=tuple(results))


def sign_tree_head(
    ledger: Ledger, signers: Sequence[Signer], size: int
) -> tuple[bytes, Checkpoint]:
    """Sign, without storing, the tree head of the log's first ``size`` entries (an
    export's checkpoint: the log may have grown past ``size`` since).

    The root is recomputed from ``log.bin`` in one pass, which also checks the log
    against every stored checkpoint, so the key never signs a head that contradicts one
    (:func:`evidence_ledger.storage.log_proofs.checked_log_root`). The origin is the first
    signer's name and must be the stored checkpoints'.

    Args:
        ledger: the ledger.
        signers: one or more keys; one signature line each, in order.
        size: the tree size (entries), at most the log's.

    Returns:
        The signed note (c2sp.org/tlog-checkpoint, UTF-8) and its tree head.

    Raises:
        UsageError: if there is no key, the origin differs from the stored checkpoints',
            or the log holds fewer than ``size`` entries.
        EvidenceError: if the log is damaged before ``size``, contradicts a stored
            checkpoint, or its latest checkpoint is unreadable.
    """
    origin = _origin(signers)
    _latest(CheckpointStore(ledger), origin)
    head = Checkpoint(origin, size, checked_log_root(ledger, size))
    return sign_note(head.to_text(), signers), head
