"""One exception root for the whole package, split by cause.

The CLI maps these to exit codes once, at its boundary:

- :class:`EvidenceError` (and subclasses): evidence that fails to verify or cannot be
  parsed as evidence (a tampered ledger, a bad note, bundle or export): exit 1.
- :class:`UsageError` (and subclasses): input that is not evidence (a missing path, an
  ingest file that fails its schema, a bad key file): exit 2.
- :class:`StorageError`: an I/O failure while writing (short write, failed fsync,
  ENOSPC, lock time-out): exit 1, nothing acknowledged is lost.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Root of every error this package raises on purpose."""

    exit_code = 1


class EvidenceError(LedgerError):
    """Evidence that does not verify or does not parse (exit code 1)."""

    exit_code = 1


class EncodingError(EvidenceError):
    """Bytes that are not a canonical entry encoding (see FORMAT.md)."""


class StorageError(LedgerError):
    """A write to the ledger failed; the append was not acknowledged (exit code 1)."""

    exit_code = 1


class LockTimeout(StorageError):
    """Another writer held the ledger lock longer than the configured time-out."""


class UsageError(LedgerError):
    """Bad usage or input that is not evidence (exit code 2)."""

    exit_code = 2


class IngestError(UsageError):
    """An ingest file failed its schema; nothing was appended.

    Attributes:
        line: 1-based line number of the first failing line (0 for whole-file problems).
    """

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line
