"""The derived hash store: the ledger's RFC 9162 Merkle tree, as tiles and a node file.

This module's one job is the store's files in ``<ledger>/tree/``: reading them, and
bringing them up to date from the log under a lock. The tile and node maths are in
:mod:`evidence_ledger.tlog.tiles`, the state document in
:mod:`evidence_ledger.storage.tree_state`, the log's frames in
:mod:`evidence_ledger.format.framing`.

The log (``log.bin``) is the only source of truth. This store is a cache derived from
it: deleting ``<ledger>/tree/`` and running any proof or checkpoint command again
rebuilds it and gives the same bytes. The append path never touches it; it is
brought up to date incrementally (only entries appended since the last update are
hashed, each append costing O(1) amortised hashes) before a proof or checkpoint is made.

Layout of ``<ledger>/tree/``::

    tile/<L>/<N>    full tiles (c2sp.org/tlog-tiles): 256 hashes of 32 bytes, 8,192
                    bytes, immutable; <N> as :func:`~evidence_ledger.tlog.tiles.tile_path`
                    writes it (index 1234067 -> x001/x234/067).
    nodes.bin       every node of the tree, 32 bytes each, in post-order: node ``(h, k)``,
                    MTH(D[k * 2**h : (k + 1) * 2**h]), is hash number
                    :func:`~evidence_ledger.tlog.tiles.node_position` ``(h, k)``. For a
                    tree of ``n`` leaves exactly the first ``32 * (2n - popcount(n))``
                    bytes are valid: about 64 bytes per entry, append-only.
    offsets.bin     u64 big-endian byte offset in log.bin of every entry (entry ``i``
                    at bytes ``[8 i, 8 i + 8)``); the first ``8 n`` bytes are valid.
    state.json      the commit point (:class:`~evidence_ledger.storage.tree_state.TreeState`),
                    replaced atomically (write, fsync, rename). Its ``size`` says how
                    much of nodes.bin and of offsets.bin is valid (above); it also holds
                    the partial tiles.
    lock            flock held while updating.

Reading a node (RFC 9162 §2.1.1 MTH of a perfect subtree) is one 32-byte read from
nodes.bin: a proof at any tree size costs O(log n) hash reads and no hashing beyond the
one non-perfect subtree on the tree's right edge. A tree read for one proof uses
positioned reads; one read for many maps the file (see :class:`NodeFile`).

Why one file in post-order (the layout of a Merkle mountain range) rather than one
array per height: a reader opens one file, an update appends to and fsyncs one file and
checks one length, and the low siblings of a proof's path are neighbours (a subtree of
height ``h`` is one run of ``2**(h+1) - 1`` hashes), so a proof touches few pages.
Without a node file (tiles alone, e.g. fetched from elsewhere) a node at height
``h = 8L + b`` is recomputed from at most ``2**b`` hashes of one tile.

Crash safety: :meth:`TreeStore.update` appends to nodes.bin and offsets.bin, writes
each new full tile (to ``.tmp``, then renamed), fsyncs the appended files and only
then replaces state.json. Bytes past the valid length of a file were left by an update
that never committed; the next update truncates them before appending. A file shorter
than its valid length was damaged by something else and is reported
(:class:`TreeStoreError` naming the file: delete ``tree/`` to rebuild). Readers take no
lock: they read state.json, then only the valid prefix of nodes.bin, which no update
changes or truncates. A version-1 store (tiles only, offsets of every 256th entry) is
rebuilt by the next update, after the usual check that the log still holds its last
entry.

Trust: anyone who can write the ledger directory can change this store. :meth:`TreeStore.update`
and the proofs built from it (:func:`evidence_ledger.storage.log_proofs.prove_inclusion`)
trust it as it is; the proof commands use :mod:`evidence_ledger.storage.checked_proofs`,
which verifies each proof against roots that do not come from this store (the root recorded
in ``root.json``, see :mod:`evidence_ledger.storage.root_record`, and the latest checkpoint)
and rebuilds the store (:meth:`TreeStore.rebuild`, which keeps ``root.json``) when it does
not verify. Every file here is opened only if
it is a regular file (never through a symlink, never a FIFO or device:
:class:`TreeStoreError`), and the store never
writes through a symlink: temporary files are created exclusively, tile folders are
walked by descriptor, and a ``tree/`` that is a symlink is refused (and replaced by a
rebuild).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import shutil
import stat
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from evidence_ledger.format.errors import EvidenceError, StorageError, UsageError
from evidence_ledger.format.framing import Damage, Record, TornTail, read_frame
from evidence_ledger.storage.fsutil import (
    NotRegularFileError,
    close_fd,
    file_lock,
    fsync_path,
    open_regular,
    problem,
    read_regular,
    replace_durably,
)
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.tree_state import (
    EMPTY_STATE,
    STATE_VERSION,
    StateFormatError,
    TreeState,
)
from evidence_ledger.tlog.merkle import HASH_SIZE, leaf_hash, root_of_range
from evidence_ledger.tlog.tiles import (
    TILE_BYTES,
    TILE_HEIGHT,
    TILE_WIDTH,
    TileBuilder,
    node_count,
    node_position,
    perfect_root,
    tile_path,
)

__all__ = [
    "TREE_DIR",
    "NodeFile",
    "TiledTree",
    "TreeStore",
    "TreeStoreError",
]

TREE_DIR = "tree"
NODES_NAME = "nodes.bin"
STATE_NAME = "state.json"
OFFSETS_NAME = "offsets.bin"
LOCK_NAME = "lock"
ROOT_NAME = "root.json"  # evidence_ledger.storage.root_record's, which a rebuild keeps
_U64 = struct.Struct(">Q")
_TILE_CACHE = 64
_FLUSH_BYTES = 1 << 22  # buffered node and offset bytes written out during an update
_MAP_AFTER = 256  # node reads by position before a tree maps nodes.bin
_MAX_STATE = 1 << 20  # bytes: a state.json holds at most 8 partial tiles (~90 KB)

Nodes = bytes | mmap.mmap
"""Concatenated 32-byte node hashes in post-order; slicing gives bytes."""
ReadTile = Callable[[int, int], bytes]
ReadNodes = Callable[[], "Nodes | NodeFile"]


class TreeStoreError(EvidenceError):
    """The derived store in ``tree/`` is damaged, is not what it should be (a symlink,
    FIFO or device where a file belongs), or no longer matches the log.

    The log stays the evidence: deleting ``tree/`` (or :meth:`TreeStore.rebuild`)
    rebuilds the store from it.

    Attributes:
        problem: what is wrong, without the remedy (for a one-line notice).
    """

    def __init__(self, problem: str, directory: Path | None = None) -> None:
        where = "the tree directory" if directory is None else str(directory)
        super().__init__(f"tree store: {problem}; delete {where} to rebuild it")
        self.problem = problem


class NodeFile:
    """The valid prefix of a node file, read by position or through a memory map.

    A proof reads a few dozen nodes spread over the file; mapping the file for them
    would cost a page fault per page touched, more than the positioned reads. A tree
    that is used for many proofs maps the file (:meth:`map`) and reads it at memory
    speed. The file is never written through this object.

    Args:
        path: the file (``tree/nodes.bin``).
        length: the valid prefix in bytes, ``32 * node_count(size)``.

    Raises:
        TreeStoreError: if the file cannot be opened, is not a regular file (a symlink,
            FIFO or device), or is shorter than ``length``.
    """

    def __init__(self, path: Path, length: int) -> None:
        self.path = path
        self.length = length
        self._fd = -1
        try:
            self._fd = open_regular(path)
            have = os.fstat(self._fd).st_size
        except OSError as exc:
            self.close()
            raise TreeStoreError(_unreadable(path, exc), path.parent) from exc
        if have < length:
            self.close()
            raise TreeStoreError(f"{path} is {have} bytes, want at least {length}", path.parent)

    def __len__(self) -> int:
        return self.length

    def pread(self, start: int) -> bytes:
        """The 32 bytes at byte ``start`` (``start + 32 <= length``), one positioned read.

        Raises:
            TreeStoreError: if the read fails or comes back short.
        """
        try:
            data = os.pread(self._fd, HASH_SIZE, start)
        except OSError as exc:
            raise TreeStoreError(_unreadable(self.path, exc), self.path.parent) from exc
        if len(data) != HASH_SIZE:
            raise TreeStoreError(f"{self.path} was cut short", self.path.parent)
        return data

    def map(self) -> mmap.mmap:
        """Map the valid prefix read-only (committed bytes never change); closes the file.

        Raises:
            TreeStoreError: if the file cannot be mapped.
        """
        try:
            return mmap.mmap(self._fd, self.length, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise TreeStoreError(f"cannot map {self.path}: {exc}", self.path.parent) from exc
        finally:
            self.close()

    def close(self) -> None:
        """Close the file (reads after this fail)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            close_fd(fd)

    def __del__(self) -> None:
        self.close()


