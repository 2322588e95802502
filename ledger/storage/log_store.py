"""Append-only framed log on disk, with an exclusive writer lock and torn-tail recovery.

The frame format and its reader are in :mod:`evidence_ledger.format.framing`. An append writes one
group
of records (the last has "more follows" clear) and is acknowledged only after ``fsync``
of the log (and of the directory when the log file was created). A crash can leave a
*torn tail*: bytes after the last complete group. Readers never write: they stop before
it and report it. The next writer, holding the lock, cuts it back and keeps the cut
bytes in ``torn/`` beside the log.

Storage sits behind :class:`LogStore` so that another backend can replace the file.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from evidence_ledger.format.errors import EvidenceError, StorageError
from evidence_ledger.format.framing import ScanItem, TornTail, frame, scan_stream
from evidence_ledger.storage.fsutil import (
    NotRegularFileError,
    close_fd,
    file_lock,
    fsync_path,
    keep_tail,
    open_regular,
    problem,
    reading,
)
from evidence_ledger.storage.ledger_format import FORMAT_NAME, write_format

LOG_NAME = "log.bin"
LOCK_NAME = "writer.lock"
TORN_DIR = "torn"


class LogStore(Protocol):
    """What the ledger needs from a storage backend."""

    def scan(self, offset: int = 0, index: int = 0) -> Iterator[ScanItem]:
        """Read the records of complete groups from byte ``offset`` (record ``index``) on."""
        ...

    def append_group(
        self, records: list[bytes], sync: Callable[[int], None] = os.fsync
    ) -> int:
        """Durably append ``records`` as one atomic group (caller holds the writer lock);
        return the log's length in bytes afterwards."""
        ...


class FileLogStore:
    """The log in ``<dir>/log.bin``; see the module docstring for the format.

    Args:
        directory: the ledger directory (created by :meth:`create` on first write).
        format_version: the ledger's format version; a new ledger of version 2 or later
            gets its ``format`` file before its log.
    """

    def __init__(self, directory: Path, format_version: int = 1) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOG_NAME
        self.format_version = format_version

    def exists(self) -> bool:
        """True when something named ``log.bin`` is in the directory (a symlink, FIFO or
        device there is damage that :meth:`scan` reports, not "no ledger")."""
        return os.path.lexists(self.path)

    def open_fd(self) -> int:
        """Open the log read-only and return the descriptor: only a regular file, never
        through a symlink, never blocking (see :func:`evidence_ledger.storage.fsutil.open_regular`).

        Raises:
            FileNotFoundError: if there is no log.
            EvidenceError: if it is not a regular file or cannot be opened.
        """
        try:
            return open_regular(self.path)
        except FileNotFoundError:
            raise
        except NotRegularFileError as exc:
            raise EvidenceError(
                f"{self.path} {problem(exc)}: refusing to read it as the log (run verify)"
            ) from exc
        except OSError as exc:
            raise EvidenceError(f"cannot read {self.path}: {problem(exc)}") from exc

    def scan(self, offset: int = 0, index: int = 0) -> Iterator[ScanItem]:
        """Yield :class:`Record` items, then at most one :class:`Damage` or :class:`TornTail`.

        Args:
            offset: byte offset of a frame boundary to start at (0 = the start).
            index: the record index of the frame at ``offset``.

        Raises:
            EvidenceError: if the log file cannot be read, or is not a regular file.
        """
        try:
            fd = self.open_fd()
        except FileNotFoundError:
            return
        with reading(fd, buffering=1 << 20) as fh:
            try:
                size = os.fstat(fh.fileno()).st_size
                yield from scan_stream(fh, size, offset, index)
            except OSError as exc:
                raise EvidenceError(f"cannot read {self.path}: {problem(exc)}") from exc

    def create(self) -> None:
        """Create the ledger directory and an empty log, durably (idempotent).

        Raises:
            StorageError: if the directory or file cannot be created.
        """
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                if self.format_version > 1 and not (self.directory / FORMAT_NAME).exists():
                    write_format(self.directory, self.format_version)
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.fsync(fd)
                close_fd(fd)
                fsync_path(self.directory)
        except FileExistsError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot create ledger in {self.directory}: {exc}") from exc

    @contextlib.contextmanager
    def lock(self, timeout: float = 30.0) -> Iterator[None]:
        """Hold the exclusive writer lock (``flock`` on ``writer.lock``).

        Args:
            timeout: seconds to wait for another writer; 0 fails at once.

        Raises:
            LockTimeout: if the lock is still held by another process after ``timeout``.
            StorageError: if the lock file cannot be opened.
        """
        self.create()
        with file_lock(self.directory / LOCK_NAME, timeout=timeout):
            yield

    def cut_torn_tail(self, tail: TornTail) -> Path:
        """Move a torn tail aside into ``torn/`` (copied 1 MiB at a time, whatever its
        size; runs of zeros left as holes of a sparse file) and truncate the log (writer
        lock held).

        Returns the path of the file holding the cut bytes.

        Raises:
            StorageError: if the bytes cannot be saved or the log cannot be truncated.
        """
        try:
            with open(self.path, "r+b") as log:
                target = keep_tail(log.fileno(), tail.offset, self.directory / TORN_DIR,
                                   f"{tail.offset:012d}-{time.time_ns()}.bin")
                log.truncate(tail.offset)
                os.fsync(log.fileno())
        except OSError as exc:
            raise StorageError(f"cannot cut torn tail: {exc}") from exc
        return target

    def append_group(
        self, records: list[bytes], sync: Callable[[int], None] = os.fsync
    ) -> int:
        """Append ``records`` as one atomic group and sync (writer lock must be held).

        Args:
            records: entry bytes, in order.
            sync: makes the log durable, given its open descriptor (default ``fsync``;
                the writer passes one that also syncs the payloads).

        Returns the byte length of the log after the append.

        Raises:
            StorageError: on a short write, a failed fsync or ENOSPC; the log is then
                truncated back to its size before the call, so no half group remains.
        """
        blob = b"".join(frame(r, i < len(records) - 1) for i, r in enumerate(records))
        try:
            fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise StorageError(f"cannot open {self.path} for append: {exc}") from exc
        start = os.fstat(fd).st_size
        try:
            written = os.write(fd, blob)
            while written < len(blob):
                more = os.write(fd, blob[written:])
                if more <= 0:
                    raise OSError("short write")
                written += more
            sync(fd)
        except (OSError, StorageError) as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
                os.fsync(fd)
            raise StorageError(f"append failed, nothing acknowledged: {exc}") from exc
        finally:
            close_fd(fd)
        return start + len(blob)
