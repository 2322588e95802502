"""Verify a ledger directory: the I/O around the pure verifier."""

from __future__ import annotations

from .log import Ledger
from .verify import Report, verify_records


def verify_ledger(ledger: Ledger) -> Report:
    """Read ``ledger`` once and verify it (see :func:`ledger.verify.verify_records`).

    Raises:
        UsageError: if the directory holds no log.
        EvidenceError: if the log cannot be read.
    """
    ledger.require_exists()
    return verify_records(ledger.scan(), ledger.payloads.check)