class TiledTree:
    """A read-only view of the Merkle tree of ``size`` leaves: a node file and tiles.

    Implements :class:`evidence_ledger.tlog.proofs.HashSource`.

    Args:
        size: number of leaves.
        partials: ``partials[L]`` is the partial tile at level ``L`` as concatenated
            32-byte hashes (``(size >> 8L) & 255`` of them); missing levels are empty.
        read_tile: ``read_tile(level, index)`` returns a full tile (8,192 bytes).
        read_nodes: ``read_nodes()`` returns the nodes in post-order (see the module
            docstring), at least ``32 * node_count(size)`` bytes, as a buffer or a
            :class:`NodeFile` (read by position for the first 256 nodes, then mapped);
            called once, on the first :meth:`node`. When given, :meth:`node` is one
            read from it; when None, nodes are recomputed from tiles.

    Raises:
        EvidenceError: if a partial tile has the wrong length for ``size``.
    """

    def __init__(
        self,
        size: int,
        partials: Sequence[bytes],
        read_tile: ReadTile,
        read_nodes: ReadNodes | None = None,
    ) -> None:
        self.size = size
        self._partials = list(partials)
        self._read_tile = read_tile
        self._read_nodes = read_nodes
        self._nodes: Nodes | None = None  # once set, node() slices it directly
        self._file: NodeFile | None = None
        self._file_reads = 0
        self._cache: dict[tuple[int, int], bytes] = {}
        levels = max(len(self._partials), (size.bit_length() + TILE_HEIGHT - 1) // TILE_HEIGHT)
        self._partials += [b""] * (levels - len(self._partials))
        for level, partial in enumerate(self._partials):
            want = ((size >> (TILE_HEIGHT * level)) & (TILE_WIDTH - 1)) * HASH_SIZE
            if len(partial) != want:
                raise TreeStoreError(
                    f"partial tile at level {level} is {len(partial)} bytes, "
                    f"want {want} for size {size}"
                )

    @classmethod
    def from_leaf_hashes(cls, leaves: Iterable[bytes]) -> TiledTree:
        """Build a tree in memory (tiles and node file) from 32-byte leaf hashes."""
        tiles: dict[tuple[int, int], bytes] = {}

        def write(level: int, index: int, data: bytes) -> None:
            tiles[(level, index)] = data

        builder = TileBuilder(write_tile=write)
        for leaf in leaves:
            builder.append(leaf)
        nodes = builder.take_nodes()
        return cls(
            builder.size,
            builder.partials(),
            lambda level, index: tiles[(level, index)],
            lambda: nodes,
        )

    def _tile(self, level: int, index: int) -> bytes:
        count = self.size >> (TILE_HEIGHT * level)
        if (index + 1) * TILE_WIDTH <= count:
            key = (level, index)
            tile = self._cache.get(key)
            if tile is None:
                tile = self._read_tile(level, index)
                if len(tile) != TILE_BYTES:
                    raise TreeStoreError(
                        f"tile {tile_path(level, index)} is {len(tile)} bytes, want {TILE_BYTES}"
                    )
                if len(self._cache) >= _TILE_CACHE:
                    self._cache.clear()
                self._cache[key] = tile
            return tile
        if index == count >> TILE_HEIGHT:
            return self._partials[level]
        raise UsageError(f"no tile at level {level} index {index} in a tree of size {self.size}")

    def _read_node(self, start: int) -> bytes:
        """The node at byte ``start`` of the node file before it is a plain buffer."""
        if self._file is None:
            assert self._read_nodes is not None
            data = self._read_nodes()
            want = node_count(self.size) * HASH_SIZE
            if len(data) < want:
                raise TreeStoreError(
                    f"{NODES_NAME} is {len(data)} bytes, want at least {want} for size {self.size}"
                )
            if not isinstance(data, NodeFile):
                self._nodes = data
                return data[start : start + HASH_SIZE]
            self._file = data
        self._file_reads += 1
        if self._file_reads > _MAP_AFTER:
            self._nodes = self._file.map()
            return self._nodes[start : start + HASH_SIZE]
        return self._file.pread(start)

    def node(self, level: int, index: int) -> bytes:
        """Hash of the perfect subtree over leaves ``[index * 2**level, (index+1) * 2**level)``.

        Requires ``(index + 1) * 2**level <= size``. Returns 32 bytes: one read from the
        node file (RFC 9162 §2.1.1 MTH of that subtree, hashed when it completed).

        Raises:
            UsageError: if the subtree is not complete in this tree.
            EvidenceError: if a stored tile or the node file is missing or short.
        """
        if level < 0 or index < 0 or (index + 1) << level > self.size:
            raise UsageError(
                f"want (index + 1) * 2**level <= size, got level {level}, index {index}, "
                f"size {self.size}"
            )
        data = self._nodes
        if data is not None or self._read_nodes is not None:
            k = index + 1  # node_position(level, index), inlined: this is the hot path
            m = k << level
            start = (2 * m - m.bit_count() - (k & -k).bit_length()) * HASH_SIZE
            if data is None:
                return self._read_node(start)
            return data[start : start + HASH_SIZE]
        tile_level, height = divmod(level, TILE_HEIGHT)
        first = index << height
        tile_index, offset = divmod(first, TILE_WIDTH)
        tile = self._tile(tile_level, tile_index)
        run = tile[offset * HASH_SIZE : (offset + (1 << height)) * HASH_SIZE]
        return perfect_root(run)

    def leaf(self, index: int) -> bytes:
        """Leaf hash ``index`` (32 bytes); requires ``0 <= index < size``."""
        return self.node(0, index)

    def root(self, size: int | None = None) -> bytes:
        """MTH(D[0:size]) (RFC 9162 §2.1.1), 32 bytes; ``size`` defaults to the tree size.

        Requires ``0 <= size <= self.size``; SHA-256("") for the empty tree. Reads one
        node per set bit of ``size`` and hashes them together.

        Raises:
            UsageError: if ``size`` is out of range.
        """
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise UsageError(f"want 0 <= size <= {self.size}, got size {size}")
        return root_of_range(self.node, 0, size)


class _CachedState(NamedTuple):
    """A parsed state.json and the ``(inode, size, mtime_ns, ctime_ns)`` it was read at."""

    stamp: tuple[int, int, int, int]
    state: TreeState


# Parsed state.json files by path: state.json is replaced by rename, so a new state has
# a new stamp. A stale hit could only give an older tree, which update() then finds
# behind the log and brings up to date under the lock, reading the file afresh.
_STATE_CACHE: dict[str, _CachedState] = {}
_STATE_CACHE_SIZE = 64


def _unreadable(path: Path, exc: OSError) -> str:
    """"<path> is a symbolic link, not a regular file" / "cannot read <path> (<why>)"."""
    if isinstance(exc, NotRegularFileError):
        return f"{path} {problem(exc)}"
    return f"cannot read {path} ({problem(exc)})"


class _AppendFiles:
    """nodes.bin and offsets.bin of a store being updated (update lock held).

    Opening trims each file to its valid length for ``size`` (bytes past it were left
    by an update that never committed) and refuses a file shorter than that.

    Raises:
        TreeStoreError: if a file is missing, shorter than its valid length, or not a
            regular file (never opened through a symlink).
        StorageError: if a file cannot be opened or trimmed.
    """

    def __init__(self, directory: Path, size: int) -> None:
        self.directory = directory
        self.size = size
        self.nodes_path = directory / NODES_NAME
        self.offsets_path = directory / OFFSETS_NAME
        self._files: list[tuple[Path, Any]] = []
        self._created = False
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._nodes = self._open(self.nodes_path, HASH_SIZE * node_count(size))
            self._offsets = self._open(self.offsets_path, _U64.size * size)
        except BaseException:
            self.close()
            raise

    def _open(self, path: Path, length: int) -> Any:
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT)
        except NotRegularFileError as exc:
            raise TreeStoreError(_unreadable(path, exc), self.directory) from exc
        except OSError as exc:
            raise StorageError(f"cannot open {path}: {exc}") from exc
        fh = os.fdopen(fd, "r+b")
        self._files.append((path, fh))
        try:
            have = os.fstat(fd).st_size
            self._created |= have == 0
            if have < length:
                raise TreeStoreError(
                    f"{path} is {have} bytes, want {length} for tree size {self.size}",
                    self.directory,
                )
            if have > length:
                fh.truncate(length)
            fh.seek(length)
        except OSError as exc:
            raise StorageError(f"cannot trim {path}: {exc}") from exc
        return fh

    def peaks(self) -> list[bytes]:
        """The roots of the perfect subtrees covering ``[0, size)``, largest first: node
        ``(h, (size >> h) - 1)`` for each set bit ``h`` of ``size``."""
        out = []
        fd = self._nodes.fileno()
        for height in range(self.size.bit_length() - 1, -1, -1):
            if self.size >> height & 1:
                at = node_position(height, (self.size >> height) - 1) * HASH_SIZE
                try:
                    out.append(os.pread(fd, HASH_SIZE, at))
                except OSError as exc:
                    raise TreeStoreError(
                        _unreadable(self.nodes_path, exc), self.directory
                    ) from exc
        return out

    def append(self, nodes: bytes, offsets: bytes) -> None:
        """Append new nodes (post-order) to nodes.bin and entry offsets to offsets.bin."""
        for (path, _), fh, data in zip(
            self._files, (self._nodes, self._offsets), (nodes, offsets), strict=True
        ):
            try:
                fh.write(data)
            except OSError as exc:
                raise StorageError(f"cannot write {path}: {exc}") from exc

    def sync(self) -> None:
        """Make every appended byte durable (fsync each file, and the directory)."""
        for path, fh in self._files:
            try:
                fh.flush()
                os.fsync(fh.fileno())
            except OSError as exc:
                raise StorageError(f"cannot write {path}: {exc}") from exc
        if self._created:
            fsync_path(self.directory)

    def close(self) -> None:
        for _, fh in self._files:
            with contextlib.suppress(OSError):
                fh.close()
        self._files.clear()


