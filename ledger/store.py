"""Append-only framed log on disk, with an exclusive writer lock and torn-tail recovery.

Frame layout (all integers big-endian)::

    u32 word      bit 31: "more follows" (the record is not the last of an atomic group)
                  bits 0-30: length of the record in bytes
    u32 crc32     CRC-32 (zlib) of the 4-byte word above
    bytes         the record (one canonical entry)
    u32 crc32     CRC-32 (zlib) of the record

An append writes one group of records (the last has "more follows" clear) and is
acknowledged only after ``fsync`` of the log (and of the directory when the log file was
created). A crash can leave a *torn tail*: bytes after the last complete group. Readers
never write: they stop before it and report it. The next writer, holding the lock, cuts
it back and keeps the cut bytes in ``torn/`` beside the log.

Storage sits behind :class:`LogStore` so that another backend can replace the file.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from .errors import EvidenceError, StorageError
from .fsutil import file_lock, fsync_path

LOG_NAME = "log.bin"
LOCK_NAME = "writer.lock"
TORN_DIR = "torn"
MORE_FLAG = 0x8000_0000
MAX_RECORD = 16 * 1024 * 1024
_HEADER = struct.Struct(">II")
_CRC = struct.Struct(">I")
FRAME_OVERHEAD = _HEADER.size + _CRC.size
"""Bytes a frame adds around its record."""


@dataclass(frozen=True)
class Record:
    """One complete record read from the log.

    Attributes:
        index: 0-based position of the record in the log (the entry's expected seq).
        offset: byte offset of the frame in the log file.
        data: the record bytes.
        crc_ok: False when the record's CRC-32 does not match (a damaged record).
    """

    index: int
    offset: int
    data: bytes
    crc_ok: bool

    @property
    def end(self) -> int:
        """Byte offset just past this record's frame."""
        return self.offset + FRAME_OVERHEAD + len(self.data)


@dataclass(frozen=True)
class Damage:
    """A frame header that does not check out: nothing after it can be read.

    Attributes:
        index: position the unreadable record would have had (entries).
        offset: byte offset of the bad frame.
        reason: one-line description.
    """

    index: int
    offset: int
    reason: str


@dataclass(frozen=True)
class TornTail:
    """Bytes after the last complete group (a crash mid-append).

    Attributes:
        offset: byte offset where the torn tail starts (= the end of the good log).
        length: its length in bytes.
        records: complete records inside it that belong to an unfinished group.
    """

    offset: int
    length: int
    records: int


ScanItem = Record | Damage | TornTail


def frame(data: bytes, more: bool) -> bytes:
    """Frame one record for the log (see the module docstring for the layout).

    Raises:
        StorageError: if the record is larger than :data:`MAX_RECORD` bytes.
    """
    if len(data) > MAX_RECORD:
        raise StorageError(f"record of {len(data)} bytes exceeds {MAX_RECORD}")
    word = len(data) | (MORE_FLAG if more else 0)
    word_bytes = struct.pack(">I", word)
    return word_bytes + _CRC.pack(zlib.crc32(word_bytes)) + data + _CRC.pack(zlib.crc32(data))


def _scan(fh: BinaryIO, size: int, offset: int, index: int) -> Iterator[ScanItem]:
    """Yield records of complete groups, then at most one Damage or TornTail."""
    fh.seek(offset)
    pending: list[Record] = []  # records of the group being read
    group_start = 0
    while offset < size:
        header = fh.read(_HEADER.size)
        if len(header) < _HEADER.size:
            break
        word, crc = _HEADER.unpack(header)
        if zlib.crc32(header[:4]) != crc:
            rest = header + fh.read()
            if not rest.strip(b"\x00"):
                break  # zero-filled tail left by a crash: torn, not tampered
            yield from pending
            yield Damage(index + len(pending), offset, "frame header fails its CRC-32")
            return
        length = word & ~MORE_FLAG
        if length > MAX_RECORD:
            yield from pending
            yield Damage(index + len(pending), offset, f"frame length {length} is too large")
            return
        body = fh.read(length + _CRC.size)
        if len(body) < length + _CRC.size:
            break
        data = body[:length]
        crc_ok = zlib.crc32(data) == _CRC.unpack(body[length:])[0]
        if not pending:
            group_start = offset
        pending.append(Record(index + len(pending), offset, data, crc_ok))
        offset += _HEADER.size + length + _CRC.size
        if not word & MORE_FLAG:
            yield from pending
            index += len(pending)
            pending = []
    end = group_start if pending else offset
    if end < size:
        yield TornTail(end, size - end, len(pending))


def scan_bytes(data: bytes) -> Iterator[ScanItem]:
    """Scan a whole log held in memory, as :meth:`FileLogStore.scan` scans the file."""
    return _scan(io.BytesIO(data), len(data), 0, 0)


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
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOG_NAME

    def exists(self) -> bool:
        """True when the log file exists."""
        return self.path.is_file()

    def scan(self, offset: int = 0, index: int = 0) -> Iterator[ScanItem]:
        """Yield :class:`Record` items, then at most one :class:`Damage` or :class:`TornTail`.

        Args:
            offset: byte offset of a frame boundary to start at (0 = the start).
            index: the record index of the frame at ``offset``.

        Raises:
            EvidenceError: if the log file cannot be read.
        """
        try:
            fh = open(self.path, "rb", buffering=1 << 20)  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise EvidenceError(f"cannot read {self.path}: {exc.strerror}") from exc
        with fh:
            size = os.fstat(fh.fileno()).st_size
            yield from _scan(fh, size, offset, index)

    def create(self) -> None:
        """Create the ledger directory and an empty log, durably (idempotent).

        Raises:
            StorageError: if the directory or file cannot be created.
        """
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.fsync(fd)
                os.close(fd)
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
        """Move a torn tail aside into ``torn/`` and truncate the log (writer lock held).

        Returns the path of the file holding the cut bytes.

        Raises:
            StorageError: if the bytes cannot be saved or the log cannot be truncated.
        """
        torn_dir = self.directory / TORN_DIR
        target = torn_dir / f"{tail.offset:012d}-{time.time_ns()}.bin"
        try:
            torn_dir.mkdir(exist_ok=True)
            with open(self.path, "rb") as src:
                src.seek(tail.offset)
                cut = src.read()
            with open(target, "wb") as dst:
                dst.write(cut)
                dst.flush()
                os.fsync(dst.fileno())
            fsync_path(torn_dir)
            with open(self.path, "r+b") as log:
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
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
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
            os.close(fd)
        return start + len(blob)
