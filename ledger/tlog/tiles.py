"""Tile and node maths of the RFC 9162 tree: where each hash lives, and building them.

Pure: integers and hashes in, integers, paths and hashes out; no I/O. The store that
keeps these hashes on disk is :mod:`evidence_ledger.storage.tree_store`.

Tiles (c2sp.org/tlog-tiles): a tile holds 256 hashes of 32 bytes (8,192 bytes). Hash
``i`` of the tile at level ``L`` and index ``N`` is
MTH(D[(256N + i) * 256**L : (256N + i + 1) * 256**L]), i.e. node ``(8L, 256N + i)``. A
tree of ``n`` leaves has ``n >> 8L`` hashes at tile level ``L``, of which the first
``256 * ((n >> 8L) >> 8)`` sit in full tiles; the ``(n >> 8L) & 255`` after them form
the *partial tile* of that level.

Nodes in post-order: node ``(h, k)``, MTH(D[k * 2**h : (k + 1) * 2**h]) (RFC 9162
§2.1.1), is hash number :func:`node_position` ``(h, k)`` in the order in which nodes
complete as leaves are appended (each leaf hash, then the parents it completes, lowest
first: the layout of a Merkle mountain range). A tree of ``n`` leaves has
:func:`node_count` ``(n) = 2n - popcount(n)`` nodes, and growing it only appends.
:class:`TileBuilder` produces both, O(1) amortised hashes per leaf.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.tlog.merkle import HASH_SIZE, node_hash

__all__ = [
    "MAX_LEVEL",
    "TILE_BYTES",
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "TileBuilder",
    "TileError",
    "WriteTile",
    "node_count",
    "node_position",
    "peaks_from_partials",
    "perfect_root",
    "tile_path",
]

TILE_HEIGHT = 8
"""Levels of the tree one tile spans: tile level ``L`` holds nodes of height ``8L``."""
TILE_WIDTH = 1 << TILE_HEIGHT
"""Hashes in a full tile: 256."""
TILE_BYTES = TILE_WIDTH * HASH_SIZE
"""Bytes of a full tile: 8,192."""
MAX_LEVEL = 63
"""The highest tile level c2sp.org/tlog-tiles allows."""

WriteTile = Callable[[int, int, bytes], None]
"""``write_tile(level, index, data)``: takes a full tile (8,192 bytes)."""


class TileError(EvidenceError):
    """Partial tiles or subtree roots that do not fit the tree size they are given for."""


def tile_path(level: int, index: int, width: int | None = None) -> str:
    """The c2sp.org/tlog-tiles path of a tile, ``tile/<L>/<N>[.p/<W>]``.

    ``<N>`` is written in 3-digit path elements, all but the last prefixed with "x"
    (index 1234067 -> ``x001/x234/067``).

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


def node_position(level: int, index: int) -> int:
    """Where node ``(level, index)`` sits in post-order, counted in 32-byte hashes.

    The post-order position ``2m - popcount(m) - 1 - tz(index + 1)`` with
    ``m = (index + 1) * 2**level``: the ``2m - popcount(m)`` nodes of the tree of ``m``
    leaves come first, and after this node only its ancestors that the same leaf
    completes, ``tz(index + 1)`` of them (tz: trailing zero bits). Requires
    ``level, index >= 0``.
    """
    k = index + 1
    m = k << level
    return 2 * m - m.bit_count() - (k & -k).bit_length()


def node_count(size: int) -> int:
    """Number of nodes (complete perfect subtrees) of a tree of ``size`` leaves:
    ``2 * size - popcount(size)``; they take ``32 * node_count(size)`` bytes."""
    return 2 * size - size.bit_count()