class TreeStore:
    """The tiles and node file of one ledger, in ``<ledger>/tree/`` (see the module
    docstring).

    Args:
        ledger: the ledger (or its directory).
    """

    def __init__(self, ledger: Ledger | str | os.PathLike[str] | None = None) -> None:
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self.directory = self.ledger.directory / TREE_DIR
        self.state_path = self.directory / STATE_NAME
        self.offsets_path = self.directory / OFFSETS_NAME

    # -- reading -------------------------------------------------------------------

    def _read_state(self, cached: bool = True) -> TreeState:
        """The committed state; ``cached``: reuse the last parse of this very file."""
        key = str(self.state_path)
        try:
            st = os.lstat(key)
        except FileNotFoundError:
            return EMPTY_STATE
        except OSError as exc:
            raise TreeStoreError(_unreadable(self.state_path, exc), self.directory) from exc
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        hit = _STATE_CACHE.get(key)
        if cached and hit is not None and hit.stamp == stamp:
            return hit.state
        try:
            data = read_regular(key, _MAX_STATE)
        except FileNotFoundError:
            return EMPTY_STATE
        except OSError as exc:
            raise TreeStoreError(_unreadable(self.state_path, exc), self.directory) from exc
        if len(data) > _MAX_STATE:
            raise TreeStoreError(f"{self.state_path} is larger than {_MAX_STATE} bytes",
                                 self.directory)
        try:
            state = TreeState.from_json(data)
        except StateFormatError as exc:
            raise TreeStoreError(f"state {self.state_path} is unreadable ({exc})",
                                 self.directory) from exc
        if len(_STATE_CACHE) >= _STATE_CACHE_SIZE:
            _STATE_CACHE.clear()
        _STATE_CACHE[key] = _CachedState(stamp, state)
        return state

    def _read_tile(self, level: int, index: int) -> bytes:
        path = self.directory / tile_path(level, index)
        try:
            return read_regular(path, TILE_BYTES)  # longer than a tile: refused by length
        except OSError as exc:
            raise TreeStoreError(_unreadable(path, exc), self.directory) from exc

    def tile(self, level: int, index: int) -> bytes:
        """The stored full tile ``tile/<level>/<index>``: 8,192 bytes (256 hashes).

        Raises:
            UsageError: if ``level`` or ``index`` is out of range.
            TreeStoreError: if the tile is missing, not a regular file, or not 8,192
                bytes.
        """
        tile_path(level, index)  # checks the arguments
        data = self._read_tile(level, index)
        if len(data) != TILE_BYTES:
            raise TreeStoreError(
                f"tile {tile_path(level, index)} is {len(data)} bytes, want {TILE_BYTES}",
                self.directory,
            )
        return data

    def _nodes_reader(self, size: int) -> ReadNodes:
        """Open the valid prefix of nodes.bin, ``32 * node_count(size)`` bytes."""
        return lambda: NodeFile(self.directory / NODES_NAME, HASH_SIZE * node_count(size))

    def _tree(self, state: TreeState) -> TiledTree:
        current = state.version == STATE_VERSION
        read_nodes = self._nodes_reader(state.size) if current else None
        return TiledTree(state.size, state.partials, self._read_tile, read_nodes)

    def snapshot(self) -> TiledTree:
        """The tree as last stored, without reading the log (may lag behind it)."""
        return self._tree(self._read_state())

    def entry_offset(self, index: int) -> tuple[int, int]:
        """``(byte offset, seq)`` of a log entry at or before ``index`` to scan from.

        Reads ``offsets.bin`` (every entry covered by the store: ``(offset, index)``);
        falls back to ``(0, 0)``.
        """
        try:
            fd = open_regular(self.offsets_path)
        except OSError:
            return 0, 0
        try:
            raw = os.pread(fd, _U64.size, index * _U64.size)
        except OSError:
            return 0, 0
        finally:
            close_fd(fd)
        if len(raw) != _U64.size:
            return 0, 0
        return _U64.unpack(raw)[0], index

    def log_leaves(self, indices: Iterable[int]) -> Iterator[bytes]:
        """Leaf hashes SHA-256(0x00 || entry bytes) of entries ``indices``, read from the log
        (:meth:`log_records`).

        Raises:
            as :meth:`log_records`.
        """
        return map(leaf_hash, self.log_records(indices))

    def log_records(self, indices: Iterable[int]) -> Iterator[bytes]:
        """The bytes of entries ``indices``, read from the log.

        Each costs two positioned reads: the entry's offset from ``offsets.bin``, then
        its frame (:func:`evidence_ledger.format.framing.read_frame`); an entry the store
        does not cover yet is found by walking frame headers from the start of the log.

        Raises:
            EvidenceError: if an entry is missing or damaged in the log, or the log is not
                a regular file.
            TreeStoreError: if ``offsets.bin`` is not a regular file, or points at no
                readable frame.
        """
        try:
            log_fd = self.ledger.store.open_fd()
        except FileNotFoundError as exc:
            raise EvidenceError(f"cannot read {self.ledger.store.path}: no such file") from exc
        try:
            offsets_fd = open_regular(self.offsets_path)
        except FileNotFoundError:
            offsets_fd = -1
        except OSError as exc:
            close_fd(log_fd)
            raise TreeStoreError(_unreadable(self.offsets_path, exc), self.directory) from exc
        try:
            for index in indices:
                offset, skip = 0, index
                if offsets_fd >= 0:
                    raw = os.pread(offsets_fd, _U64.size, index * _U64.size)
                    if len(raw) == _U64.size:
                        offset, skip = _U64.unpack(raw)[0], 0
                try:
                    found = read_frame(log_fd, offset, skip)
                except OSError:
                    found = None
                if found is None and not skip:
                    raise TreeStoreError(
                        f"{self.offsets_path} points at no readable entry {index} in the log",
                        self.directory,
                    )
                if found is None:
                    raise EvidenceError(f"entry {index} cannot be read from the log (run verify)")
                yield found.data
        finally:
            close_fd(log_fd)
            if offsets_fd >= 0:
                close_fd(offsets_fd)

    # -- updating ------------------------------------------------------------------

    def _check_directory(self) -> None:
        """Refuse a ``tree/`` that is a symlink or not a directory: the store never
        writes through one (one ``lstat``).

        Raises:
            TreeStoreError: if it is.
        """
        try:
            mode = os.lstat(self.directory).st_mode
        except FileNotFoundError:
            return
        except OSError as exc:
            raise TreeStoreError(_unreadable(self.directory, exc), self.directory) from exc
        if not stat.S_ISDIR(mode):
            raise TreeStoreError(f"{self.directory} is not a directory (a symlink?)",
                                 self.directory)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        lock = self.directory / LOCK_NAME
        with contextlib.suppress(OSError):
            if not stat.S_ISREG(os.lstat(lock).st_mode):  # planted: never a lock anyone holds
                os.unlink(lock)
        with file_lock(lock):
            yield

    def _write_tile(self, level: int, index: int, data: bytes) -> None:
        """Write a full tile (to ``.tmp``, then renamed), walking its folders by
        descriptor so that no symlink inside ``tree/`` is ever followed."""
        rel = tile_path(level, index)
        path = self.directory / rel
        *folders, name = rel.split("/")
        fd = -1
        try:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            for folder in folders:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(folder, 0o755, dir_fd=fd)
                sub = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                close_fd(fd)
                fd = sub
            tmp = name + ".tmp"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=fd)
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                          dir_fd=fd)
            with os.fdopen(out, "wb") as fh:
                fh.write(data)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR):
                raise TreeStoreError(
                    f"cannot write {path}: a symlink or a file where a folder belongs",
                    self.directory,
                ) from exc
            raise StorageError(f"cannot write {path}: {exc}") from exc
        finally:
            if fd >= 0:
                close_fd(fd)

    def _write_state(self, state: TreeState) -> None:
        try:
            replace_durably(self.state_path, state.to_json(),
                            self.state_path.with_name(STATE_NAME + ".tmp"))
        except OSError as exc:
            raise StorageError(f"cannot write {self.state_path}: {exc}") from exc

    def _is_current(self, state: TreeState) -> bool:
        """True when the log has not changed length since ``state`` and its last covered
        entry is still there (one frame read and one hash; no lock)."""
        if state.version != STATE_VERSION:
            return False
        try:
            fd = self.ledger.store.open_fd()
        except (OSError, EvidenceError):
            return False
        try:
            if os.fstat(fd).st_size != state.end_offset:
                return False
            if not state.size:
                return True
            last = read_frame(fd, state.last_offset)
        except OSError:
            return False
        finally:
            close_fd(fd)
        return (
            last is not None
            and not last.more
            and last.end == state.end_offset
            and leaf_hash(last.data) == state.last_leaf
        )

    def update(self) -> TiledTree:
        """Hash the entries appended since the last update and return the current tree.

        When the log has the length the store covers and still ends with the entry the
        store hashed last, nothing is locked or written: one state read, one frame read
        and one hash. Otherwise, under the store's lock, only new entries are read and
        hashed: the scan starts at the last covered entry, whose leaf hash must still
        match (a cheap check that the log was not rewritten or rolled back under the
        store). Stops before a torn tail. See the module docstring for what is written
        and in which order.

        Returns:
            A :class:`TiledTree` of every complete entry in the log, reading the node
            file.

        The store's files are trusted as they are (see :meth:`rebuild`; the proof
        commands check every proof against the root recomputed from the log).

        Raises:
            UsageError: if the directory holds no ledger.
            EvidenceError: if the log is damaged or not a regular file.
            TreeStoreError: if the store no longer matches the log (the log was
                rewritten or rolled back: run verify; delete ``tree/`` to rebuild from
                the log as it is now), or a store file is short, unreadable, or not a
                regular file, or ``tree/`` is a symlink.
            StorageError: if the store cannot be written.
        """
        self.ledger.require_exists()
        self._check_directory()
        state = self._read_state()
        if not self._is_current(state):
            with self._lock():
                state = self._catch_up(self._read_state(cached=False))
        return self._tree(state)

    def rebuild(self) -> TiledTree:
        """Throw the store away and rebuild it from the log; return the current tree.

        Everything in ``tree/`` is removed first (a symlink is removed, never followed;
        a ``tree/`` that is a symlink or a file is replaced by a fresh folder), then every
        entry of the log is hashed again: O(n). The result is byte-identical to a store
        built by :meth:`update` from nothing.

        Raises:
            UsageError: if the directory holds no ledger.
            EvidenceError: if the log is damaged or not a regular file.
            StorageError: if the store cannot be removed or written.
        """
        self.ledger.require_exists()
        try:
            try:
                self._check_directory()
            except TreeStoreError:
                os.unlink(self.directory)  # a symlink or a file: removed, not followed
            with self._lock():
                with os.scandir(self.directory) as found:
                    for item in found:
                        if item.name in (LOCK_NAME, ROOT_NAME) and item.is_file(
                                follow_symlinks=False):
                            continue  # root.json is no cache (root_record)
                        if item.is_dir(follow_symlinks=False):
                            shutil.rmtree(item.path)
                        else:
                            os.unlink(item.path)
                _STATE_CACHE.pop(str(self.state_path), None)
                state = self._catch_up(EMPTY_STATE)
        except OSError as exc:
            raise StorageError(f"cannot rebuild {self.directory}: {exc}") from exc
        return self._tree(state)

    def _catch_up(self, state: TreeState) -> TreeState:
        """Append the log's new entries to the store (lock held); return the new state."""
        fits = state.last_offset <= state.end_offset <= self.ledger.store.path.stat().st_size
        items = iter(self.ledger.store.scan(state.last_offset, max(state.size - 1, 0))
                     if fits else ())  # offsets past the log: nothing there to read
        if state.size or not fits:
            first = next(items, None)
            if (
                not isinstance(first, Record)
                or not first.crc_ok
                or first.index != state.size - 1
                or first.end != state.end_offset
                or leaf_hash(first.data) != state.last_leaf
            ):
                raise TreeStoreError(
                    f"the log no longer matches the tree store at seq {state.size - 1} "
                    "(rewritten or rolled back?): run verify",
                    self.directory,
                )
        upgrade = state.version != STATE_VERSION
        if upgrade:  # an older layout: the log still matches it; rebuild from the start
            state = EMPTY_STATE
            items = iter(self.ledger.store.scan())
        files = _AppendFiles(self.directory, state.size)
        try:
            builder = TileBuilder(state.size, state.partials, self._write_tile, files.peaks())
            offsets = bytearray()
            end_offset, last_offset, last_leaf = state.end_offset, state.last_offset, b""
            for item in items:
                if isinstance(item, TornTail):
                    break
                if isinstance(item, Damage):
                    raise EvidenceError(f"log damaged at seq {item.index}: {item.reason}")
                if not item.crc_ok:
                    raise EvidenceError(f"log damaged at seq {item.index}: record fails its CRC-32")
                offsets += _U64.pack(item.offset)
                last_leaf = leaf_hash(item.data)
                builder.append(last_leaf)
                last_offset, end_offset = item.offset, item.end
                if builder.pending >= _FLUSH_BYTES:
                    files.append(builder.take_nodes(), bytes(offsets))
                    offsets.clear()
            if builder.size == state.size and not upgrade:
                return state
            files.append(builder.take_nodes(), bytes(offsets))
            files.sync()
        finally:
            files.close()
        new = TreeState(builder.size, end_offset, last_offset, last_leaf, tuple(builder.partials()))
        self._write_state(new)
        return new
