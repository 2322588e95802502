"""The log's frame format: writing a frame, and the one parser every reader of it uses.

Frame layout (FORMAT.md "Frames"; all integers big-endian)::

    u32 word      bit 31: "more follows" (the record is not the last of an atomic group)
                  bits 0-30: length of the record in bytes
    u32 crc32     CRC-32 (zlib) of the 4-byte word above
    bytes         the record (one canonical entry)
    u32 crc32     CRC-32 (zlib) of the record

An append writes one group of records (the last has "more follows" clear). Bytes after
the last complete group are a *torn tail* (a crash mid-append, or a zero-filled tail);
a frame header that fails its CRC is :class:`Damage`, and nothing after it can be read.

No other module knows this layout. :func:`split_frames` parses the frames in a buffer
(the only frame parser; on the native core where it is built, see
:mod:`evidence_ledger.format.core`); on it are built :func:`scan_stream` (a whole log, as records,
damage and torn tail: every reader's view), :func:`read_frame` (one frame at a byte
offset of an open file, by positioned reads) and any faster pass that wants only the
records' bytes (:func:`evidence_ledger.storage.log_proofs.log_leaf_hashes`).
"""

from __future__ import annotations

import errno
import io
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, NamedTuple

from evidence_ledger.format import core
from evidence_ledger.format.errors import StorageError

MORE_FLAG = 0x8000_0000
MAX_RECORD = 16 * 1024 * 1024
_HEADER = struct.Struct(">II")  # u32 word, u32 CRC-32 of the word
_CRC = struct.Struct(">I")
_LENGTH_MASK = ~MORE_FLAG  # the word's bits 0-30
HEADER_SIZE = _HEADER.size
"""Bytes of a frame header (the word and its CRC-32): 8."""
FRAME_OVERHEAD = _HEADER.size + _CRC.size
"""Bytes a frame adds around its record: 12."""
READ_SIZE = 1 << 20
"""Bytes :func:`scan_stream` reads at a time."""
_FIRST_READ = 1024
"""Record bytes :func:`read_frame` reads with the header (one read for most entries)."""
_unpack_header, _unpack_crc = _HEADER.unpack_from, _CRC.unpack_from
BAD_HEADER = "frame header fails its CRC-32"
"""The :attr:`FrameRun.problem` (and :attr:`Damage.reason`) of a frame header that
fails its CRC-32."""


class Record(NamedTuple):
    """One complete record read from the log (a named tuple: one is made per entry
    scanned, and a tuple is made in a third of the time of a frozen dataclass).

    Attributes:
        index: 0-based position of the record in the log (the entry's expected seq).
        offset: byte offset of the frame in the log file.
        data: the record bytes.
        crc_ok: False when the record's CRC-32 does not match (a damaged record).
    """

    index: int  # type: ignore[assignment]  # the field shadows tuple.index, by design
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


class FrameRun(NamedTuple):
    """The consecutive frames :func:`split_frames` parsed from a buffer.

    Offsets are into the buffer. The run ends at the end of the buffer (or of its
    ``limit``), inside a frame the buffer does not hold whole, or at a frame header that
    fails (then :attr:`problem` says why).

    Attributes:
        records: the record bytes of every complete frame, in order.
        bad_records: positions in ``records`` of the records that fail their CRC-32
            (usually empty).
        groups: ``records[:groups]`` are the records of complete groups: the last of
            them has "more follows" clear; the rest begin a group that goes on.
        group_end: offset just past ``records[groups - 1]``'s frame (the start offset
            when ``groups`` is 0): where a torn tail starts if the log ends in this run.
        end: offset just past the last frame in ``records``.
        need: bytes, from ``end``, of the next frame when its header checks out but the
            buffer ends inside the frame (:data:`HEADER_SIZE` when the buffer ends inside
            or right before a header; 0 when :attr:`problem` is set).
        problem: "" or why the frame at ``end`` cannot be read (:data:`BAD_HEADER`, or
            its length is larger than :data:`MAX_RECORD`): the :attr:`Damage.reason`.
    """

    records: list[bytes]
    bad_records: list[int]
    groups: int
    group_end: int
    end: int
    need: int
    problem: str


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


