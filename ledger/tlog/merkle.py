"""RFC 9162 §2.1 Merkle tree hashing, with domain-separation prefixes.

- leaf hash = SHA-256(0x00 || entry bytes)            (RFC 9162 §2.1.1)
- node hash = SHA-256(0x01 || left || right)          (RFC 9162 §2.1.1)
- MTH({}) = SHA-256("")

:class:`CompactRange` computes the root hash of a growing tree in O(log n) memory,
appending in O(1) amortised hashes, without keeping the leaves.

:func:`leaf_hash`, :func:`node_hash`, :func:`root_of_leaves` and :class:`CompactRange` run on
the native core where it is built (:mod:`evidence_ledger.format.core`); the ``*_reference``
functions and :class:`CompactRangeReference` are the pure-Python reference they are tested
against.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from evidence_ledger.format import core

LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash_reference(data: bytes) -> bytes:
    """RFC 9162 §2.1.1 leaf hash of ``data`` (32 bytes)."""
    return hashlib.sha256(LEAF_PREFIX + data).digest()


def node_hash_reference(left: bytes, right: bytes) -> bytes:
    """RFC 9162 §2.1.1 interior node hash of two 32-byte children (32 bytes)."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


leaf_hash = leaf_hash_reference if core.native is None else core.native.leaf_hash
"""RFC 9162 leaf hash: :func:`leaf_hash_reference`, on the core in use."""
node_hash = node_hash_reference if core.native is None else core.native.node_hash
"""RFC 9162 interior node hash: :func:`node_hash_reference`, on the core in use."""


MAX_SIZE = 2**64 - 1
"""The largest tree size (leaves) a compact range holds: RFC 9162 tree sizes are 64-bit."""
FULL = "the tree is full: 2**64 - 1 leaves"
"""The error of appending to a range of :data:`MAX_SIZE` leaves."""


class CompactRangeReference:
    """The perfect subtrees covering leaves ``[0, size)``, largest first.

    ``root()`` folds them right to left, which equals MTH(D[0:size]) because RFC 9162
    splits at the largest power of two below the size.
    """

    def __init__(self) -> None:
        self.size = 0
        self._peaks: list[bytes] = []  # one hash per set bit of size, highest bit first

    @classmethod
    def from_peaks(cls, size: int, peaks: Iterable[bytes]) -> CompactRangeReference:
        """The range of ``size`` leaves whose perfect subtrees, largest first, hash to
        ``peaks`` (as :attr:`peaks` gives them), to append more leaves to.

        Raises:
            ValueError: unless ``size`` is an int in ``[0, 2**64)`` (RFC 9162 tree sizes are
                64-bit) and ``peaks`` one 32-byte hash per set bit of it.
            TypeError: if ``peaks`` is not iterable.
        """
        fits = isinstance(size, int) and 0 <= size <= MAX_SIZE
        wrong = ValueError(f"want {size.bit_count() if fits else 0} peaks of {HASH_SIZE} "
                           f"bytes for size {size}")
        if not fits:
            raise wrong
        hashes = list(peaks)
        if len(hashes) != size.bit_count() or not all(
                isinstance(p, bytes) and len(p) == HASH_SIZE for p in hashes):
            raise wrong
        made = cls()
        made.size, made._peaks = size, hashes
        return made

    @property
    def peaks(self) -> tuple[bytes, ...]:
        """The roots of the perfect subtrees covering ``[0, size)``, largest first."""
        return tuple(self._peaks)

    def append(self, leaf: bytes) -> None:
        """Add one leaf hash (32 bytes) at index ``size``.

        Raises:
            ValueError: if ``leaf`` is not 32 bytes, or the range holds ``2**64 - 1``
                leaves already (RFC 9162 tree sizes are 64-bit).
        """
        if not isinstance(leaf, bytes) or len(leaf) != HASH_SIZE:
            raise ValueError("a leaf hash is not 32 bytes")
        if self.size >= MAX_SIZE:
            raise ValueError(FULL)
        node = leaf
        size = self.size
        while size & 1:
            node = node_hash(self._peaks.pop(), node)
            size >>= 1
        self._peaks.append(node)
        self.size += 1

    def root(self) -> bytes:
        """MTH of the leaves appended so far (32 bytes); SHA-256("") when empty."""
        if not self._peaks:
            return EMPTY_ROOT
        node = self._peaks[-1]
        for peak in reversed(self._peaks[:-1]):
            node = node_hash(peak, node)
        return node


if TYPE_CHECKING:  # one type for both: the native class has the reference's methods
    CompactRange = CompactRangeReference
else:
    CompactRange = CompactRangeReference if core.native is None else core.native.CompactRange
"""RFC 9162 compact range: :class:`CompactRangeReference`, on the core in use."""


def root_of_range(node: Callable[[int, int], bytes], lo: int, hi: int) -> bytes:
    """MTH of leaves ``[lo, hi)`` (RFC 9162 §2.1.1) from stored perfect subtrees.

    ``node(level, index)`` returns the 32-byte hash of the perfect subtree over leaves
    ``[index * 2**level, (index + 1) * 2**level)``. ``lo`` must be a multiple of the
    largest power of two not above ``hi - lo`` (as for every subtree RFC 9162 names).
    Reads one node per set bit of ``hi - lo`` and folds them right to left; returns
    SHA-256("") when ``lo == hi``.
    """
    n = hi - lo
    if n == 0:
        return EMPTY_ROOT
    peaks: list[bytes] = []
    for level in range(n.bit_length() - 1, -1, -1):
        if n >> level & 1:
            peaks.append(node(level, lo >> level))
            lo += 1 << level
    root = peaks[-1]
    for peak in reversed(peaks[:-1]):
        root = node_hash(peak, root)
    return root


def root_of_leaves_reference(leaves: Iterable[bytes]) -> bytes:
    """MTH (RFC 9162 §2.1.1) of the tree whose leaf hashes are ``leaves`` (32 bytes each),
    in O(log n) memory; SHA-256("") when there are none.

    Raises:
        ValueError: if a leaf hash is not 32 bytes.
    """
    tree = CompactRangeReference()
    for leaf in leaves:
        tree.append(leaf)
    return tree.root()


root_of_leaves = (
    root_of_leaves_reference if core.native is None else core.native.root_of_leaves
)
"""MTH of a sequence of leaf hashes: :func:`root_of_leaves_reference`, on the core in use."""
