"""The log's frame format, and reading it (pure: bytes in, records out).

Frame layout (all integers big-endian)::

    u32 word      bit 31: "more follows" (the record is not the last of an atomic group)
                  bits 0-30: length of the record in bytes
    u32 crc32     CRC-32 (zlib) of the 4-byte word above
    bytes         the record (one canonical entry)
    u32 crc32     CRC-32 (zlib) of the record

An append writes one group of records (the last has "more follows" clear). Bytes after
the last complete group are a *torn tail* (a crash mid-append, or a zero-filled tail);
a frame header that fails its CRC is :class:`Damage`, and nothing after it can be read.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple

from evidence_ledger.format.errors import StorageError

MORE_FLAG = 0x8000_0000
MAX_RECORD = 16 * 1024 * 1024
_HEADER = struct.Struct(">II")
_CRC = struct.Struct(">I")
FRAME_OVERHEAD = _HEADER.size + _CRC.size
"""Bytes a frame adds around its record."""
READ_SIZE = 1 << 20
"""Bytes :func:`scan_stream` reads at a time."""


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


def scan_stream(fh: BinaryIO, size: int, offset: int = 0, index: int = 0) -> Iterator[ScanItem]:
    """Read frames from ``fh`` (``size`` bytes long) from byte ``offset`` (record ``index``):
    yield the records of complete groups, then at most one :class:`Damage` or
    :class:`TornTail`. Never raises on bad bytes.

    Reads :data:`READ_SIZE` bytes at a time and parses frames out of that buffer."""
    fh.seek(offset)
    buf, pos = b"", 0  # buf[pos] is the byte at ``offset``
    pending: list[Record] = []  # records of the group being read
    group_start = 0
    while offset < size:
        if len(buf) - pos < _HEADER.size:
            buf, pos = buf[pos:] + fh.read(max(READ_SIZE, _HEADER.size)), 0
            if len(buf) < _HEADER.size:
                break
        word, crc = _HEADER.unpack_from(buf, pos)
        if zlib.crc32(buf[pos:pos + 4]) != crc:
            rest = buf[pos:] + fh.read()
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
        frame_size = FRAME_OVERHEAD + length
        if len(buf) - pos < frame_size:
            buf, pos = buf[pos:] + fh.read(max(READ_SIZE, frame_size)), 0
            if len(buf) < frame_size:
                break
        start = pos + _HEADER.size
        data = buf[start:start + length]
        crc_ok = zlib.crc32(data) == _CRC.unpack_from(buf, start + length)[0]
        if not pending:
            group_start = offset
        pending.append(Record(index + len(pending), offset, data, crc_ok))
        pos += frame_size
        offset += frame_size
        if not word & MORE_FLAG:
            yield from pending
            index += len(pending)
            pending = []
    end = group_start if pending else offset
    if end < size:
        yield TornTail(end, size - end, len(pending))


def scan_bytes(data: bytes) -> Iterator[ScanItem]:
    """Scan a whole log held in memory, as :meth:`FileLogStore.scan` scans the file."""
    return scan_stream(io.BytesIO(data), len(data))


