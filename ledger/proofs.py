"""Build RFC 9162 inclusion and consistency proofs from stored subtree hashes.

Proof building is split from proof checking (:mod:`ledger.proof_verify`), as in
transparency-dev/merkle ``proof/proof.go`` vs ``proof/verify.go``. The algorithms here
read hashes of *perfect* subtrees from a :class:`HashSource` (the tiles of
:mod:`ledger.tree_store`, or an in-memory tree) and never recompute the tree: a proof
costs O(log n) node reads.

- Inclusion proof, RFC 9162 §2.1.3.1: PATH(m, D[n]).
- Consistency proof, RFC 9162 §2.1.4.1: PROOF(m, D[n]) = SUBPROOF(m, D[n], true).

Every hash is 32 bytes; indices and sizes are 0-based ints. JSON forms use the field
names of the transparency-dev/merkle test vectors with standard base64 hashes.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import EvidenceError, UsageError
from .log import Ledger
from .merkle import EMPTY_ROOT, node_hash
from .tree_store import TreeStore

__all__ = [
    "ConsistencyProof",
    "HashSource",
    "InclusionProof",
    "consistency_proof",
    "inclusion_proof",
    "prove_consistency",
    "prove_inclusion",
    "subtree_hash",
    "tree_root",
]


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


def _split(n: int) -> int:
    """RFC 9162 §2.1.1 split point: the largest power of two smaller than ``n`` (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def subtree_hash(src: HashSource, lo: int, hi: int) -> bytes:
    """MTH(D[lo:hi]) for a node of the RFC 9162 tree (``lo`` a multiple of the
    smallest power of two >= ``hi - lo``), from at most log2(n) perfect subtrees.

    Returns 32 bytes; SHA-256("") when ``lo == hi``.
    """
    if lo == hi:
        return EMPTY_ROOT
    peaks: list[bytes] = []
    n = hi - lo
    for level in range(n.bit_length() - 1, -1, -1):
        if n >> level & 1:
            peaks.append(src.node(level, lo >> level))
            lo += 1 << level
    root = peaks[-1]
    for peak in reversed(peaks[:-1]):
        root = node_hash(peak, root)
    return root


def tree_root(src: HashSource, size: int) -> bytes:
    """MTH(D[0:size]) (RFC 9162 §2.1.1), 32 bytes; requires ``0 <= size <= src.size``.

    Raises:
        UsageError: if ``size`` is out of range.
    """
    if not 0 <= size <= src.size:
        raise UsageError(f"want 0 <= size <= {src.size}, got size {size}")
    return subtree_hash(src, 0, size)


def inclusion_proof(src: HashSource, index: int, size: int) -> list[bytes]:
    """PATH(index, D[0:size]) (RFC 9162 §2.1.3.1): hashes from the leaf upwards.

    Requires ``0 <= index < size <= src.size``.

    Raises:
        UsageError: if the preconditions do not hold.
    """
    if not 0 <= index < size:
        raise UsageError(f"want 0 <= index < size, got index {index}, size {size}")
    if size > src.size:
        raise UsageError(f"want size <= {src.size} (the tree size), got size {size}")
    path: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            path.append(subtree_hash(src, lo + k, hi))
            hi = lo + k
        else:
            path.append(subtree_hash(src, lo, lo + k))
            lo += k
    path.reverse()
    return path


def consistency_proof(src: HashSource, size1: int, size2: int) -> list[bytes]:
    """PROOF(size1, D[0:size2]) (RFC 9162 §2.1.4.1), hashes in RFC order.

    Requires ``0 < size1 <= size2 <= src.size``; empty when ``size1 == size2``.

    Raises:
        UsageError: if the preconditions do not hold.
    """
    if not 0 < size1 <= size2:
        raise UsageError(f"want 0 < size1 <= size2, got size1 {size1}, size2 {size2}")
    if size2 > src.size:
        raise UsageError(f"want size2 <= {src.size} (the tree size), got size2 {size2}")
    proof: list[bytes] = []
    lo, hi, m, complete = 0, size2, size1, True
    while True:
        n = hi - lo
        if m == n:
            if not complete:
                proof.append(subtree_hash(src, lo, hi))
            break
        k = _split(n)
        if m <= k:
            proof.append(subtree_hash(src, lo + k, hi))
            hi = lo + k
        else:
            proof.append(subtree_hash(src, lo, lo + k))
            lo, m, complete = lo + k, m - k, False
    proof.reverse()
    return proof


@dataclass(frozen=True)
class InclusionProof:
    """An inclusion proof for one ledger entry.

    Attributes:
        leaf_index: the entry's seq (0-based leaf index).
        tree_size: size of the tree the proof is for.
        leaf_hash: SHA-256(0x00 || entry bytes), 32 bytes.
        root: root of the tree of ``tree_size`` leaves, 32 bytes.
        proof: the audit path, 32-byte hashes from the leaf upwards.
    """

    leaf_index: int
    tree_size: int
    leaf_hash: bytes
    root: bytes
    proof: tuple[bytes, ...]

    def to_json(self) -> dict[str, Any]:
        """``{"leafIdx", "treeSize", "leafHash", "root", "proof"}``, hashes in base64."""
        return {
            "leafIdx": self.leaf_index,
            "treeSize": self.tree_size,
            "leafHash": _b64(self.leaf_hash),
            "root": _b64(self.root),
            "proof": [_b64(h) for h in self.proof],
        }


@dataclass(frozen=True)
class ConsistencyProof:
    """A consistency proof between two sizes of the ledger's tree.

    Attributes:
        size1, size2: the older and newer tree sizes, ``0 < size1 <= size2``.
        root1, root2: their roots, 32 bytes each.
        proof: the consistency proof, 32-byte hashes.
    """

    size1: int
    size2: int
    root1: bytes
    root2: bytes
    proof: tuple[bytes, ...]

    def to_json(self) -> dict[str, Any]:
        """``{"size1", "size2", "root1", "root2", "proof"}``, hashes in base64."""
        return {
            "size1": self.size1,
            "size2": self.size2,
            "root1": _b64(self.root1),
            "root2": _b64(self.root2),
            "proof": [_b64(h) for h in self.proof],
        }


def prove_inclusion(
    ledger: Ledger | str | os.PathLike[str] | None, index: int, tree_size: int | None = None
) -> InclusionProof:
    """Inclusion proof of entry ``index`` in the ledger's tree of ``tree_size`` leaves.

    Brings the hash store up to date first (only new entries are hashed), then reads
    O(log n) stored hashes. The leaf hash is re-read from the log and must match the
    store.

    Args:
        ledger: the ledger or its directory.
        index: the entry's seq; requires ``0 <= index < tree_size``.
        tree_size: defaults to the current number of entries.

    Raises:
        UsageError: if there is no ledger or an argument is out of range.
        EvidenceError: if the log is damaged or disagrees with the hash store.
    """
    tree = TreeStore(ledger).update()
    size = tree.size if tree_size is None else tree_size
    if not 0 <= index < size:
        raise UsageError(f"want 0 <= seq < tree size, got seq {index}, tree size {size}")
    if size > tree.size:
        raise UsageError(f"tree size {size} is larger than the ledger ({tree.size} entries)")
    leaf = tree.leaf(index)
    if TreeStore(ledger).log_leaf(index) != leaf:
        raise EvidenceError(
            f"entry {index} in the log no longer matches the hash store: the log was "
            "modified after it was hashed (run verify)"
        )
    return InclusionProof(
        index, size, leaf, tree_root(tree, size), tuple(inclusion_proof(tree, index, size))
    )


def prove_consistency(
    ledger: Ledger | str | os.PathLike[str] | None, size1: int, size2: int | None = None
) -> ConsistencyProof:
    """Consistency proof between the ledger's trees of ``size1`` and ``size2`` leaves.

    Args:
        ledger: the ledger or its directory.
        size1: older size; requires ``0 < size1 <= size2``.
        size2: newer size, defaults to the current number of entries.

    Raises:
        UsageError: if there is no ledger or a size is out of range.
        EvidenceError: if the log is damaged or disagrees with the hash store.
    """
    tree = TreeStore(ledger).update()
    size2 = tree.size if size2 is None else size2
    if not 0 < size1 <= size2:
        raise UsageError(f"want 0 < from <= to, got from {size1}, to {size2}")
    if size2 > tree.size:
        raise UsageError(f"size {size2} is larger than the ledger ({tree.size} entries)")
    return ConsistencyProof(
        size1,
        size2,
        tree_root(tree, size1),
        tree_root(tree, size2),
        tuple(consistency_proof(tree, size1, size2)),
    )
