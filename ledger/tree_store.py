"""The derived hash store: the ledger's RFC 9162 Merkle tree kept as C2SP tlog-tiles.

The log (``log.bin``) is the only source of truth. This store is a cache derived from
it: deleting ``<ledger>/tree/`` and running any proof or checkpoint command again
rebuilds it and gives the same hashes. The append path never touches it; it is
brought up to date incrementally (only entries appended since the last update are
hashed) before a proof or checkpoint is made.

Layout of ``<ledger>/tree/``::

    tile/<L>/<N>    full tiles (c2sp.org/tlog-tiles): 256 hashes of 32 bytes, 8,192
                    bytes, immutable. <N> is written in 3-digit path elements, all but
                    the last prefixed with "x" (index 1234067 -> x001/x234/067).
    state.json      what the tiles cover, replaced atomically (write, fsync, rename):
                    {"version": 1, "size": n, "end_offset": int, "last_offset": int,
                     "last_leaf": b64, "partial_tiles": [b64, ...]}
                    ``partial_tiles[L]`` is the partial tile at level L: the
                    ``(n >> 8L) & 255`` rightmost level-L hashes not yet in a full tile.
    offsets.bin     u64 big-endian byte offset in log.bin of every 256th entry
                    (entry ``256 * i`` at position ``i``), to find an entry quickly.
    lock            flock held while updating.

Tile maths (c2sp.org/tlog-tiles): hash ``i`` of the tile at level ``L`` and index
``N`` is MTH(D[(256N + i) * 256**L : (256N + i + 1) * 256**L]). A tree of ``n``
leaves has ``n >> 8L`` hashes at level ``L``, of which the first
``256 * ((n >> 8L) >> 8)`` sit in full tiles.

A Merkle node at height ``h = 8L + b`` (``0 <= b < 8``) and index ``k`` is the
perfect subtree over the ``2**b`` level-``L`` hashes ``[k * 2**b, (k + 1) * 2**b)``,
which always lie in one tile; reading it costs one tile read and at most 127 hashes,
so a proof at any tree size costs O(log n) tile reads.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import json
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import EvidenceError, StorageError, UsageError
from .log import Ledger
from .merkle import EMPTY_ROOT, HASH_SIZE, leaf_hash, node_hash
from .store import MAX_RECORD, MORE_FLAG, Damage, Record, TornTail

__all__ = [
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "TREE_DIR",
    "TileBuilder",
    "TiledTree",
    "TreeStore",
    "tile_path",
]

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
TILE_BYTES = TILE_WIDTH * HASH_SIZE
TREE_DIR = "tree"
STATE_NAME = "state.json"
OFFSETS_NAME = "offsets.bin"
LOCK_NAME = "lock"
STATE_VERSION = 1
MAX_LEVEL = 63
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_FRAME_HEADER = struct.Struct(">II")  # ledger.store frame: u32 word, u32 CRC-32 of the word
_TILE_CACHE = 64

ReadTile = Callable[[int, int], bytes]
WriteTile = Callable[[int, int, bytes], None]


def tile_path(level: int, index: int, width: int | None = None) -> str:
    """The c2sp.org/tlog-tiles path of a tile, ``tile/<L>/<N>[.p/<W>]``.

    Args:
        level: tile level, ``0 <= level <= 63``.
        index: tile index within the level, ``index >= 0``.
        width: for a partial tile, its width ``1 <= width <= 255``; None for a full tile.

    Raises:
        UsageError: if an argument is out of range.
    """
    if not 0 <= level <= MAX_LEVEL:
        raise UsageError(f"tile level must be in 0..{MAX_LEVEL}, got {level}")
    if index < 0:
        raise UsageError(f"tile index must be >= 0, got {index}")
    groups: list[str] = []
    n = index
    while True:
        n, group = divmod(n, 1000)
        groups.append(f"{group:03d}")
        if n == 0:
            break
    groups.reverse()
    encoded = "/".join([f"x{g}" for g in groups[:-1]] + [groups[-1]])
    path = f"tile/{level}/{encoded}"
    if width is not None:
        if not 1 <= width < TILE_WIDTH:
            raise UsageError(f"partial tile width must be in 1..{TILE_WIDTH - 1}, got {width}")
        path += f".p/{width}"
    return path


def _perfect_root(hashes: bytes) -> bytes:
    """MTH of a power-of-two run of concatenated 32-byte hashes."""
    level = [hashes[i : i + HASH_SIZE] for i in range(0, len(hashes), HASH_SIZE)]
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


class TiledTree:
    """A read-only view of the Merkle tree of ``size`` leaves, stored as tiles.

    Implements :class:`ledger.proofs.HashSource`.

    Args:
        size: number of leaves.
        partials: ``partials[L]`` is the partial tile at level ``L`` as concatenated
            32-byte hashes (``(size >> 8L) & 255`` of them); missing levels are empty.
        read_tile: ``read_tile(level, index)`` returns a full tile (8,192 bytes).
    """

    def __init__(self, size: int, partials: Sequence[bytes], read_tile: ReadTile) -> None:
        self.size = size
        self._partials = list(partials)
        self._read_tile = read_tile
        self._cache: dict[tuple[int, int], bytes] = {}
        levels = max(len(self._partials), (size.bit_length() + TILE_HEIGHT - 1) // TILE_HEIGHT)
        self._partials += [b""] * (levels - len(self._partials))
        for level, partial in enumerate(self._partials):
            want = ((size >> (TILE_HEIGHT * level)) & (TILE_WIDTH - 1)) * HASH_SIZE
            if len(partial) != want:
                raise EvidenceError(
                    f"tree store: partial tile at level {level} is {len(partial)} bytes, "
                    f"want {want} for size {size}"
                )

    @classmethod
    def from_leaf_hashes(cls, leaves: Iterable[bytes]) -> TiledTree:
        """Build a tree in memory from 32-byte leaf hashes (tests, small trees)."""
        tiles: dict[tuple[int, int], bytes] = {}

        def write(level: int, index: int, data: bytes) -> None:
            tiles[(level, index)] = data

        builder = TileBuilder(write_tile=write)
        for leaf in leaves:
            builder.append(leaf)
        return cls(builder.size, builder.partials(), lambda level, index: tiles[(level, index)])

    def _tile(self, level: int, index: int) -> bytes:
        count = self.size >> (TILE_HEIGHT * level)
        if (index + 1) * TILE_WIDTH <= count:
            key = (level, index)
            tile = self._cache.get(key)
            if tile is None:
                tile = self._read_tile(level, index)
                if len(tile) != TILE_BYTES:
                    raise EvidenceError(
                        f"tree store: tile {tile_path(level, index)} is {len(tile)} bytes, "
                        f"want {TILE_BYTES} (delete the tree directory to rebuild it)"
                    )
                if len(self._cache) >= _TILE_CACHE:
                    self._cache.clear()
                self._cache[key] = tile
            return tile
        if index == count >> TILE_HEIGHT:
            return self._partials[level]
        raise UsageError(f"no tile at level {level} index {index} in a tree of size {self.size}")

    def node(self, level: int, index: int) -> bytes:
        """Hash of the perfect subtree over leaves ``[index * 2**level, (index+1) * 2**level)``.

        Requires ``(index + 1) * 2**level <= size``. Returns 32 bytes.

        Raises:
            UsageError: if the subtree is not complete in this tree.
            EvidenceError: if a stored tile is damaged.
        """
        if level < 0 or index < 0 or (index + 1) << level > self.size:
            raise UsageError(
                f"want (index + 1) * 2**level <= size, got level {level}, index {index}, "
                f"size {self.size}"
            )
        tile_level, height = divmod(level, TILE_HEIGHT)
        first = index << height
        tile_index, offset = divmod(first, TILE_WIDTH)
        tile = self._tile(tile_level, tile_index)
        run = tile[offset * HASH_SIZE : (offset + (1 << height)) * HASH_SIZE]
        return _perfect_root(run)

    def leaf(self, index: int) -> bytes:
        """Leaf hash ``index`` (32 bytes); requires ``0 <= index < size``."""
        return self.node(0, index)

    def root(self, size: int | None = None) -> bytes:
        """MTH(D[0:size]) (RFC 9162 §2.1.1), 32 bytes; ``size`` defaults to the tree size.

        Requires ``0 <= size <= self.size``; SHA-256("") for the empty tree.

        Raises:
            UsageError: if ``size`` is out of range.
        """
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise UsageError(f"want 0 <= size <= {self.size}, got size {size}")
        if size == 0:
            return EMPTY_ROOT
        peaks: list[bytes] = []
        start = 0
        for level in range(size.bit_length() - 1, -1, -1):
            if size >> level & 1:
                peaks.append(self.node(level, start >> level))
                start += 1 << level
        root = peaks[-1]
        for peak in reversed(peaks[:-1]):
            root = node_hash(peak, root)
        return root


class TileBuilder:
    """Append leaf hashes; emit each full tile once, keep the partial tiles.

    Args:
        size: leaves already covered (0 for a new tree).
        partials: the partial tiles for ``size`` (see :class:`TiledTree`).
        write_tile: called as ``write_tile(level, index, data)`` with every tile that
            becomes full (8,192 bytes), lowest level first.
    """

    def __init__(
        self,
        size: int = 0,
        partials: Sequence[bytes] = (),
        write_tile: WriteTile | None = None,
    ) -> None:
        self.size = size
        self._partials = [bytearray(p) for p in partials]
        self._write_tile = write_tile

    def append(self, leaf: bytes) -> None:
        """Add one 32-byte leaf hash at index ``size``."""
        self.size += 1
        level, value = 0, leaf
        while True:
            if len(self._partials) <= level:
                self._partials.append(bytearray())
            partial = self._partials[level]
            partial += value
            if len(partial) < TILE_BYTES:
                return
            index = (self.size >> (TILE_HEIGHT * level)) // TILE_WIDTH - 1
            data = bytes(partial)
            if self._write_tile is not None:
                self._write_tile(level, index, data)
            partial.clear()
            level, value = level + 1, _perfect_root(data)

    def partials(self) -> list[bytes]:
        """The current partial tiles, level 0 first, trailing empty levels dropped."""
        out = [bytes(p) for p in self._partials]
        while out and not out[-1]:
            out.pop()
        return out


@dataclass(frozen=True)
class _State:
    size: int
    end_offset: int
    last_offset: int
    last_leaf: bytes
    partials: list[bytes]

    def to_json(self) -> bytes:
        doc = {
            "version": STATE_VERSION,
            "size": self.size,
            "end_offset": self.end_offset,
            "last_offset": self.last_offset,
            "last_leaf": base64.b64encode(self.last_leaf).decode("ascii"),
            "partial_tiles": [base64.b64encode(p).decode("ascii") for p in self.partials],
        }
        return json.dumps(doc, indent=1).encode("ascii") + b"\n"

    @classmethod
    def from_json(cls, data: bytes, where: Path) -> _State:
        try:
            doc: Any = json.loads(data)
            if doc.get("version") != STATE_VERSION:
                raise ValueError(f"version {doc.get('version')!r}, want {STATE_VERSION}")
            state = cls(
                size=_nonneg(doc["size"]),
                end_offset=_nonneg(doc["end_offset"]),
                last_offset=_nonneg(doc["last_offset"]),
                last_leaf=base64.b64decode(doc["last_leaf"], validate=True),
                partials=[base64.b64decode(p, validate=True) for p in doc["partial_tiles"]],
            )
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise EvidenceError(
                f"tree store state {where} is unreadable ({exc}); delete {where.parent} "
                "to rebuild it"
            ) from exc
        return state


def _nonneg(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{value!r} is not a non-negative integer")
    return value


_EMPTY = _State(0, 0, 0, b"", [])


def _read_frame(log: Path, offset: int, skip: int) -> bytes | None:
    """The record ``skip`` frames after the frame at ``offset``, or None if unreadable."""
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            for remaining in range(skip, -1, -1):
                header = fh.read(_FRAME_HEADER.size)
                if len(header) < _FRAME_HEADER.size:
                    return None
                word, crc = _FRAME_HEADER.unpack(header)
                length = word & ~MORE_FLAG
                if zlib.crc32(header[:4]) != crc or length > MAX_RECORD:
                    return None
                if remaining:
                    fh.seek(length + 4, os.SEEK_CUR)
                    continue
                body = fh.read(length + 4)
                if (
                    len(body) < length + 4
                    or zlib.crc32(body[:length]) != _U32.unpack(body[length:])[0]
                ):
                    return None
                return body[:length]
    except OSError:
        return None
    return None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class TreeStore:
    """The tiles of one ledger, in ``<ledger>/tree/`` (see the module docstring).

    Args:
        ledger: the ledger (or its directory).
    """

    def __init__(self, ledger: Ledger | str | os.PathLike[str] | None = None) -> None:
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self.directory = self.ledger.directory / TREE_DIR
        self.state_path = self.directory / STATE_NAME
        self.offsets_path = self.directory / OFFSETS_NAME

    # -- reading -------------------------------------------------------------------

    def _read_state(self) -> _State:
        try:
            data = self.state_path.read_bytes()
        except FileNotFoundError:
            return _EMPTY
        except OSError as exc:
            raise EvidenceError(f"cannot read {self.state_path}: {exc.strerror}") from exc
        return _State.from_json(data, self.state_path)

    def _read_tile(self, level: int, index: int) -> bytes:
        path = self.directory / tile_path(level, index)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise EvidenceError(
                f"tree store: cannot read {path} ({exc.strerror}); delete {self.directory} "
                "to rebuild it"
            ) from exc

    def snapshot(self) -> TiledTree:
        """The tree as last stored, without reading the log (may lag behind it)."""
        state = self._read_state()
        return TiledTree(state.size, state.partials, self._read_tile)

    def entry_offset(self, index: int) -> tuple[int, int]:
        """``(byte offset, seq)`` of a log entry at or before ``index`` to scan from.

        Uses ``offsets.bin`` (every 256th entry); falls back to ``(0, 0)``.
        """
        slot = index // TILE_WIDTH
        try:
            with open(self.offsets_path, "rb") as fh:
                fh.seek(slot * _U64.size)
                raw = fh.read(_U64.size)
        except OSError:
            return 0, 0
        if len(raw) != _U64.size:
            return 0, 0
        return _U64.unpack(raw)[0], slot * TILE_WIDTH

    def log_leaf(self, index: int) -> bytes:
        """Leaf hash SHA-256(0x00 || entry bytes) of entry ``index``, read from the log.

        Seeks to the nearest indexed entry (``offsets.bin``) and walks at most 255
        frame headers (see :mod:`ledger.store` for the frame layout), so the cost does
        not grow with the log or with the size of an atomic group.

        Raises:
            EvidenceError: if the entry is missing or damaged in the log.
        """
        offset, seq = self.entry_offset(index)
        data = _read_frame(self.ledger.store.path, offset, index - seq)
        if data is None:
            raise EvidenceError(f"entry {index} cannot be read from the log (run verify)")
        return leaf_hash(data)

    # -- updating ------------------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open {self.directory / LOCK_NAME}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write_tile(self, level: int, index: int, data: bytes) -> None:
        path = self.directory / tile_path(level, index)
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc

    def _write_state(self, state: _State) -> None:
        tmp = self.state_path.with_name(STATE_NAME + ".tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(state.to_json())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.state_path)
            _fsync_dir(self.directory)
        except OSError as exc:
            raise StorageError(f"cannot write {self.state_path}: {exc}") from exc

    def update(self) -> TiledTree:
        """Hash the entries appended since the last update and return the current tree.

        Only new entries are read and hashed: the scan starts at the last covered
        entry, whose leaf hash must still match (a cheap check that the log was not
        rewritten or rolled back under the store). Stops before a torn tail.

        Returns:
            A :class:`TiledTree` of every complete entry in the log.

        Raises:
            UsageError: if the directory holds no ledger.
            EvidenceError: if the log is damaged, or no longer matches the store (the
                log was rewritten or rolled back: run verify; delete ``tree/`` to
                rebuild from the log as it is now).
            StorageError: if the store cannot be written.
        """
        self.ledger.require_exists()
        with self._lock():
            state = self._read_state()
            builder = TileBuilder(state.size, state.partials, self._write_tile)
            offsets: list[int] = []
            end_offset, last_offset, last_leaf = state.end_offset, state.last_offset, b""
            items = self.ledger.store.scan(state.last_offset, max(state.size - 1, 0))
            if state.size:
                first = next(iter(items), None)
                if (
                    not isinstance(first, Record)
                    or not first.crc_ok
                    or first.index != state.size - 1
                    or first.end != state.end_offset
                    or leaf_hash(first.data) != state.last_leaf
                ):
                    raise EvidenceError(
                        f"the log no longer matches the tree store at seq {state.size - 1} "
                        "(rewritten or rolled back?): run verify; delete "
                        f"{self.directory} to rebuild the store from the log as it is"
                    )
            for item in items:
                if isinstance(item, TornTail):
                    break
                if isinstance(item, Damage):
                    raise EvidenceError(f"log damaged at seq {item.index}: {item.reason}")
                if not item.crc_ok:
                    raise EvidenceError(f"log damaged at seq {item.index}: record fails its CRC-32")
                if item.index % TILE_WIDTH == 0:
                    offsets.append(item.offset)
                last_leaf = leaf_hash(item.data)
                builder.append(last_leaf)
                last_offset, end_offset = item.offset, item.end
            if builder.size != state.size:
                self._append_offsets(state.size, offsets)
                state = _State(builder.size, end_offset, last_offset, last_leaf, builder.partials())
                self._write_state(state)
        return TiledTree(state.size, state.partials, self._read_tile)

    def _append_offsets(self, old_size: int, offsets: list[int]) -> None:
        keep = (old_size + TILE_WIDTH - 1) // TILE_WIDTH * _U64.size
        try:
            with open(self.offsets_path, "ab") as fh:
                if os.fstat(fh.fileno()).st_size < keep:
                    # Slots were lost (the file is only a hint): stop keeping it until
                    # the store is rebuilt; entry_offset() then scans from the start.
                    fh.truncate(0)
                    return
                fh.truncate(keep)  # drop slots left by an update that never committed
                fh.write(b"".join(_U64.pack(o) for o in offsets))
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise StorageError(f"cannot write {self.offsets_path}: {exc}") from exc
