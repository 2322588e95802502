"""Payload store of ledger format version 2: payloads appended to segment files
(:mod:`evidence_ledger.storage.segments`), found through a derived location map
(:mod:`evidence_ledger.storage.payload_map`).

Writing: :meth:`SegmentStore.put` and :meth:`~SegmentStore.put_stream` only hash and hold a
payload (in memory; one over 1 MiB in an unnamed temporary file); the writer, holding the
writer lock, calls :meth:`~SegmentStore.flush` before it appends its log group: the held
payloads not already stored are appended to the last segment, the segments written are made
durable (``fdatasync``), their locations added to the map, and only then is the log group
written and synced. An entry is therefore never acknowledged without its payload; a crash
in between leaves payloads no entry names (harmless, found again by the next put of the
same bytes). No directory is made on this path (one new segment file, and a sync of its
folder, every :data:`~evidence_ledger.storage.segments.SEGMENT_BYTES`).

Before writing, the writer catches up with what the map lacks (records another process
appended, read and re-hashed, synced, added) and cuts back a torn tail (an incomplete record
a crash left: never acknowledged), its bytes first kept in the ledger's ``torn/`` folder, as
``log.bin``'s are: a header edited to claim more bytes than follow it looks the same, and
nothing is ever dropped. Readers catch up the same way, without cutting anything:
they stop before an incomplete record. A record whose bytes do not hash to its digest is
never put in the map (it may be one a crash cut short), so nothing is ever deduplicated
against it. A map that names a record the segment does not hold there is rebuilt from the
segments.

Only regular files are read or written (never through a symbolic link, never a FIFO): a
segment that is not one is damage, named by :meth:`~SegmentStore.notices`; its payloads
read as missing.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from evidence_ledger.format.digests import PayloadStatus
from evidence_ledger.format.errors import StorageError
from evidence_ledger.storage import segments as seg
from evidence_ledger.storage.fsutil import (
    NotRegularFileError,
    close_fd,
    fsync_path,
    keep_tail,
    open_regular,
    problem,
)
from evidence_ledger.storage.log_store import TORN_DIR
from evidence_ledger.storage.payload_map import MAP_NAME, PayloadMap
from evidence_ledger.storage.payload_view import PayloadView
from evidence_ledger.storage.payloads import PAYLOAD_DIR, PayloadStore

_BATCH = 1 << 20  # bytes of small records gathered into one write
_MAP_ROWS = 4096  # rows added to the map per transaction while catching up
_READERS = 8  # open segment descriptors kept for reading
_PAGE = 1024  # digests read from the map at a time


class _Held:
    """A payload held until the next flush: its bytes, or a temporary file holding them."""

    def __init__(self, data: bytes | None, spool: BinaryIO | None, length: int) -> None:
        self.data = data
        self.spool = spool
        self.length = length

    def close(self) -> None:
        if self.spool is not None:
            with contextlib.suppress(OSError):
                self.spool.close()


class SegmentStore:
    """Payload segments under ``<ledger>/payloads/segments`` (see the module docstring).

    Args:
        directory: the ledger directory.
    """

    version = 2

    def __init__(self, directory: Path) -> None:
        self.root = Path(directory) / PAYLOAD_DIR
        self.folder = self.root / seg.SEGMENT_DIR
        self._lock = threading.RLock()
        self._map: PayloadMap | None = None
        self._held: dict[bytes, _Held] = {}
        self.pending_bytes = 0
        """Bytes held for the next :meth:`flush`."""
        self._active: tuple[int, int] | None = None  # (segment number, write descriptor)
        self._end = 0  # bytes in the active segment, as this writer left it
        self._readers: dict[int, int] = {}
        self._problems: dict[int, str] = {}  # segment number -> what is wrong with it
        self._legacy = PayloadStore(Path(directory))  # files a migration cut short left

    # -- the map ---------------------------------------------------------------------

    @property
    def map(self) -> PayloadMap:
        """The location map (opened on first use)."""
        if self._map is None:
            if not os.path.isdir(self.root) or os.path.islink(self.root):
                self._map = PayloadMap(None)  # nothing stored yet: a private map
            else:
                self._map = PayloadMap(self.root / MAP_NAME)
        return self._map

    def _path(self, number: int) -> str:
        return str(self.folder / seg.segment_name(number))

    def _query(self, read: Callable[[PayloadMap], object]) -> object:
        """``read(map)``; a map that fails is rebuilt and asked again."""
        try:
            return read(self.map)
        except sqlite3.Error:
            self.rebuild()
            return read(self.map)

    def rebuild(self) -> None:
        """Build the map again from the segments (every record read and re-hashed)."""
        with self._lock:
            self.map.reset()
            self._catch_up(writing=False)

    # -- catching up -------------------------------------------------------------------

    def _folder_safe(self) -> bool:
        """Whether neither ``payloads/`` nor its ``segments/`` is a symbolic link."""
        return not (os.path.islink(self.root) or os.path.islink(self.folder))

    def _open_segment(self, number: int, writing: bool) -> int | None:
        """A descriptor of segment ``number`` (read-write when ``writing``), or None when it
        does not exist or is not a regular file (then noted; as is a segment folder that is
        a symbolic link: nothing is read through one)."""
        if not self._folder_safe():
            self._problems[number] = "is in a folder that is a symbolic link"
            return None
        try:
            fd = open_regular(self._path(number), os.O_RDWR if writing else os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            self._problems[number] = problem(exc)
            return None
        self._problems.pop(number, None)
        return fd

    def _catch_up(self, writing: bool) -> int:
        """Read into the map every record past its high-water mark, segment after segment
        until one is missing (re-hashing each; syncing the segment before its rows are
        added). A writer cuts back torn tails. Returns the number of the last segment read
        whose end is sound (0: none), where a writer may append.

        Raises:
            OSError: if a segment cannot be read, synced or cut back.
        """
        number, offset = self.map.mark()
        last = 0
        while True:
            fd: int | None
            if writing and self._active and self._active[0] == number:
                fd, owned = self._active[1], False
            else:
                fd, owned = self._open_segment(number, writing), True
            if fd is None:
                if number in self._problems and self._folder_safe() and os.path.lexists(
                        self._path(number + 1)):  # a segment that is not a file: skip it
                    number, offset = number + 1, 0
                    continue
                return last
            try:
                sound = self._read_segment(fd, number, offset, writing)
            finally:
                if owned:
                    close_fd(fd)
            last = number if sound else last
            number, offset = number + 1, 0

    def _read_segment(self, fd: int, number: int, offset: int, writing: bool) -> bool:
        """Catch up one open segment from ``offset`` (see :meth:`_catch_up`); False when it
        ends in damage (nothing may be appended after it)."""
        rows: list[tuple[bytes, int, int, int, int]] = []
        mark = offset
        sound = True
        for item in seg.scan(fd, offset):
            if isinstance(item, seg.SegmentEnd):
                if not item.torn:
                    self._problems[number] = f"is damaged at byte {item.offset}: {item.reason}"
                    sound = False
                elif writing:
                    self._cut_tail(fd, number, item.offset)
                break
            if item.state == seg.STORED:
                digest, _ = seg.hash_data(fd, item)
                if digest == item.digest:
                    rows.append((item.digest, number, item.offset, item.length, seg.STORED))
            elif item.state == seg.ERASING:
                rows.append((item.digest, number, item.offset, item.length, seg.ERASING))
            mark = item.end
            if len(rows) >= _MAP_ROWS:
                self._add(fd, rows, (number, mark))
                rows = []
        self._add(fd, rows, (number, mark))
        return sound

    def _cut_tail(self, fd: int, number: int, offset: int) -> None:
        """Cut segment ``number`` back to ``offset`` (a torn tail), its bytes first kept in
        the ledger's ``torn/`` folder as ``seg-NNNNNNNN-<offset>-<ns>.bin``: never dropped
        (a header edited to claim too much would otherwise cost every record after it)."""
        keep_tail(fd, offset, self.root.parent / TORN_DIR,
                  f"seg-{number:08d}-{offset:012d}-{time.time_ns()}.bin")
        os.ftruncate(fd, offset)
        os.fsync(fd)

    def _add(self, fd: int, rows: list[tuple[bytes, int, int, int, int]],
             mark: tuple[int, int]) -> None:
        if rows:
            os.fdatasync(fd)  # what another writer left unsynced is durable before it counts
        self.map.add(rows, mark)

    # -- writing -----------------------------------------------------------------------

    def put(self, data: bytes) -> bytes:
        """Hold ``data`` (bytes) for the next :meth:`flush` and return its 32-byte SHA-256
        digest. Idempotent."""
        digest = hashlib.sha256(data).digest()
        with self._lock:
            if digest not in self._held:
                self._held[digest] = _Held(data, None, len(data))
                self.pending_bytes += len(data)
        return digest

    def put_stream(
        self, fill: Callable[[Callable[[bytes], object]], None], *, in_memory: int = 1 << 20
    ) -> bytes:
        """Hold the bytes ``fill`` produces (``fill(write)`` calls ``write(piece)`` with each
        piece, in order) for the next :meth:`flush`; return their 32-byte SHA-256. Beyond
        ``in_memory`` bytes the pieces go to an unnamed temporary file in the segment folder:
        a large payload is never held whole.

        Raises:
            StorageError: if the temporary file cannot be written (nothing is held).
            Exception: whatever ``fill`` raises (nothing is held).
        """
        pieces: list[bytes] = []
        hasher = hashlib.sha256()
        held = 0
        spool: BinaryIO | None = None

        def write(piece: bytes) -> None:
            nonlocal held, spool
            hasher.update(piece)
            held += len(piece)
            if spool is not None:
                spool.write(piece)
                return
            pieces.append(piece)
            if held > in_memory:
                spool = self._spool()
                spool.writelines(pieces)
                pieces.clear()

        try:
            fill(write)
        except BaseException as exc:
            if spool is not None:
                spool.close()
            if isinstance(exc, OSError):
                raise StorageError(f"cannot hold payload (streamed): {exc}") from exc
            raise
        if spool is None:
            return self.put(b"".join(pieces))
        digest = hasher.digest()
        with self._lock:
            if digest in self._held:
                spool.close()
            else:
                spool.flush()
                self._held[digest] = _Held(None, spool, held)
                self.pending_bytes += held
        return digest

    def _spool(self) -> BinaryIO:
        try:
            os.makedirs(self.folder, exist_ok=True)
            return tempfile.TemporaryFile(dir=self.folder)  # unnamed where O_TMPFILE exists
        except OSError as exc:
            raise StorageError(f"cannot hold payload (streamed): {exc}") from exc

    def discard(self) -> None:
        """Drop the payloads held (stored by :meth:`flush`, or no longer wanted)."""
        with self._lock:
            for held in self._held.values():
                held.close()
            self._held.clear()
            self.pending_bytes = 0

    def _prepare(self) -> tuple[int, int]:
        """The active segment ``(number, descriptor)``, caught up and cut back (writer lock
        held): the last segment, or a new one when it is full or ends in damage.

        Raises:
            OSError: if a segment cannot be read, cut back or made.
        """
        if self._active is not None:
            fd = self._active[1]
            if os.fstat(fd).st_size == self._end and self._end < seg.SEGMENT_BYTES:
                return self._active
        last = self._catch_up(writing=True)
        if self._active is not None and self._active[0] != last:
            close_fd(self._active[1])
            self._active = None
        if last and self._active is None:
            opened = self._open_segment(last, writing=True)
            if opened is not None:
                self._active = (last, opened)
        if self._active is not None:
            self._end = os.fstat(self._active[1]).st_size
            if self._end < seg.SEGMENT_BYTES:
                return self._active
        return self._new_segment(max(last, max(self._problems, default=0)) + 1)

    def _new_segment(self, number: int) -> tuple[int, int]:
        if self._active is not None:
            close_fd(self._active[1])
            self._active = None
        if not self._folder_safe():
            raise NotRegularFileError(errno.ELOOP, "is a symbolic link", str(self.folder))
        if not os.path.isdir(self.folder):
            os.makedirs(self.folder, exist_ok=True)
            fsync_path(self.root)
            fsync_path(self.root.parent)
            if self._map is not None and self._map.path is None:  # the real one, from now on
                self._map.close()
                self._map = None
        fd = open_regular(self._path(number), os.O_RDWR | os.O_CREAT)
        try:
            if os.fstat(fd).st_size:  # made by a writer that crashed: read it first
                close_fd(fd)
                self._catch_up(writing=True)
                fd = open_regular(self._path(number), os.O_RDWR)
            fsync_path(self.folder)
        except BaseException:
            close_fd(fd)
            raise
        self._active = (number, fd)
        self._end = os.fstat(fd).st_size
        return self._active

    def flush(self) -> None:
        """Append the payloads held that are not stored yet to the segments, make them
        durable (``fdatasync`` of each segment written) and add them to the map. The caller
        holds the writer lock and appends its log group after this returns.

        Raises:
            StorageError: if they cannot be written or synced (nothing is acknowledged).
        """
        with self._lock:
            if not self._held:
                return
            try:
                self._flush()
            except (OSError, sqlite3.Error) as exc:
                self._forget_active()  # the payloads stay held, for the next flush
                raise StorageError(f"cannot store payloads: {exc}") from exc
            self.discard()

    def _flush(self) -> None:
        number, fd = self._prepare()
        stored = self.map.present(self._held)
        rows: list[tuple[bytes, int, int, int, int]] = []
        written: set[int] = set()
        batch: list[bytes] = []
        start = self._end
        for digest, held in self._held.items():
            if digest in stored:
                continue
            if self._end >= seg.SEGMENT_BYTES:
                self._write(fd, start, batch)
                os.fdatasync(fd)
                written.discard(number)
                number, fd = self._new_segment(number + 1)
                batch, start = [], self._end
            rows.append((digest, number, self._end, held.length, seg.STORED))
            written.add(number)
            batch.append(seg.header(digest, held.length))
            self._end += seg.HEADER_SIZE + held.length
            if held.data is not None:
                batch.append(held.data)
            else:
                assert held.spool is not None
                self._write(fd, start, batch)
                start = self._copy(fd, held.spool, self._end - held.length)
                batch = []
            if sum(map(len, batch)) >= _BATCH:
                start = self._write(fd, start, batch)
                batch = []
        self._write(fd, start, batch)
        if written:
            os.fdatasync(fd)
        self.map.add(rows, (number, self._end))

    @staticmethod
    def _write(fd: int, at: int, parts: list[bytes]) -> int:
        """Write ``parts`` at ``at``; the offset after them."""
        view = memoryview(b"".join(parts))
        while view:
            done = os.pwrite(fd, view, at)
            if done <= 0:
                raise OSError(errno.EIO, "short write")
            view, at = view[done:], at + done
        return at

    def _copy(self, fd: int, spool: BinaryIO, at: int) -> int:
        spool.seek(0)
        while chunk := spool.read(1 << 20):
            at = self._write(fd, at, [chunk])
        return at

    def _forget_active(self) -> None:
        """After a failed write: re-read the active segment's state at the next flush (the
        torn tail it may have left is cut back then)."""
        if self._active is not None:
            close_fd(self._active[1])
            self._active = None

    def sync(self, log_fd: int | None = None) -> None:
        """Make the log durable (``fdatasync`` of ``log_fd``): the payloads were synced by
        :meth:`flush`, before the log was written.

        Raises:
            StorageError: if the sync fails.
        """
        if log_fd is not None:
            try:
                os.fdatasync(log_fd)
            except OSError as exc:
                raise StorageError(f"cannot sync: {exc}") from exc

    # -- reading ---------------------------------------------------------------------

    def _reader(self, number: int) -> int | None:
        fd = self._readers.get(number)
        if fd is None:
            fd = self._open_segment(number, writing=False)
            if fd is None:
                return None
            if len(self._readers) >= _READERS:
                close_fd(self._readers.pop(next(iter(self._readers))))
            self._readers[number] = fd
        return fd

    def _records(self, digest: bytes) -> list[tuple[int, int, seg.SegmentRecord | None]]:
        """Every copy of ``digest`` in the segments: ``(segment, descriptor, record)``, the
        record None where its segment cannot be read. The map is caught up when it knows
        none, and rebuilt once when one it names is not there."""
        with self._lock:
            for attempt in range(2):
                found = self._query(lambda m: m.find(digest))
                assert isinstance(found, list)
                if not found and attempt == 0:
                    self._guarded(lambda: self._catch_up(writing=False))
                    continue
                copies: list[tuple[int, int, seg.SegmentRecord | None]] = []
                for number, offset, length, _ in found:
                    fd = self._reader(number)
                    if fd is None:
                        copies.append((number, -1, None))
                        continue
                    raw = os.pread(fd, seg.HEADER_SIZE, offset)
                    record = (seg.parse_header(raw, offset)
                              if len(raw) == seg.HEADER_SIZE else None)
                    if record is None or (record.digest, record.length) != (digest, length):
                        break
                    copies.append((number, fd, record))
                else:
                    return copies
                if attempt == 0:
                    self._guarded(self.rebuild)
            return []

    def _guarded(self, work: Callable[[], object]) -> None:
        with contextlib.suppress(OSError, sqlite3.Error):  # unreadable reads as missing
            work()

    def get(self, digest: bytes, limit: int | None = None) -> bytes | None:
        """The payload bytes for ``digest`` (of its first copy not erased), or None when
        absent; ``limit``: at most ``limit + 1`` bytes. A payload held for the next flush is
        read from where it is held."""
        with self._lock:
            held = self._held.get(digest)
            if held is not None:
                if held.data is not None:
                    return held.data if limit is None else held.data[:limit + 1]
                assert held.spool is not None
                held.spool.seek(0)
                return held.spool.read() if limit is None else held.spool.read(limit + 1)
            for _, fd, record in self._records(digest):
                if record is not None and record.state != seg.ERASED:
                    try:
                        return seg.read_data(fd, record, limit)
                    except OSError:
                        return None
            return None

    def open(self, digest: bytes) -> PayloadView | None:
        """The payload ``digest`` (its first copy not erased) open for reading, or None when
        absent; the caller closes it.

        Raises:
            OSError: if its segment cannot be opened.
        """
        for number, _, record in self._records(digest):
            if record is not None and record.state != seg.ERASED:
                fd = open_regular(self._path(number))
                return PayloadView(fd, record.data_offset, record.length)
        return None

    def check(self, digest: bytes) -> PayloadStatus:
        """Re-hash the stored copies of ``digest``: OK when one is intact (even one marked as
        being erased whose zeros were never written);
        :attr:`PayloadStatus.ERASING` when one is marked as being erased and holds nothing
        but zero bytes (a redaction cut short before its entry); MISSING when there is none
        (or every one is erased); else MISMATCH (also for a copy in a segment that cannot be
        read: :meth:`notices` says why)."""
        status = PayloadStatus.MISSING
        with self._lock:
            for _, fd, record in self._records(digest):
                if record is None:
                    status = PayloadStatus.MISMATCH
                    continue
                if record.state == seg.ERASED:
                    continue
                try:
                    found, zeros = seg.hash_data(fd, record)
                except OSError:
                    status = PayloadStatus.MISMATCH
                    continue
                if found == digest:  # intact (also marked, before its zeros were written)
                    return PayloadStatus.OK
                if record.state == seg.ERASING and zeros:
                    status = PayloadStatus.ERASING
                elif status is not PayloadStatus.ERASING:
                    status = PayloadStatus.MISMATCH
        return status

    def problem(self, digest: bytes) -> str | None:
        """None: a segment that cannot be read is named by :meth:`notices`, not per payload."""
        return None

    def describe(self, digest: bytes) -> str:
        """Where the payload ``digest`` is stored, in words."""
        return f"sha256:{digest.hex()} in {self.folder}"

    def stored(self) -> Iterator[bytes]:
        """Digest of every payload the segments hold (stored or being erased), in order, read
        from the map a page at a time (memory flat in their number)."""
        with self._lock:
            self._guarded(lambda: self._catch_up(writing=False))
        last = b""
        while page := self.map.after(last, _PAGE):
            yield from page
            last = page[-1]

    def copies(self, digest: bytes) -> list[tuple[Path, int, int, int]]:
        """Every copy of ``digest`` not erased: ``(segment file, offset of its first byte,
        length in bytes, state)`` (state 0 stored, 1 being erased)."""
        with self._lock:
            return [(Path(self._path(n)), r.data_offset, r.length, r.state)
                    for n, _, r in self._records(digest)
                    if r is not None and r.state != seg.ERASED]

    def notices(self) -> list[str]:
        """One line per segment that cannot be read, or that is damaged (every segment's
        record headers read, not its payloads: a damaged header hides what follows it), and
        one per segment whose records stop before its end (a torn tail: an append cut short,
        or a header edited to claim more bytes than follow it)."""
        torn: list[str] = []
        with self._lock:
            for number in self._segment_numbers():
                fd = self._reader(number)
                if fd is None:
                    continue
                with contextlib.suppress(OSError):
                    for item in seg.scan(fd):
                        if isinstance(item, seg.SegmentEnd) and not item.torn:
                            self._problems[number] = (f"is damaged at byte {item.offset}: "
                                                      f"{item.reason}")
                        elif isinstance(item, seg.SegmentEnd):
                            torn.append(f"payload segment {self._path(number)}: records stop "
                                        f"being readable at byte {item.offset}: {item.reason}"
                                        "; the next writer moves the bytes from there to "
                                        f"{self.root.parent / TORN_DIR}")
            return [f"payload segment {self._path(n)} {why}: not read"
                    if "damaged" not in why else f"payload segment {self._path(n)} {why}"
                    for n, why in sorted(self._problems.items())] + torn

    def _segment_numbers(self) -> list[int]:
        if not self._folder_safe():
            return []
        try:
            names = os.listdir(self.folder)
        except OSError:
            return []
        return sorted(n for n in map(seg.segment_number, names) if n is not None)

    def with_prefix(self, prefix: str) -> list[bytes]:
        """Digests of the stored payloads whose hex starts with ``prefix`` (lowercase hex)."""
        shift = 4 * (64 - len(prefix))
        value = int(prefix or "0", 16) if prefix else 0
        low = (value << shift).to_bytes(32, "big")
        top = (value + 1) << shift
        high = top.to_bytes(32, "big") if top < 1 << 256 else None
        with self._lock:
            self._guarded(lambda: self._catch_up(writing=False))
            found = self._query(lambda m: m.between(low, high))
        assert isinstance(found, list)
        return found

    # -- erasing ---------------------------------------------------------------------

    def scrub(self, digest: bytes) -> bool:
        """Mark every stored copy of ``digest`` as being erased (its state byte, synced),
        then overwrite its bytes with zeros in place and sync them; also a copy a migration
        cut short left as a file. False if there is none. The writer lock is held. (What no
        software erase reaches: blocks an SSD remaps, copy-on-write and snapshotting file
        systems, backups.)

        Raises:
            StorageError: if a copy cannot be marked, overwritten or synced; or if none is
                found while a segment is damaged or cannot be read (a copy may be hidden
                there: nothing can vouch that it is gone).
        """
        with self._lock:
            self._held.pop(digest, None)
            try:
                self._prepare()
                done = self._set_state(digest, seg.ERASING, zero=True)
                self.map.set_state(digest, seg.ERASING)
            except (OSError, sqlite3.Error) as exc:
                raise StorageError(f"cannot overwrite payload sha256:{digest.hex()}: "
                                   f"{exc}") from exc
        if self._legacy.scrub(digest) or done:
            return True
        hidden = self.notices()
        if hidden:
            raise StorageError(f"cannot tell whether payload sha256:{digest.hex()} is gone: "
                               f"{hidden[0]} (run verify)")
        return False

    def remove(self, digest: bytes) -> bool:
        """Mark every copy of ``digest`` erased (its state byte, synced) and drop it from the
        map, after :meth:`scrub`; also remove a file copy. False if there was none.

        Raises:
            StorageError: if a copy cannot be marked or synced.
        """
        with self._lock:
            try:
                done = self._set_state(digest, seg.ERASED, zero=False)
                self.map.drop(digest)
            except (OSError, sqlite3.Error) as exc:
                raise StorageError(f"cannot remove payload sha256:{digest.hex()}: "
                                   f"{exc}") from exc
        return self._legacy.remove(digest) or done

    def _set_state(self, digest: bytes, state: int, zero: bool) -> bool:
        copies = [(n, r) for n, _, r in self._records(digest)
                  if r is not None and r.state != seg.ERASED]
        fds: dict[int, int] = {}
        try:
            for number, _ in copies:
                if number not in fds:
                    fd = open_regular(self._path(number), os.O_RDWR)
                    fds[number] = fd
            for number, record in copies:
                os.pwrite(fds[number], bytes([state]), record.offset + seg.STATE_OFFSET)
            _sync_all(fds.values())
            if zero:
                for number, record in copies:
                    _zero(fds[number], record)
                _sync_all(fds.values())
        finally:
            for fd in fds.values():
                close_fd(fd)
        return bool(copies)

    def close(self) -> None:
        """Close every descriptor and the map (the store opens them again when used)."""
        with self._lock:
            self.discard()
            self._forget_active()
            for fd in self._readers.values():
                close_fd(fd)
            self._readers.clear()
            if self._map is not None:
                self._map.close()
                self._map = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _sync_all(fds: Iterable[int]) -> None:
    for fd in fds:
        os.fdatasync(fd)


def _zero(fd: int, record: seg.SegmentRecord) -> None:
    zeros = bytes(min(record.length, 1 << 20))
    at, end = record.data_offset, record.end
    while at < end:
        at += os.pwrite(fd, zeros[: end - at], at)
