"""Build RFC 9162 inclusion and consistency proofs from the hashes of perfect subtrees.

Pure: hashes and integers in, hashes out; no I/O. Proof building is split from proof
checking (:mod:`evidence_ledger.tlog.proof_verify`), as in transparency-dev/merkle
``proof/proof.go`` vs ``proof/verify.go``, and from reading the ledger
(:mod:`evidence_ledger.storage.log_proofs` makes proofs of a ledger's entries). The
algorithms here read hashes of *perfect* subtrees from a :class:`HashSource` (the stored
nodes of :class:`evidence_ledger.storage.tree_store.TiledTree`, or an in-memory tree) and
never recompute the tree: a proof costs O(log n) node reads, plus, for the one proof hash
that is not a perfect subtree (on the right edge of the tree), one read and one hash per
set bit of the tree size. A :class:`Prover` keeps those right-edge hashes, so its later
proofs hash nothing.

- Inclusion proof, RFC 9162 §2.1.3.1: PATH(m, D[n]).
- Consistency proof, RFC 9162 §2.1.4.1: PROOF(m, D[n]) = SUBPROOF(m, D[n], true).

Both are built as transparency-dev/merkle ``proof.go`` builds them: the siblings of the
path from a node up to the root, read by (level, index), in the order RFC 9162 gives.

Every hash is 32 bytes; indices and sizes are 0-based ints. JSON forms
(:class:`InclusionProof`, :class:`ConsistencyProof`) use the field names of the
transparency-dev/merkle test vectors with standard base64 hashes.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Protocol

from evidence_ledger.format.errors import UsageError
from evidence_ledger.tlog.merkle import EMPTY_ROOT, node_hash, root_of_range

__all__ = [
    "ConsistencyProof",
    "HashSource",
    "InclusionProof",
    "Prover",
    "consistency_proof",
    "inclusion_proof",
    "subtree_hash",
    "tree_root",
]

_EDGE_CACHE = 4096  # right-edge hashes a Prover keeps (under log2(n) per tree size)


class HashSource(Protocol):
    """Hashes of the perfect subtrees of a tree of ``size`` leaves."""

    size: int

    def node(self, level: int, index: int) -> bytes:
        """MTH(D[index * 2**level : (index + 1) * 2**level]), 32 bytes.

        Requires ``(index + 1) * 2**level <= size``.
        """
        ...


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def subtree_hash(src: HashSource, lo: int, hi: int) -> bytes:
    """MTH(D[lo:hi]) for a node of the RFC 9162 tree (``lo`` a multiple of the
    smallest power of two >= ``hi - lo``), from at most log2(n) perfect subtrees.

    Returns 32 bytes; SHA-256("") when ``lo == hi``. A perfect subtree (``hi - lo`` a
    power of two) is one node read and no hashing.
    """
    return root_of_range(src.node, lo, hi)


class Prover:
    """Proofs and roots from one loaded tree, for as many calls as needed.

    Wraps a :class:`HashSource` and is one itself. It remembers the roots and the
    right-edge (non-perfect) subtree hashes it computes, fewer than ``log2(n)`` per tree
    size, so that once a size has been seen (by :meth:`root` or any proof) a proof
    reads one stored hash per proof hash and hashes nothing. The source must not change
    while the prover is in use (a :class:`~evidence_ledger.storage.tree_store.TiledTree`
    never does).

    Args:
        src: the tree; proofs may be asked for any size up to ``src.size``.
    """

    def __init__(self, src: HashSource) -> None:
        self.src = src
        self.size = src.size
        self._node = src.node
        self._edges: dict[tuple[int, int], bytes] = {}

    def node(self, level: int, index: int) -> bytes:
        """``src.node(level, index)`` (see :class:`HashSource`)."""
        return self._node(level, index)

    def subtree(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi]) as :func:`subtree_hash`, remembered when it is not perfect.

        Folding the perfect subtrees of ``[lo, hi)`` from the right yields
        MTH(D[start:hi]) for the start of each of them: all the non-perfect hashes that
        end at ``hi`` and that proofs for tree size ``hi`` need. All are remembered, so
        :meth:`root` of a size prepares every later proof for that size.
        """
        n = hi - lo
        if n and not n & (n - 1):
            level = n.bit_length() - 1
            return self._node(level, lo >> level)
        value = self._edges.get((lo, hi))
        if value is not None:
            return value
        if n == 0:
            return EMPTY_ROOT
        peaks: list[tuple[int, bytes]] = []
        start = lo
        for level in range(n.bit_length() - 1, -1, -1):
            if n >> level & 1:
                peaks.append((start, self._node(level, start >> level)))
                start += 1 << level
        if len(self._edges) + len(peaks) > _EDGE_CACHE:
            self._edges.clear()
        value = peaks[-1][1]
        for start, peak in reversed(peaks[:-1]):
            value = node_hash(peak, value)
            self._edges[(start, hi)] = value
        return value

    def root(self, size: int | None = None) -> bytes:
        """MTH(D[0:size]) (RFC 9162 §2.1.1), 32 bytes; ``size`` defaults to ``src.size``.

        Requires ``0 <= size <= src.size``; SHA-256("") for the empty tree.

        Raises:
            UsageError: if ``size`` is out of range.
        """
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise UsageError(f"want 0 <= size <= {self.size}, got size {size}")
        return self.subtree(0, size)

    def inclusion(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[0:size]) (RFC 9162 §2.1.3.1): 32-byte hashes from the leaf up.

        Requires ``0 <= index < size <= src.size``; ``size`` defaults to ``src.size``.

        Raises:
            UsageError: if the preconditions do not hold.
        """
        size = self.size if size is None else size
        if not 0 <= index < size:
            raise UsageError(f"want 0 <= index < size, got index {index}, size {size}")
        if size > self.size:
            raise UsageError(f"want size <= {self.size} (the tree size), got size {size}")
        return self._path(index, 0, size)

    def consistency(self, size1: int, size2: int | None = None) -> list[bytes]:
        """PROOF(size1, D[0:size2]) (RFC 9162 §2.1.4.1), 32-byte hashes in RFC order.

        Requires ``0 < size1 <= size2 <= src.size``; ``size2`` defaults to ``src.size``;
        empty when ``size1 == size2``.

        Raises:
            UsageError: if the preconditions do not hold.
        """
        size2 = self.size if size2 is None else size2
        if not 0 < size1 <= size2:
            raise UsageError(f"want 0 < size1 <= size2, got size1 {size1}, size2 {size2}")
        if size2 > self.size:
            raise UsageError(f"want size2 <= {self.size} (the tree size), got size2 {size2}")
        if size1 == size2:
            return []
        # The largest perfect subtree ending at size1 (level = trailing zeros of size1);
        # the proof is its hash (left out when it is the whole old tree: the verifier
        # has root1) followed by its inclusion path in the tree of size2.
        level = (size1 & -size1).bit_length() - 1
        index = (size1 - 1) >> level
        path = self._path(size1 - 1, level, size2)
        return [self._node(level, index), *path] if index else path

    def _path(self, leaf: int, level: int, size: int) -> list[bytes]:
        """Siblings of the ancestors at ``level`` and above of leaf ``leaf``, in the tree
        of ``size`` leaves (``leaf < size``; for ``level > 0`` the ancestor at ``level``
        must be complete and not the root)."""
        node = self._node
        # Below `inner` the paths to `leaf` and to `size - 1` differ: every sibling is
        # a perfect subtree, except the right one at level inner - 1, which ends at size.
        inner = (leaf ^ (size - 1)).bit_length()
        path = [node(h, (leaf >> h) ^ 1) for h in range(level, inner - 1)]
        if inner:
            h = inner - 1
            lo = ((leaf >> h) + 1) << h
            if size - lo == 1 << h:
                path.append(node(h, lo >> h))
            else:
                path.append(self.subtree(lo, size))
        # Above: the path runs along the right edge; left siblings where the bit is set.
        rest, h = leaf >> inner, inner
        while rest:
            if rest & 1:
                path.append(node(h, rest - 1))
            rest >>= 1
            h += 1
        return path


def _prover(src: HashSource) -> Prover:
    return src if isinstance(src, Prover) else Prover(src)


def tree_root(src: HashSource, size: int) -> bytes:
    """MTH(D[0:size]) (RFC 9162 §2.1.1), 32 bytes; requires ``0 <= size <= src.size``.

    Raises:
        UsageError: if ``size`` is out of range.
    """
    if not 0 <= size <= src.size:
        raise UsageError(f"want 0 <= size <= {src.size}, got size {size}")
    return _prover(src).subtree(0, size)


def inclusion_proof(src: HashSource, index: int, size: int) -> list[bytes]:
    """PATH(index, D[0:size]) (RFC 9162 §2.1.3.1): hashes from the leaf upwards.

    Requires ``0 <= index < size <= src.size``. Pass a :class:`Prover` as ``src`` to
    make many proofs from one tree.

    Raises:
        UsageError: if the preconditions do not hold.
    """
    return _prover(src).inclusion(index, size)


def consistency_proof(src: HashSource, size1: int, size2: int) -> list[bytes]:
    """PROOF(size1, D[0:size2]) (RFC 9162 §2.1.4.1), hashes in RFC order.

    Requires ``0 < size1 <= size2 <= src.size``; empty when ``size1 == size2``.

    Raises:
        UsageError: if the preconditions do not hold.
    """
    return _prover(src).consistency(size1, size2)


@dataclass(frozen=True)
class InclusionProof:
    """An inclusion proof for one ledger entry.

    Attributes:
        leaf_index: the entry's seq (0-based leaf index).
        tree_size: size of the tree the proof is for.
        leaf_hash: SHA-256(0x00 || entry bytes), 32 bytes.
        root: root of the tree of ``tree_size`` leaves, 32 bytes.
        proof: the audit path, 32-byte hashes from the leaf upwards.
        checked_against: what the proof was verified against before it was handed out,
            one phrase each (e.g. ``"checkpoint 00000007 (tree size 1000; signature
            verified: example.com/log+1a2b3c4d)"``); empty when it was not.
    """

    leaf_index: int
    tree_size: int
    leaf_hash: bytes
    root: bytes
    proof: tuple[bytes, ...]
    checked_against: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``{"leafIdx", "treeSize", "leafHash", "root", "proof"}``, hashes in base64, and
        ``"checked_against"`` (a list of phrases) when there is any."""
        doc: dict[str, Any] = {
            "leafIdx": self.leaf_index,
            "treeSize": self.tree_size,
            "leafHash": _b64(self.leaf_hash),
            "root": _b64(self.root),
            "proof": [_b64(h) for h in self.proof],
        }
        if self.checked_against:
            doc["checked_against"] = list(self.checked_against)
        return doc


@dataclass(frozen=True)
class ConsistencyProof:
    """A consistency proof between two sizes of the ledger's tree.

    Attributes:
        size1, size2: the older and newer tree sizes, ``0 < size1 <= size2``.
        root1, root2: their roots, 32 bytes each.
        proof: the consistency proof, 32-byte hashes.
        checked_against: as :attr:`InclusionProof.checked_against`.
    """

    size1: int
    size2: int
    root1: bytes
    root2: bytes
    proof: tuple[bytes, ...]
    checked_against: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``{"size1", "size2", "root1", "root2", "proof"}``, hashes in base64, and
        ``"checked_against"`` (a list of phrases) when there is any."""
        doc: dict[str, Any] = {
            "size1": self.size1,
            "size2": self.size2,
            "root1": _b64(self.root1),
            "root2": _b64(self.root2),
            "proof": [_b64(h) for h in self.proof],
        }
        if self.checked_against:
            doc["checked_against"] = list(self.checked_against)
        return doc
