"""Verify a ledger directory: the I/O around the pure verifier.

One pass over ``log.bin`` feeds the verifier and records the roots at every stored or
trusted checkpoint's size; the checkpoints are then checked against those roots (see
:func:`ledger.checkpoint_audit.check_checkpoints`).
"""

from __future__ import annotations

from collections.abc import Sequence

from . import checkpoint_audit
from .checkpoint_store import CheckpointStore
from .log import Ledger
from .sessions import pending_repair_notices
from .verify import Report, verify_records


def verify_ledger(
    ledger: Ledger,
    verifier_keys: Sequence[str] = (),
    trusted_checkpoints: Sequence[bytes] = (),
    payloads: bool = True,
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
            e.g. for a quick structural check of a large ledger).

    Raises:
        UsageError: if the directory holds no log, or a verifier key is malformed.
        EvidenceError: if the log cannot be read.
    """
    ledger.require_exists()
    report = verify_records(
        ledger.scan(),
        ledger.payloads.check if payloads else None,
        roots_at=checkpoint_audit.checkpoint_sizes(ledger, trusted_checkpoints),
    )
    findings = checkpoint_audit.check_checkpoints(
        ledger, verifier_keys, trusted_checkpoints, tree=report
    )
    report.violations.extend(f.to_finding() for f in findings)
    report.notices.extend(pending_repair_notices(ledger))
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
    report.rules = report.rules + checkpoint_audit.RULES
    return report
