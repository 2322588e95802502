"""Inclusion proofs verified against one trusted root, remembering what each one proved.

RFC 9162 §2.1.3.2 verification, as :func:`evidence_ledger.tlog.proof_verify.verify_inclusion`
does it, for many proofs against the same root: every node a verified proof
authenticates (each hash computed on the way up, and each sibling hashed into it) is
remembered by the leaves it covers, ``[lo, hi)``. The next proof hashes upwards only until
it computes a node already known: from there on, each of its remaining hashes must equal
the known sibling, and nothing more is hashed. A node whose hash equals the known hash of
the node over the same leaves is authentic (SHA-256 is collision resistant), and the known
nodes are closed upwards (a node's parent and sibling are known with it), so a proof
accepted this way is exactly one :func:`verify_inclusion` accepts. Pure: bytes and
integers in, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from evidence_ledger.tlog.merkle import HASH_SIZE, node_hash
from evidence_ledger.tlog.proof_verify import RootMismatchError, verify_inclusion

__all__ = ["VerifiedNodes"]

_Range = tuple[int, int]
_LIMIT = 1 << 16  # known nodes kept (about 64 bytes each, plus the dict's own)


class VerifiedNodes:
    """Inclusion proofs against the tree of ``size`` leaves whose root is ``root``.

    Args:
        size: tree size (leaves), > 0.
        root: its trusted 32-byte root.
        limit: known nodes kept; past it they are forgotten (only costing hashes).
    """

    def __init__(self, size: int, root: bytes, limit: int = _LIMIT) -> None:
        self.size = size
        self.root = root
        self.limit = limit
        self._known: dict[_Range, bytes] = {(0, size): root}

    def _steps(self, index: int) -> list[tuple[_Range, _Range, bool]]:
        """``(sibling, parent, sibling is on the left)`` ranges of each proof hash of leaf
        ``index``, from the leaf up (the order of RFC 9162's audit path)."""
        size = self.size
        inner = (index ^ (size - 1)).bit_length()
        steps = []
        for level in range(inner):  # below the split: perfect subtrees (and one right edge)
            lo = (index >> (level + 1)) << (level + 1)
            mid, hi = lo + (1 << level), min(lo + (2 << level), size)
            left = bool(index >> level & 1)
            steps.append(((lo, mid) if left else (mid, hi), (lo, hi), left))
        rest, level = index >> inner, inner
        while rest:  # along the right edge: a left sibling where the bit is set
            if rest & 1:
                lo = (index >> (level + 1)) << (level + 1)
                steps.append(((lo, lo + (1 << level)), (lo, size), True))
            rest >>= 1
            level += 1
        return steps

    def check_inclusion(self, index: int, leaf: bytes, proof: Sequence[bytes]) -> None:
        """Check that ``leaf`` (32 bytes) is leaf ``index`` of the tree, by ``proof`` (the
        audit path, 32-byte hashes from the leaf up); remember what it proves.

        Raises:
            ProofPreconditionError, HashSizeError, ProofSizeError, RootMismatchError: as
                :func:`~evidence_ledger.tlog.proof_verify.verify_inclusion` raises them.
        """
        if not 0 <= index < self.size or len(leaf) != HASH_SIZE:
            verify_inclusion(index, self.size, leaf, proof, self.root)  # says what is wrong
        steps = self._steps(index)
        if len(proof) != len(steps) or any(len(h) != HASH_SIZE for h in proof):
            verify_inclusion(index, self.size, leaf, proof, self.root)
        known = self._known
        node = leaf
        authentic = known.get((index, index + 1)) == leaf
        learned: list[tuple[_Range, bytes]] = []
        for (sibling, parent, left), value in zip(steps, proof, strict=True):
            if authentic and known.get(sibling) == value:
                above = known.get(parent)  # known unless forgotten (see limit)
                if above is not None:
                    node = above
                    continue
            node = node_hash(value, node) if left else node_hash(node, value)
            learned += ((sibling, value), (parent, node))
            authentic = known.get(parent) == node
        if not authentic:  # the top node is the root, which is known
            raise RootMismatchError("root", self.root, node)
        if learned:
            if len(known) + len(learned) > self.limit:  # forget all: only costs hashes
                known.clear()
                known[(0, self.size)] = self.root
            known.update(learned)
            known[(index, index + 1)] = leaf