def split_frames_reference(buf: bytes, start: int = 0, limit: int | None = None) -> FrameRun:
    """Parse the frames in ``buf`` from offset ``start`` (the frame parser of the log).

    Every frame that begins before offset ``limit`` (default ``len(buf)``) and that
    ``buf`` holds whole is parsed: its header CRC-32 and length are checked, then its
    record's CRC-32. Parsing stops at the first header that fails (:attr:`FrameRun.problem`)
    or at a frame the buffer does not hold whole (:attr:`FrameRun.need`). A record that
    fails its CRC-32 does not stop it (:attr:`FrameRun.bad_records`). Never raises on
    bad bytes.

    Returns:
        A :class:`FrameRun`; O(bytes parsed), one slice per record.
    """
    records: list[bytes] = []
    bad: list[int] = []
    groups, group_end, pos = 0, start, start
    size = len(buf)
    stop = size if limit is None or limit > size else limit
    unpack_header, unpack_crc, crc32 = _unpack_header, _unpack_crc, zlib.crc32
    head, tail, overhead = _HEADER.size, _CRC.size, FRAME_OVERHEAD
    need, problem = head, ""
    while pos < stop and pos + head <= size:
        word, crc = unpack_header(buf, pos)
        if crc32(buf[pos : pos + 4]) != crc:
            need, problem = 0, BAD_HEADER
            break
        length = word & _LENGTH_MASK
        if length > MAX_RECORD:
            need, problem = 0, f"frame length {length} is too large"
            break
        end = pos + overhead + length
        if end > size:
            need = overhead + length
            break
        data = buf[pos + head : end - tail]
        if crc32(data) != unpack_crc(buf, end - tail)[0]:
            bad.append(len(records))
        records.append(data)
        pos = end
        if not word & MORE_FLAG:
            groups, group_end = len(records), pos
    return FrameRun(records, bad, groups, group_end, pos, need, problem)


_compiled: Any = core.compiled


def split_frames_native(buf: bytes, start: int = 0, limit: int | None = None) -> FrameRun:
    """:func:`split_frames_reference` on the native core (``start`` >= 0, ``limit`` within
    64 bits; :data:`evidence_ledger.format.core.compiled` must be set)."""
    return FrameRun._make(_compiled.split_frames(buf, start, limit))


split_frames = split_frames_reference if core.native is None else split_frames_native
"""The frame parser of the log: :func:`split_frames_reference`, on the core in use."""


def scan_stream(fh: BinaryIO, size: int, offset: int = 0, index: int = 0) -> Iterator[ScanItem]:
    """Read frames from ``fh`` (``size`` bytes long) from byte ``offset`` (record ``index``):
    yield the records of complete groups, then at most one :class:`Damage` or
    :class:`TornTail`. Never raises on bad bytes.

    Reads :data:`READ_SIZE` bytes at a time (more for a larger frame) and parses the
    frames in them with :func:`split_frames`. A header that fails its CRC-32 followed by
    nothing but zero bytes to the end of the file is a torn tail (a zero-filled tail left
    by a crash), not damage."""
    fh.seek(offset)
    buf, pos = b"", 0  # buf[pos] is the byte at ``offset``
    pending: list[Record] = []  # records of the group being read
    need = _HEADER.size  # bytes the next frame takes, as far as is known
    while offset < size:
        if len(buf) - pos < need:
            buf, pos = buf[pos:] + fh.read(max(READ_SIZE, need)), 0
            if len(buf) < need:
                break
        run = split_frames(buf, pos, pos + size - offset)
        at = index + len(pending)
        records = []
        for data in run.records:
            records.append(Record(at, offset, data, True))
            at += 1
            offset += FRAME_OVERHEAD + len(data)
        for bad in run.bad_records:
            records[bad] = records[bad]._replace(crc_ok=False)
        if run.groups:
            yield from pending
            yield from records[: run.groups]
            index += len(pending) + run.groups
            pending = records[run.groups :]
        else:
            pending += records
        pos, need = run.end, run.need
        if run.problem:
            if run.problem == BAD_HEADER and _zeros_to_the_end(buf[pos:], fh):
                break  # zero-filled tail left by a crash: torn, not tampered
            yield from pending
            yield Damage(index + len(pending), offset, run.problem)
            return
    end = pending[0].offset if pending else offset
    if end < size:
        yield TornTail(end, size - end, len(pending))


