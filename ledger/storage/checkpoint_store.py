"""The append-only store of a ledger's signed checkpoints.

Every checkpoint the ledger signs is kept, append-only, in ``<ledger>/checkpoints/``::

    00000001.note, 00000002.note, ...   the signed notes, numbered from 1, never
                                        rewritten (created by link(2): no overwrite)
    .lock                               flock held while a checkpoint is added

The origin of a ledger's checkpoints is the name of the first key that signed one;
a new checkpoint is signed only if the ledger still extends the latest stored one
(the log must never sign two inconsistent checkpoints, c2sp.org/tlog-checkpoint).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evidence_ledger.format.errors import EvidenceError, StorageError
from evidence_ledger.storage.fsutil import (
    NotRegularFileError,
    file_lock,
    fsync_path,
    problem,
    read_regular,
)
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.checkpoint import Checkpoint, parse_checkpoint
from evidence_ledger.tlog.note import MAX_NOTE_BYTES, parse_note

if TYPE_CHECKING:
    from evidence_ledger.tlog.witness_protocol import WitnessResult

__all__ = ["CHECKPOINT_DIR", "CheckpointStore", "StoredCheckpoint"]

CHECKPOINT_DIR = "checkpoints"
LOCK_NAME = ".lock"
NAME_RE = re.compile(r"([0-9]{8,})\.note")


@dataclass(frozen=True)
class StoredCheckpoint:
    """One file in ``<ledger>/checkpoints/``.

    Attributes:
        number: its number (1-based, from the file name).
        path: the file.
        data: its bytes (a signed note, not yet verified).
        witnesses: what each witness asked to cosign it said (only on the checkpoint
            just signed; its ``data`` carries the cosignatures obtained).
    """

    number: int
    path: Path
    data: bytes
    witnesses: tuple[WitnessResult, ...] = ()

    @property
    def checkpoint(self) -> Checkpoint:
        """The checkpoint the note carries (its signatures are not checked here).

        Raises:
            EvidenceError: if the file is not a well-formed checkpoint note.
        """
        return parse_checkpoint(parse_note(self.data).text)


class CheckpointStore:
    """The append-only checkpoints of one ledger (see the module docstring).

    Args:
        ledger: the ledger or its directory.
    """

    def __init__(self, ledger: Ledger | str | os.PathLike[str] | None = None) -> None:
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self.directory = self.ledger.directory / CHECKPOINT_DIR

    def files(self) -> tuple[list[tuple[int, Path]], list[Path]]:
        """``([(number, path), ...] sorted by number, [other visible files])``.

        Raises:
            EvidenceError: if ``checkpoints/`` is a symlink or cannot be listed.
        """
        numbered: list[tuple[int, Path]] = []
        strays: list[Path] = []
        if self.directory.is_symlink():  # would lead reads and writes out of the ledger
            raise EvidenceError(f"{self.directory} is a symbolic link: not read or written")
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            raise EvidenceError(f"cannot list {self.directory}: {exc.strerror}") from exc
        for name in names:
            if name.startswith("."):
                continue
            match = NAME_RE.fullmatch(name)
            if match and name == f"{int(match.group(1)):08d}.note":
                numbered.append((int(match.group(1)), self.directory / name))
            else:
                strays.append(self.directory / name)
        numbered.sort()
        return numbered, strays

    def read(self, number: int, path: Path) -> StoredCheckpoint:
        """Read one checkpoint file.

        Only a regular file of at most :data:`~evidence_ledger.tlog.note.MAX_NOTE_BYTES` bytes is
        read (never through a symlink; a FIFO or device is refused unread, so reading never blocks
        or runs on for ever).

        Raises:
            EvidenceError: if it cannot be read, is not a regular file, or is too large.
        """
        try:
            data = read_regular(path, MAX_NOTE_BYTES)
        except OSError as exc:
            if isinstance(exc, NotRegularFileError):
                raise EvidenceError(f"{path} {problem(exc)}: not read") from exc
            raise EvidenceError(f"cannot read {path}: {problem(exc)}") from exc
        if len(data) > MAX_NOTE_BYTES:
            raise EvidenceError(f"{path} is larger than {MAX_NOTE_BYTES} bytes: not a note")
        return StoredCheckpoint(number, path, data)

    def all(self) -> list[StoredCheckpoint]:
        """Every stored checkpoint, by number."""
        return [self.read(n, p) for n, p in self.files()[0]]

    def latest(self) -> StoredCheckpoint | None:
        """The checkpoint with the highest number, or None."""
        numbered = self.files()[0]
        return self.read(*numbered[-1]) if numbered else None

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the checkpoint store's flock.

        Raises:
            StorageError: if the directory or lock file cannot be created.
        """
        with file_lock(self.directory / LOCK_NAME):
            yield

    def append(self, data: bytes) -> StoredCheckpoint:
        """Store ``data`` as the next checkpoint, durably; the lock must be held.

        Raises:
            StorageError: if it cannot be written (nothing is stored then).
        """
        numbered = self.files()[0]
        number = numbered[-1][0] + 1 if numbered else 1
        path = self.directory / f"{number:08d}.note"
        tmp = self.directory / f".tmp-{os.getpid()}-{number}"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # a leftover (or a planted symlink): never written through
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o444)
            os.link(tmp, path)  # fails rather than overwrite
            os.unlink(tmp)
            fsync_path(self.directory)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise StorageError(f"cannot store checkpoint {path}: {exc}") from exc
        return StoredCheckpoint(number, path, data)
