"""A witness's durable memory: for each log it follows, the latest checkpoint it cosigned.

The state directory (``witness serve --state DIR``)::

    lock                         flock held while a witness serves from this directory
    logs/<sha256(origin)>.note   the latest cosigned checkpoint of that log: its note text,
                                 the log signatures that verified and this witness's
                                 cosignature (what the monitoring endpoint serves)

A witness must never cosign two checkpoints of one log that are not consistent, across
crashes too (c2sp.org/tlog-witness: "The witness MUST persist the new checkpoint before
responding"). :meth:`WitnessState.store` returns only once the new file is durable: it is
written to a fresh temporary file, synced, renamed over the old one, and the directory
synced. A crash at any point leaves the old file or the new one, never a mix, and a
cosignature is only ever sent after its checkpoint is stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from evidence_ledger.format.errors import EvidenceError, LockTimeout, StorageError
from evidence_ledger.storage.fsutil import (
    file_lock,
    problem,
    read_regular,
    replace_durably,
)
from evidence_ledger.tlog.checkpoint import Checkpoint, parse_checkpoint
from evidence_ledger.tlog.note import MAX_NOTE_BYTES, parse_note

__all__ = ["WitnessState"]

LOGS = "logs"
LOCK = "lock"
_TMP = ".tmp-"


class WitnessState:
    """The state directory of one witness (see the module docstring).

    Args:
        directory: the directory; created (mode 0700) by :meth:`hold` when missing.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.logs = self.directory / LOGS

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the directory for one serving witness: two processes sharing it could each
        check a request against the same old checkpoint and cosign two forks. Leftover
        temporary files of a crashed witness are removed.

        Raises:
            StorageError: if another process holds it, or it cannot be created.
        """
        try:
            self.logs.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create {self.logs}: {problem(exc)}") from exc
        try:
            with file_lock(self.directory / LOCK, timeout=0):
                for name in os.listdir(self.logs):
                    if name.startswith(_TMP):
                        os.unlink(self.logs / name)
                yield
        except LockTimeout as exc:
            raise StorageError(f"another witness serves from {self.directory}") from exc

    def path(self, origin: str) -> Path:
        """The file of ``origin``'s latest cosigned checkpoint."""
        return self.logs / f"{hashlib.sha256(origin.encode('utf-8')).hexdigest()}.note"

    def read(self, origin: str) -> tuple[Checkpoint, bytes] | None:
        """The latest checkpoint cosigned for ``origin`` and its stored note, or None.

        Raises:
            StorageError: if the file is not a regular file, cannot be read, or is not a
                checkpoint of ``origin`` (the witness then cosigns nothing for that log).
        """
        path = self.path(origin)
        try:
            note = read_regular(path, MAX_NOTE_BYTES)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"witness state {path} {problem(exc)}") from exc
        try:
            checkpoint = parse_checkpoint(parse_note(note).text)
        except EvidenceError as exc:
            raise StorageError(f"witness state {path} is damaged: {exc}") from exc
        if checkpoint.origin != origin:
            raise StorageError(f"witness state {path} holds origin {checkpoint.origin!r}, "
                               f"want {origin!r}")
        return checkpoint, note

    def store(self, origin: str, note: bytes) -> None:
        """Make ``note`` the latest cosigned checkpoint of ``origin``, durably, before the
        caller answers (temporary file, fsync, rename, fsync of the directory).

        Raises:
            StorageError: if it cannot be made durable (the old state then stands).
        """
        path = self.path(origin)
        tmp = self.logs / f"{_TMP}{os.getpid()}-{path.name}"
        try:
            replace_durably(path, note, tmp, mode=0o600)
        except OSError as exc:
            raise StorageError(f"cannot store witness state {path}: {problem(exc)}") from exc
