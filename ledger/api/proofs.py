"""Checked proofs of one ledger, without loading the rest of the API.

:class:`LedgerProofs` is what ``evidence-ledger inclusion`` / ``consistency`` use (and
what :meth:`evidence_ledger.Ledger.inclusion_proof` keeps one of): it imports only the
storage and transparency-log modules a proof needs, so that a proof from the command
line costs about what ``--version`` costs plus O(log n) reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from evidence_ledger.format.errors import UsageError
from evidence_ledger.storage.checked_proofs import CheckedProofs
from evidence_ledger.storage.ledger_dir import Ledger as LedgerDirectory

if TYPE_CHECKING:
    from pathlib import Path

    from evidence_ledger.tlog.proofs import ConsistencyProof, InclusionProof

__all__ = ["LedgerProofs", "ledger_directory"]


def ledger_directory(directory: str | os.PathLike[str] | None) -> LedgerDirectory:
    """The ledger directory ``directory`` names (None: ``$EVIDENCE_LEDGER``, else
    ``./.evidence``), unchecked beyond this: it is a directory if it exists.

    Raises:
        UsageError: if the path exists and is not a directory.
    """
    book = LedgerDirectory(directory)
    if os.path.lexists(book.directory) and not book.directory.is_dir():
        raise UsageError(
            f"{book.directory} is not a directory; --ledger names a ledger directory"
        )
    return book


def _quiet(line: str) -> None:
    """Drop a notice nobody asked to hear."""


class LedgerProofs:
    """RFC 9162 inclusion and consistency proofs of one ledger, each taken from the
    ``tree/`` cache in O(log n) and checked before it is returned against the root of
    ``log.bin`` recorded in ``tree/root.json`` and the latest stored checkpoint (its
    signature verified with ``verifier_keys`` when given), with the leaf hash recomputed
    from the entry's bytes in ``log.bin``; a cache that fails is rebuilt from the log
    (``notice`` is told). See FORMAT.md, "Ledger directory".

    One object serves many proofs: it keeps the loaded tree and the checked roots, and
    checks before each proof, with one ``stat``, whether ``log.bin`` grew.

    Args:
        directory: the ledger directory (None: ``$EVIDENCE_LEDGER``, else ``./.evidence``).
        verifier_keys: C2SP verifier keys, one of which must have signed the latest stored
            checkpoint (none: its signature is not checked, and each proof says so).
        notice: called with one line when the cache is rebuilt.

    Raises:
        UsageError: if the path is not a ledger directory, or a verifier key is malformed.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, *,
                 verifier_keys: Sequence[str] = (),
                 notice: Callable[[str], None] | None = None) -> None:
        book = ledger_directory(directory)
        book.require_exists()
        self._proofs = CheckedProofs(book, verifier_keys, notice or _quiet)

    @property
    def directory(self) -> Path:
        """The ledger directory."""
        return self._proofs.ledger.directory

    def inclusion_proof(self, seq: int, tree_size: int | None = None) -> InclusionProof:
        """An RFC 9162 §2.1.3 inclusion proof of entry ``seq`` (0-based leaf index) in the
        tree of ``tree_size`` entries (default: the current size); its
        ``checked_against`` names the roots it was verified against.

        Raises:
            UsageError: unless ``0 <= seq < tree_size <= size``.
            EvidenceError: if the log is damaged, the entry is not a canonical entry of
                that seq, the latest checkpoint does not verify with ``verifier_keys``, or
                the log contradicts the recorded root or the checkpoint (it was changed
                after them: run verify).
            StorageError: if the cache must be rebuilt and cannot be written.
        """
        return self._proofs.inclusion(seq, tree_size)

    def consistency_proof(self, old_size: int, new_size: int | None = None,
                          ) -> ConsistencyProof:
        """An RFC 9162 §2.1.4 consistency proof from tree size ``old_size`` to ``new_size``
        (default: the current size), checked as :meth:`inclusion_proof` says.

        Raises:
            UsageError: unless ``0 < old_size <= new_size <= size``.
            EvidenceError, StorageError: as :meth:`inclusion_proof`.
        """
        return self._proofs.consistency(old_size, new_size)

    def set_notice(self, notice: Callable[[str], None] | None) -> None:
        """Send later notices to ``notice`` (None: drop them)."""
        self._proofs.notice = notice or _quiet

    def close(self) -> None:
        """Close the files kept open between proofs (the next proof opens them again)."""
        self._proofs.close()