def _zeros_to_the_end(head: bytes, fh: BinaryIO) -> bool:
    """True when ``head`` and the rest of ``fh`` hold nothing but zero bytes; reads
    :data:`READ_SIZE` bytes at a time, so memory stays bounded whatever the tail's size,
    and skips the holes of a sparse file unread (``SEEK_DATA``, where the file has a
    descriptor and the system the call)."""
    if head.count(0) != len(head):
        return False
    while True:
        _skip_hole(fh)
        chunk = fh.read(READ_SIZE)
        if not chunk:
            return True
        if chunk != _ZEROS[: len(chunk)]:
            return False


def _skip_hole(fh: BinaryIO) -> None:
    """Move ``fh`` past the hole it stands in, if any (a hole reads as zero bytes)."""
    try:
        fd, here = fh.fileno(), fh.tell()
        fh.seek(os.lseek(fd, here, os.SEEK_DATA))
    except OSError as exc:  # ENXIO: nothing but holes to the end
        if exc.errno == errno.ENXIO:
            fh.seek(0, os.SEEK_END)
    except (AttributeError, ValueError, io.UnsupportedOperation):  # no descriptor: read on
        pass


_ZEROS = bytes(READ_SIZE)


def scan_bytes(data: bytes) -> Iterator[ScanItem]:
    """Scan a whole log held in memory, as :meth:`FileLogStore.scan` scans the file."""
    return scan_stream(io.BytesIO(data), len(data))


class Frame(NamedTuple):
    """One frame read by :func:`read_frame`.

    Attributes:
        offset: byte offset of the frame in the file.
        data: the record bytes (its CRC-32 checked).
        more: the "more follows" bit: not the last record of its group.
    """

    offset: int
    data: bytes
    more: bool

    @property
    def end(self) -> int:
        """Byte offset just past this frame."""
        return self.offset + FRAME_OVERHEAD + len(self.data)


def read_frame(fd: int, offset: int, skip: int = 0) -> Frame | None:
    """The frame ``skip`` frames after the frame at byte ``offset`` of the log open at
    ``fd``, by positioned reads (the file position is not used).

    Costs one read of each skipped header (8 bytes) and one read of the frame (two for a
    record over 1,024 bytes). A frame that is cut short, whose header fails (its CRC-32,
    or a length over :data:`MAX_RECORD`) or whose record fails its CRC-32, on the way or
    at the end, gives None: this reads one frame, and says nothing about torn tails or
    groups (:func:`scan_stream` does).

    Raises:
        OSError: if a read fails.
    """
    for _ in range(skip):
        header = os.pread(fd, _HEADER.size, offset)
        run = split_frames(header)
        if len(header) < _HEADER.size or run.problem:
            return None
        offset += run.need  # the whole frame: the header checks out
    buf = os.pread(fd, _HEADER.size + _FIRST_READ, offset)
    run = split_frames(buf, 0, 1)
    if not run.records and len(buf) >= _HEADER.size and run.need > len(buf):
        buf = os.pread(fd, run.need, offset)
        run = split_frames(buf, 0, 1)
    if not run.records or run.bad_records:
        return None
    return Frame(offset, run.records[0], not run.groups)
