"""Payload segment files (ledger format version 2): ``payloads/segments/NNNNNNNN.seg``, each
a run of self-describing payload records, appended to and never reordered.

A record (integers big-endian)::

    4   magic  b"ELPS"
    1   state  0 stored, 1 being erased (its bytes zeroed or being zeroed: a redaction
               cut short), 2 erased (its redaction recorded; its bytes are zeros)
    8   n, the payload's length in bytes
    32  SHA-256 of the payload (its digest: the name entries use)
    4   CRC-32 (zlib) of magic, n and digest (the state byte is left out: redaction
        rewrites it in place)
    n   the payload's bytes

The digest checks the bytes: a record is intact when they hash to it. What :func:`scan`
reads of a segment, from a record boundary on: :class:`SegmentRecord` items, then at most one
:class:`SegmentEnd` saying why it stopped before the end of the file: a *torn* tail (an
incomplete record, or nothing but zero bytes: an append a crash cut short, never
acknowledged) or *damage* (a header that fails its CRC, magic or state: nothing after it
can be found).
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

MAGIC = b"ELPS"
HEADER = struct.Struct(">4sBQ32sI")
HEADER_SIZE = HEADER.size  # 49 bytes
STATE_OFFSET = 4  # byte offset of the state byte in a record
STORED, ERASING, ERASED = 0, 1, 2
SEGMENT_DIR = "segments"
SEGMENT_BYTES = 64 << 20
"""A writer starts a new segment once the current one holds this many bytes (a record is
never split: a larger payload makes its segment larger)."""
_CHUNK = 1 << 20  # bytes per read


def segment_name(number: int) -> str:
    """File name of segment ``number`` (1-based): ``00000001.seg``."""
    return f"{number:08d}.seg"


def segment_number(name: str) -> int | None:
    """The number a segment file ``name`` carries, or None when it is not one."""
    stem, dot, ext = name.partition(".")
    if dot and ext == "seg" and len(stem) == 8 and stem.isdigit() and int(stem) > 0:
        return int(stem)
    return None


def header(digest: bytes, length: int, state: int = STORED) -> bytes:
    """The 49 header bytes of a record holding ``length`` bytes named ``digest``."""
    crc = zlib.crc32(MAGIC + length.to_bytes(8, "big") + digest)
    return HEADER.pack(MAGIC, state, length, digest, crc)


@dataclass(frozen=True)
class SegmentRecord:
    """One record: its ``offset`` in the segment (of its header), ``state``, payload
    ``length`` (bytes) and ``digest`` (32 bytes)."""

    offset: int
    state: int
    length: int
    digest: bytes

    @property
    def end(self) -> int:
        """Offset of the byte after the record."""
        return self.offset + HEADER_SIZE + self.length

    @property
    def data_offset(self) -> int:
        """Offset of the payload's first byte."""
        return self.offset + HEADER_SIZE


@dataclass(frozen=True)
class SegmentEnd:
    """Where and why :func:`scan` stopped before the end of a segment: ``torn`` (an
    unfinished append: its bytes moved to ``torn/`` by the next writer) or damage (``torn``
    False)."""

    offset: int
    torn: bool
    reason: str


def parse_header(raw: bytes, offset: int) -> SegmentRecord | None:
    """The record whose 49 header bytes are ``raw``, or None when they fail their magic,
    CRC or state."""
    magic, state, length, digest, crc = HEADER.unpack(raw)
    if (magic != MAGIC or state > ERASED
            or zlib.crc32(MAGIC + length.to_bytes(8, "big") + digest) != crc):
        return None
    return SegmentRecord(offset, state, length, digest)


def _zeros_from(fd: int, offset: int, size: int) -> bool:
    while offset < size:
        chunk = os.pread(fd, min(_CHUNK, size - offset), offset)
        if not chunk or chunk.count(0) != len(chunk):
            return False
        offset += len(chunk)
    return True


def scan(fd: int, offset: int = 0) -> Iterator[SegmentRecord | SegmentEnd]:
    """Records of the open segment ``fd`` from the record boundary ``offset`` to its end
    (headers only; the payload bytes are not read), then a :class:`SegmentEnd` if it stopped
    short.

    Raises:
        OSError: if it cannot be read.
    """
    size = os.fstat(fd).st_size
    while offset < size:
        raw = os.pread(fd, HEADER_SIZE, offset)
        record = parse_header(raw, offset) if len(raw) == HEADER_SIZE else None
        if record is None:
            if len(raw) < HEADER_SIZE or _zeros_from(fd, offset, size):
                yield SegmentEnd(offset, True, "an incomplete record (an append cut short)")
            else:
                yield SegmentEnd(offset, False, "a record header fails its CRC-32")
            return
        if record.end > size:
            yield SegmentEnd(offset, True, "a record runs past the end of the file")
            return
        yield record
        offset = record.end


def read_data(fd: int, record: SegmentRecord, limit: int | None = None) -> bytes:
    """The payload bytes of ``record`` (at most ``limit + 1`` when ``limit`` is given).

    Raises:
        OSError: if they cannot be read.
    """
    want = record.length if limit is None else min(record.length, limit + 1)
    parts, at, end = [], record.data_offset, record.data_offset + want
    while at < end:
        chunk = os.pread(fd, min(_CHUNK, end - at), at)
        if not chunk:
            break
        parts.append(chunk)
        at += len(chunk)
    return b"".join(parts)


def hash_data(fd: int, record: SegmentRecord) -> tuple[bytes, bool]:
    """SHA-256 of ``record``'s payload bytes (read 1 MiB at a time), and whether they are all
    zero bytes.

    Raises:
        OSError: if they cannot be read.
    """
    hasher, zeros = hashlib.sha256(), True
    at, end = record.data_offset, record.end
    while at < end:
        chunk = os.pread(fd, min(_CHUNK, end - at), at)
        if not chunk:
            return b"", False
        hasher.update(chunk)
        zeros = zeros and chunk.count(0) == len(chunk)
        at += len(chunk)
    return hasher.digest(), zeros