def perfect_root(hashes: bytes) -> bytes:
    """MTH (RFC 9162 §2.1.1) of a power-of-two run of concatenated 32-byte hashes,
    e.g. a run of a tile: 32 bytes; ``len(hashes) / 32 - 1`` node hashes."""
    level = [hashes[i : i + HASH_SIZE] for i in range(0, len(hashes), HASH_SIZE)]
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def peaks_from_partials(size: int, partials: Sequence[bytes]) -> list[bytes]:
    """The roots of the perfect subtrees covering ``[0, size)``, largest first (one per
    set bit of ``size``, 32 bytes each), from the partial tiles: the peak of height
    ``8L + b`` is made of the last hashes of the partial tile at level ``L``. Hashes at
    most 255 hashes per tile level.

    Raises:
        TileError: if a partial tile is too short for ``size``.
    """
    peaks: list[bytes] = []
    for height in range(size.bit_length() - 1, -1, -1):
        if not size >> height & 1:
            continue
        tile_level, b = divmod(height, TILE_HEIGHT)
        count = size >> (TILE_HEIGHT * tile_level)  # hashes at this tile level
        first = ((count >> b) - 1) << b  # index of the peak's first hash
        start = (first - (count >> TILE_HEIGHT << TILE_HEIGHT)) * HASH_SIZE
        partial = partials[tile_level] if tile_level < len(partials) else b""
        run = partial[start : start + (HASH_SIZE << b)]
        if start < 0 or len(run) != HASH_SIZE << b:
            raise TileError(f"partial tile at level {tile_level} cannot hold size {size}")
        peaks.append(perfect_root(run))
    return peaks


class TileBuilder:
    """Append leaf hashes; record every node as it completes, emit each full tile once.

    Each append hashes one node per perfect subtree it completes (on average one), so
    appending is O(1) amortised. The new nodes are kept, in post-order, until
    :meth:`take_nodes`; nodes at heights ``8L`` also fill the partial tile at level
    ``L``, which is written out when it reaches 256 hashes.

    Args:
        size: leaves already covered (0 for a new tree).
        partials: the partial tiles for ``size``: ``partials[L]`` holds the
            ``(size >> 8L) & 255`` rightmost level-``L`` hashes, concatenated.
        write_tile: called as ``write_tile(level, index, data)`` with every tile that
            becomes full (8,192 bytes), lowest level first.
        peaks: the roots of the perfect subtrees covering ``[0, size)``, 32 bytes each,
            largest first (one per set bit of ``size``); derived from ``partials``
            (hashing at most 255 hashes per tile level) when None.

    Raises:
        TileError: if ``peaks`` or ``partials`` do not fit ``size``.
    """

    def __init__(
        self,
        size: int = 0,
        partials: Sequence[bytes] = (),
        write_tile: WriteTile | None = None,
        peaks: Sequence[bytes] | None = None,
    ) -> None:
        self.size = size
        self._partials = [bytearray(p) for p in partials]
        self._write_tile = write_tile
        self._peaks = list(peaks_from_partials(size, partials) if peaks is None else peaks)
        if len(self._peaks) != size.bit_count():
            raise TileError(
                f"{len(self._peaks)} subtree roots for size {size}, want {size.bit_count()}"
            )
        self._nodes = bytearray()

    @property
    def pending(self) -> int:
        """Bytes of new nodes held until :meth:`take_nodes`."""
        return len(self._nodes)

    def append(self, leaf: bytes) -> None:
        """Add one 32-byte leaf hash at index ``size``."""
        size = self.size
        new_size = size + 1
        nodes, peaks = self._nodes, self._peaks
        height, node = 0, leaf
        while True:
            nodes += node
            if not height & (TILE_HEIGHT - 1):
                self._add_to_tile(height // TILE_HEIGHT, node, new_size >> height)
            if not size & 1:
                break
            node = node_hash(peaks.pop(), node)
            height += 1
            size >>= 1
        peaks.append(node)
        self.size = new_size

    def _add_to_tile(self, level: int, value: bytes, count: int) -> None:
        """Add hash number ``count - 1`` of tile level ``level`` to its partial tile."""
        while len(self._partials) <= level:
            self._partials.append(bytearray())
        partial = self._partials[level]
        partial += value
        if len(partial) == TILE_BYTES:
            if self._write_tile is not None:
                self._write_tile(level, (count >> TILE_HEIGHT) - 1, bytes(partial))
            partial.clear()

    def take_nodes(self) -> bytes:
        """The nodes completed since the last call, in post-order (the next part of
        the node file), as concatenated 32-byte hashes."""
        out = bytes(self._nodes)
        self._nodes.clear()
        return out

    def partials(self) -> list[bytes]:
        """The current partial tiles, level 0 first, trailing empty levels dropped."""
        out = [bytes(p) for p in self._partials]
        while out and not out[-1]:
            out.pop()
        return out
