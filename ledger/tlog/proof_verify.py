"""Verify RFC 9162 inclusion and consistency proofs: pure, bytes and integers in.

This module is the trust boundary for Merkle proofs: it imports nothing from storage
(only the hash functions of :mod:`evidence_ledger.tlog.merkle`), reads no files and keeps no state.
It follows transparency-dev/merkle ``proof/verify.go``; every precondition is checked
first, written as maths, and fails with a got/want message.

Hashes are raw 32-byte SHA-256 values; tree sizes and indices are non-negative ints.

- Inclusion (RFC 9162 §2.1.3.2): requires ``0 <= index < size``.
- Consistency (RFC 9162 §2.1.4.2): requires ``0 < size1 <= size2``. A proof from the
  empty tree (``size1 == 0``) is refused: it proves nothing, and RFC 9162 §2.1.4.1
  defines none.
- Every hash (leaf, roots, each proof element) must be exactly 32 bytes. This is
  stricter than a literal transcription of the RFC, and it is deliberate: a 12-byte
  "root" is never a SHA-256 tree head.

Errors all derive from :class:`ProofError` (an
:class:`~evidence_ledger.format.errors.EvidenceError`,
exit code 1).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from evidence_ledger.format.errors import EvidenceError
from evidence_ledger.tlog.merkle import HASH_SIZE, node_hash

__all__ = [
    "HashSizeError",
    "ProofError",
    "ProofPreconditionError",
    "ProofSizeError",
    "RootMismatchError",
    "root_from_consistency_proof",
    "root_from_inclusion_proof",
    "verify_consistency",
    "verify_inclusion",
]


class ProofError(EvidenceError):
    """A Merkle proof that does not verify (exit code 1)."""


class ProofPreconditionError(ProofError):
    """Indices or tree sizes outside the range the proof type is defined for."""


class HashSizeError(ProofError):
    """A hash that is not exactly 32 bytes.

    Attributes:
        what: which input (``"leaf hash"``, ``"root1"``, ``"proof[2]"``...).
        got: its length in bytes.
    """

    def __init__(self, what: str, got: int) -> None:
        super().__init__(f"{what} is {got} bytes, want {HASH_SIZE}")
        self.what = what
        self.got = got


class ProofSizeError(ProofError):
    """A proof with the wrong number of hashes for its indices and sizes.

    Attributes:
        got: number of hashes in the proof.
        want: number the sizes call for.
    """

    def __init__(self, got: int, want: int) -> None:
        super().__init__(f"proof has {got} hash{'' if got == 1 else 'es'}, want {want}")
        self.got = got
        self.want = want


class RootMismatchError(ProofError):
    """The root a proof leads to is not the root it was checked against.

    Attributes:
        which: the root that failed (``"root"`` for inclusion, ``"root1"`` or
            ``"root2"`` for consistency).
        expected: the root given to the verifier (32 bytes).
        calculated: the root computed from the proof (32 bytes).
    """

    def __init__(self, which: str, expected: bytes, calculated: bytes) -> None:
        super().__init__(f"{which} mismatch: calculated {_b64(calculated)}, want {_b64(expected)}")
        self.which = which
        self.expected = expected
        self.calculated = calculated


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _check_hash(what: str, value: bytes) -> None:
    if len(value) != HASH_SIZE:
        raise HashSizeError(what, len(value))


def _check_proof(proof: Sequence[bytes]) -> None:
    for i, h in enumerate(proof):
        _check_hash(f"proof[{i}]", h)


def _inner_proof_size(index: int, size: int) -> int:
    """Levels below the point where the paths to ``index`` and ``size - 1`` split."""
    return (index ^ (size - 1)).bit_length()


def _decomp_incl_proof(index: int, size: int) -> tuple[int, int]:
    """(inner, border): lengths of the lower and upper parts of an inclusion proof."""
    inner = _inner_proof_size(index, size)
    border = (index >> inner).bit_count()
    return inner, border


def _chain_inner(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    for i, h in enumerate(proof):
        seed = node_hash(seed, h) if (index >> i) & 1 == 0 else node_hash(h, seed)
    return seed


def _chain_inner_right(seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    for i, h in enumerate(proof):
        if (index >> i) & 1 == 1:
            seed = node_hash(h, seed)
    return seed


def _chain_border_right(seed: bytes, proof: Sequence[bytes]) -> bytes:
    for h in proof:
        seed = node_hash(h, seed)
    return seed


def root_from_inclusion_proof(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes]
) -> bytes:
    """The root an inclusion proof leads to (RFC 9162 §2.1.3.2).

    Args:
        index: 0-based leaf index; requires ``0 <= index < size``.
        size: tree size the proof is for.
        leaf_hash: 32-byte leaf hash, SHA-256(0x00 || entry bytes).
        proof: the audit path, 32-byte hashes from the leaf upwards.

    Returns:
        The 32-byte root the proof implies.

    Raises:
        ProofPreconditionError: unless ``0 <= index < size``.
        HashSizeError: if the leaf hash or a proof hash is not 32 bytes.
        ProofSizeError: if the proof length is wrong for ``index`` and ``size``.
    """
    if not 0 <= index < size:
        raise ProofPreconditionError(f"want 0 <= index < size, got index {index}, size {size}")
    _check_hash("leaf hash", leaf_hash)
    _check_proof(proof)
    inner, border = _decomp_incl_proof(index, size)
    if len(proof) != inner + border:
        raise ProofSizeError(len(proof), inner + border)
    res = _chain_inner(leaf_hash, proof[:inner], index)
    return _chain_border_right(res, proof[inner:])


def verify_inclusion(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf_hash`` is leaf ``index`` of the tree of ``size`` with ``root``.

    RFC 9162 §2.1.3.2. Arguments as :func:`root_from_inclusion_proof`, plus the 32-byte
    ``root`` of the tree of ``size`` leaves.

    Raises:
        ProofPreconditionError, HashSizeError, ProofSizeError: see
            :func:`root_from_inclusion_proof`; HashSizeError also for ``root``.
        RootMismatchError: if the proof leads to another root.
    """
    if not 0 <= index < size:
        raise ProofPreconditionError(f"want 0 <= index < size, got index {index}, size {size}")
    _check_hash("root", root)
    calculated = root_from_inclusion_proof(index, size, leaf_hash, proof)
    if calculated != root:
        raise RootMismatchError("root", root, calculated)


