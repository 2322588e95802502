"""Verify a ledger directory: the I/O around the pure verifier.

One pass over ``log.bin`` feeds the verifier and records the roots at every stored or
trusted checkpoint's size; the checkpoints are then checked against those roots (see
:func:`evidence_ledger.verify.checkpoint_audit.check_checkpoints`).

Payloads are re-hashed in the same pass. A payload an entry names that is gone, with no
``redaction`` entry for it, is lost evidence: a ``payload_missing`` violation at the
first entry naming it. One found in place of a payload that is not a regular file (a
symlink, FIFO or device) is never read: it fails its digest (``integrity``), and a
notice says what it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from evidence_ledger.format.digests import PayloadStatus
from evidence_ledger.storage.bulk import gc_paused
from evidence_ledger.storage.checkpoint_store import CheckpointStore
from evidence_ledger.storage.foreign import foreign_files
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.payloads import PayloadStore
from evidence_ledger.tlog.cosignature import WitnessPolicy
from evidence_ledger.verify import checkpoint_audit
from evidence_ledger.verify.findings import WITNESS_QUORUM
from evidence_ledger.verify.records import Report, verify_records


class _PayloadAudit:
    """Checks payloads for the verifier (all of them, or only the ``wanted`` digests) and
    notes those found in place of a payload that are not regular files (never read: they
    fail their digest)."""

    def __init__(self, store: PayloadStore, wanted: AbstractSet[bytes] | None) -> None:
        self.store = store
        self.wanted = wanted
        self.unreadable: dict[bytes, str] = {}  # digest -> what the file is

    def check(self, digest: bytes) -> PayloadStatus:
        if self.wanted is not None and digest not in self.wanted:
            return PayloadStatus.OK
        status = self.store.check(digest)
        if status is PayloadStatus.MISMATCH and digest not in self.unreadable:
            why = self.store.problem(digest)
            if why is not None:
                self.unreadable[digest] = why
        return status

    def notices(self) -> list[str]:
        """One line per payload file that is not a regular file."""
        return [
            f"payload {self.store.path_for(digest)} {why}: not read"
            for digest, why in self.unreadable.items()
        ]


def verify_ledger(
    ledger: Ledger,
    verifier_keys: Sequence[str] = (),
    trusted_checkpoints: Sequence[bytes] = (),
    payloads: bool | AbstractSet[bytes] = True,
    witnesses: WitnessPolicy | None = None,
) -> Report:
    """Read ``ledger`` once and verify it, and its stored and trusted checkpoints.

    Args:
        ledger: the ledger directory.
        verifier_keys: C2SP verifier key strings; stored checkpoints must carry a valid
            signature by at least one (none given: signatures are not checked).
        trusted_checkpoints: signed checkpoints kept elsewhere (bytes of each note);
            a ledger rolled back below, or forked from, one is an ``append_only``
            violation.
        payloads: re-hash every payload file against its digest (False: skip them,
            e.g. for a quick structural check of a large ledger; a set of 32-byte
            digests: only those, as ``prove`` does for the entries it bundles).
        witnesses: the witnesses whose cosignatures the latest stored checkpoint must
            carry, and how many (rule ``witness_quorum``); None: not checked.

    Raises:
        UsageError: if the directory holds no log, or a verifier key is malformed.
        EvidenceError: if the log cannot be read.
    """
    ledger.require_exists()
    audit = None
    if payloads:
        wanted = None if isinstance(payloads, bool) else payloads
        audit = _PayloadAudit(ledger.payloads, wanted)
    with gc_paused():
        report = verify_records(
            ledger.scan(),
            None if audit is None else audit.check,
            roots_at=checkpoint_audit.checkpoint_sizes(ledger, trusted_checkpoints),
            read_payload=ledger.payloads.get if payloads is True else None,
        )
    if audit is not None:
        report.notices.extend(audit.notices())
    findings = checkpoint_audit.check_checkpoints(
        ledger, verifier_keys, trusted_checkpoints, tree=report, witnesses=witnesses
    )
    report.violations.extend(f.to_finding() for f in findings)
    stored = len(CheckpointStore(ledger).files()[0])
    if not stored and not trusted_checkpoints:
        report.notices.append(
            "no signed checkpoint: a log cut back or rewritten at its tail cannot be told "
            "apart from a shorter one (sign one with `evidence-ledger checkpoint`)"
        )
    elif stored and not verifier_keys:
        report.notices.append(
            f"{stored} stored checkpoint(s) checked against the log but not for signatures "
            "(pass --verifier-key)"
        )
    foreign = list(foreign_files(ledger.directory))
    if foreign:
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        report.notices.append(
            f"{len(foreign)} file(s) in the ledger directory that the ledger did not write "
            f"(never read as evidence): {', '.join(foreign[:5])}{more}")
    report.rules = report.rules + checkpoint_audit.RULES
    if witnesses is not None:
        report.rules = (*report.rules, WITNESS_QUORUM)
    return report
