"""Minimal floors over ``log.bin``: the least any reader of the log must do, written with
the standard library and ``msgpack`` only.

Nothing here imports ``evidence_ledger``: a floor built on the project's frame scanner or
decoder would move with the core in use (native or pure), and hide their cost. The frame
layout is FORMAT.md's "Frames", restated so that this module needs none of ours (all
integers big-endian)::

    u32 word      bit 31: "more follows"; bits 0-30: length of the record in bytes
    u32 crc32     CRC-32 (zlib) of the 4-byte word above
    bytes         the record (one canonical entry, MessagePack)
    u32 crc32     CRC-32 (zlib) of the record

Hashes are RFC 9162 §2.1.1: the leaf hash is SHA-256 of ``0x00 || record``, an interior
node SHA-256 of ``0x01 || left || right``; the entry hash is SHA-256 of the record.
"""

from __future__ import annotations

import gc
import hashlib
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import msgpack

READ_SIZE = 1 << 20
"""Bytes read at a time (as the project's scanner reads)."""
_HEADER = struct.Struct(">II")
_CRC = struct.Struct(">I")
_LENGTH_MASK = 0x7FFF_FFFF
_OVERHEAD = _HEADER.size + _CRC.size


def records(log: Path) -> Iterator[bytes]:
    """The record bytes of every complete frame of ``log`` (a ``log.bin``), in order,
    read :data:`READ_SIZE` bytes at a time; stops at a torn tail (an incomplete last frame).

    Raises:
        ValueError: a frame header or a record fails its CRC-32 (damage: the floor reads
            only intact logs).
    """
    header, trailer, crc32 = _HEADER.unpack_from, _CRC.unpack_from, zlib.crc32
    buffer = b""
    with open(log, "rb") as file:
        while chunk := file.read(READ_SIZE):
            buffer += chunk
            pos, size = 0, len(buffer)
            while pos + _HEADER.size <= size:
                word, check = header(buffer, pos)
                if crc32(buffer[pos : pos + 4]) != check:
                    raise ValueError("a frame header fails its CRC-32")
                end = pos + _OVERHEAD + (word & _LENGTH_MASK)
                if end > size:
                    break
                data = buffer[pos + _HEADER.size : end - _CRC.size]
                if crc32(data) != trailer(buffer, end - _CRC.size)[0]:
                    raise ValueError("a record fails its CRC-32")
                yield data
                pos = end
            buffer = buffer[pos:]


def verify_floor(log: Path) -> tuple[int, bytes]:
    """The floor of ``verify`` over ``log``: per record (:func:`records`), unpack the
    MessagePack, take the entry hash and the leaf hash, and fold the leaf into the compact
    range of the tree so far (RFC 9162: one peak per set bit of the size, interior hashes
    as peaks merge). No canonical-form check, no schema, no chain, no rules. The cyclic GC
    is paused, as ``verify_ledger`` pauses it.

    Returns:
        (entries read, the Merkle tree head of their leaves: 32 bytes).

    Raises:
        ValueError: as :func:`records`; msgpack's errors for a record that is not
            MessagePack.
    """
    sha256, unpack = hashlib.sha256, msgpack.unpackb
    peaks: list[bytes] = []
    size = 0
    enabled = gc.isenabled()
    gc.disable()
    try:
        for data in records(log):
            unpack(data)
            sha256(data).digest()
            node = sha256(b"\x00" + data).digest()
            merges = size
            while merges & 1:  # a full subtree of the same height to the left: merge
                node = sha256(b"\x01" + peaks.pop() + node).digest()
                merges >>= 1
            peaks.append(node)
            size += 1
    finally:
        if enabled:
            gc.enable()
    root = peaks.pop() if peaks else sha256(b"").digest()
    while peaks:
        root = sha256(b"\x01" + peaks.pop() + root).digest()
    return size, root