def _check_sizes(size1: int, size2: int) -> None:
    if size1 == 0:
        raise ProofPreconditionError(
            f"want 0 < size1 <= size2, got size1 0 (size2 {size2}): "
            "a consistency proof from the empty tree is meaningless"
        )
    if not 0 < size1 <= size2:
        raise ProofPreconditionError(f"want 0 < size1 <= size2, got size1 {size1}, size2 {size2}")


def root_from_consistency_proof(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes
) -> bytes:
    """Check ``proof`` against ``root1`` and return the root of the tree of ``size2``.

    RFC 9162 §2.1.4.2 (as transparency-dev/merkle ``RootFromConsistencyProof``).

    Args:
        size1: size of the older tree; requires ``0 < size1 <= size2``.
        size2: size of the newer tree.
        proof: the consistency proof, 32-byte hashes (empty when ``size1 == size2``).
        root1: 32-byte root of the tree of ``size1`` leaves.

    Returns:
        The 32-byte root of the tree of ``size2`` leaves that the proof implies.

    Raises:
        ProofPreconditionError: unless ``0 < size1 <= size2``.
        HashSizeError: if ``root1`` or a proof hash is not 32 bytes.
        ProofSizeError: if the proof length is wrong for the two sizes.
        RootMismatchError: if the proof does not lead back to ``root1``.
    """
    _check_sizes(size1, size2)
    _check_hash("root1", root1)
    _check_proof(proof)
    if size1 == size2:
        if proof:
            raise ProofSizeError(len(proof), 0)
        return root1
    if not proof:
        raise ProofSizeError(0, _consistency_proof_size(size1, size2))

    inner, border = _decomp_incl_proof(size1 - 1, size2)
    shift = (size1 & -size1).bit_length() - 1  # trailing zeros of size1
    inner -= shift  # shift < inner because size1 < size2
    # The proof starts with the root of the subtree of size 2**shift holding leaf
    # size1 - 1, unless size1 is that very power of two (then it is root1).
    if size1 == 1 << shift:
        seed, start = root1, 0
    else:
        seed, start = proof[0], 1
    if len(proof) != start + inner + border:
        raise ProofSizeError(len(proof), start + inner + border)
    rest = proof[start:]
    mask = (size1 - 1) >> shift  # start chaining from level `shift`
    hash1 = _chain_inner_right(seed, rest[:inner], mask)
    hash1 = _chain_border_right(hash1, rest[inner:])
    if hash1 != root1:
        raise RootMismatchError("root1", root1, hash1)
    hash2 = _chain_inner(seed, rest[:inner], mask)
    return _chain_border_right(hash2, rest[inner:])


def _consistency_proof_size(size1: int, size2: int) -> int:
    inner, border = _decomp_incl_proof(size1 - 1, size2)
    shift = (size1 & -size1).bit_length() - 1
    return (0 if size1 == 1 << shift else 1) + inner - shift + border


def verify_consistency(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes
) -> None:
    """Check that the tree of ``size2`` with ``root2`` extends the one of ``size1``.

    RFC 9162 §2.1.4.2. Arguments as :func:`root_from_consistency_proof`, plus the
    32-byte ``root2`` of the tree of ``size2`` leaves. When ``size1 == size2`` the proof
    must be empty and the roots equal byte for byte; nothing is hashed then, so, as in
    transparency-dev/merkle ``VerifyConsistency`` (and its vector
    ``consistency/additional/sizes-are-equal-one-and-proof-is-empty.json``), the roots'
    lengths are not checked in that case.

    Raises:
        ProofPreconditionError, HashSizeError, ProofSizeError: see
            :func:`root_from_consistency_proof`; HashSizeError also for ``root2``.
        RootMismatchError: if the proof does not lead to ``root1`` and ``root2``.
    """
    _check_sizes(size1, size2)
    if size1 == size2:
        if proof:
            raise ProofSizeError(len(proof), 0)
        if root1 != root2:
            raise RootMismatchError("root2", root2, root1)
        return
    _check_hash("root1", root1)
    _check_hash("root2", root2)
    calculated = root_from_consistency_proof(size1, size2, proof, root1)
    if calculated != root2:
        raise RootMismatchError("root2", root2, calculated)
