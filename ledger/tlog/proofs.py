"""Build RFC 9162 inclusion and consistency proofs from stored subtree hashes.

Proof building is split from proof checking (:mod:`evidence_ledger.tlog.proof_verify`), as in
transparency-dev/merkle ``proof/proof.go`` vs ``proof/verify.go``. The algorithms here
read hashes of *perfect* subtrees from a :class:`HashSource` (the stored nodes of
:mod:`evidence_ledger.storage.tree_store`, or an in-memory tree) and never recompute the tree: a
proof
costs O(log n) node reads, plus, for the one proof hash that is not a perfect subtree
(on the right edge of the tree), one read and one hash per set bit of the tree size. A
:class:`Prover` keeps those right-edge hashes, so its later proofs hash nothing.

- Inclusion proof, RFC 9162 §2.1.3.1: PATH(m, D[n]).
- Consistency proof, RFC 9162 §2.1.4.1: PROOF(m, D[n]) = SUBPROOF(m, D[n], true).

Both are built as transparency-dev/merkle ``proof.go`` builds them: the siblings of the
path from a node up to the root, read by (level, index), in the order RFC 9162 gives.

Every hash is 32 bytes; indices and sizes are 0-based ints. JSON forms use the field
names of the transparency-dev/merkle test vectors with standard base64 hashes.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.format.framing import (
    FRAME_OVERHEAD,
    MAX_RECORD,
    MORE_FLAG,
    Damage,
    TornTail,
    scan_stream,
)
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.tree_store import TiledTree, TreeStore, TreeStoreError
from evidence_ledger.tlog.merkle import (
    EMPTY_ROOT,
    CompactRange,
    leaf_hash,
    node_hash,
    root_of_range,
)
from evidence_ledger.tlog.proof_verify import verify_consistency, verify_inclusion

__all__ = [
    "ConsistencyProof",
    "HashSource",
    "InclusionProof",
    "Prover",
    "consistency_proof",
    "inclusion_proof",
    "prove_consistency",
    "prove_consistency_checked",
    "prove_inclusion",
    "prove_inclusion_checked",
    "prove_inclusions",
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
    while the prover is in use (a :class:`~evidence_ledger.storage.tree_store.TiledTree` never
    does).

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


def prove_inclusions(
    ledger: Ledger | str | os.PathLike[str] | None,
    indices: Iterable[int],
    tree_size: int | None = None,
) -> list[InclusionProof]:
    """Inclusion proofs of entries ``indices`` in the ledger's tree of ``tree_size`` leaves.

    Brings the hash store up to date once (only new entries are hashed; nothing is
    locked or written when there are none), then reads O(log n) stored hashes per
    proof from one :class:`Prover`. Each leaf hash is re-read from the log (two
    positioned reads) and must match the store.

    Args:
        ledger: the ledger or its directory.
        indices: the entries' seqs; each requires ``0 <= index < tree_size``.
        tree_size: defaults to the current number of entries.

    Returns:
        One proof per index, in the order given, all for the same tree size and root.

    Raises:
        UsageError: if there is no ledger or an argument is out of range (checked for
            every index before any proof is made).
        EvidenceError: if the log is damaged or disagrees with the hash store.
    """
    store = TreeStore(ledger)
    tree = store.update()
    wanted = list(indices)
    size = tree.size if tree_size is None else tree_size
    for index in wanted:
        if not 0 <= index < size:
            raise UsageError(f"want 0 <= seq < tree size, got seq {index}, tree size {size}")
    if size > tree.size:
        raise UsageError(f"tree size {size} is larger than the ledger ({tree.size} entries)")
    prover = Prover(tree)
    root = prover.root(size) if wanted else b""
    out = []
    for index, logged in zip(wanted, store.log_leaves(wanted), strict=True):
        leaf = tree.leaf(index)
        if logged != leaf:
            raise TreeStoreError(
                f"entry {index} in the log no longer matches the hash store: the log was "
                "modified after it was hashed, or the store was (run verify)",
                store.directory,
            )
        out.append(InclusionProof(index, size, leaf, root, tuple(prover.inclusion(index, size))))
    return out


def prove_inclusion(
    ledger: Ledger | str | os.PathLike[str] | None, index: int, tree_size: int | None = None
) -> InclusionProof:
    """Inclusion proof of entry ``index`` in the ledger's tree of ``tree_size`` leaves.

    As :func:`prove_inclusions` for one entry: brings the hash store up to date first
    (cheap when nothing was appended), then reads O(log n) stored hashes. The leaf hash
    is re-read from the log and must match the store.

    Args:
        ledger: the ledger or its directory.
        index: the entry's seq; requires ``0 <= index < tree_size``.
        tree_size: defaults to the current number of entries.

    Raises:
        UsageError: if there is no ledger or an argument is out of range.
        EvidenceError: if the log is damaged or disagrees with the hash store.
    """
    return prove_inclusions(ledger, [index], tree_size)[0]


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
    prover = Prover(tree)
    return ConsistencyProof(
        size1,
        size2,
        prover.root(size1),
        prover.root(size2),
        tuple(prover.consistency(size1, size2)),
    )


# -- proofs checked against the log ------------------------------------------------------

_T = TypeVar("_T")


@dataclass(frozen=True)
class _LogHead:
    """What one pass over ``log.bin`` recomputed: the number of complete entries, the
    roots at the sizes asked for (and at ``size``), and one leaf hash if asked for."""

    size: int
    roots: dict[int, bytes]
    leaf: bytes | None


_HEADER = struct.Struct(">II")  # frame: u32 word, u32 CRC-32 of the word (format.framing)
_CRC = struct.Struct(">I")
_READ = 1 << 22  # bytes per read of the log


def _damaged(index: int, reason: str) -> EvidenceError:
    return EvidenceError(
        f"the log is damaged at seq {index} ({reason}); run verify"
    )


def log_leaf_hashes(fd: int, size: int) -> Iterator[bytes]:
    """Leaf hashes SHA-256(0x00 || entry bytes) of every entry in complete groups of the
    log open at ``fd`` (its first ``size`` bytes), in order: what
    :func:`evidence_ledger.format.framing.scan_stream` reads, without building a record per entry.

    Frames are parsed from large positioned reads while every one checks out; at the
    first that does not (a CRC or length that fails, or the end of the file inside a
    group), the rest is read by :func:`~evidence_ledger.format.framing.scan_stream` from the start
    of
    that group, so torn tails and damage are told apart exactly as every reader does.

    Raises:
        EvidenceError: at the first damaged frame or record (after the entries before
            it); a torn tail ends the log quietly.
    """
    pending: list[bytes] = []  # leaves of the group being read
    index = 0  # entries in complete groups so far
    group = 0  # file offset of the group being read
    pos = 0  # file offset of the next frame
    buf, base = b"", 0  # bytes read, and the file offset of buf[0]
    sha256, crc32, unpack_header, unpack_crc = (
        hashlib.sha256, zlib.crc32, _HEADER.unpack_from, _CRC.unpack_from
    )
    while pos < size:
        at = pos - base
        if at + _HEADER.size > len(buf):
            buf, base, at = os.pread(fd, min(_READ, size - pos), pos), pos, 0
            if len(buf) < _HEADER.size:
                break
        word, crc = unpack_header(buf, at)
        length = word & ~MORE_FLAG
        if crc32(buf[at : at + 4]) != crc or length > MAX_RECORD:
            break
        end = at + FRAME_OVERHEAD + length
        if end > len(buf):
            if pos + FRAME_OVERHEAD + length > size:
                break
            buf = os.pread(fd, min(max(_READ, FRAME_OVERHEAD + length), size - pos), pos)
            base, at, end = pos, 0, FRAME_OVERHEAD + length
            if end > len(buf):
                break
        data = buf[at + _HEADER.size : end - _CRC.size]
        if crc32(data) != unpack_crc(buf, end - _CRC.size)[0]:
            break
        pending.append(sha256(b"\x00" + data).digest())
        pos += FRAME_OVERHEAD + length
        if not word & MORE_FLAG:
            yield from pending
            index += len(pending)
            pending.clear()
            group = pos
    else:
        if not pending:
            return  # read to the end of the log
    # Something did not check out, or the log ends inside a group: read on from the
    # start of that group as every reader does.
    with os.fdopen(os.dup(fd), "rb", buffering=1 << 20) as fh:
        for item in scan_stream(fh, size, group, index):
            if isinstance(item, TornTail):
                return
            if isinstance(item, Damage):
                raise _damaged(item.index, item.reason)
            if not item.crc_ok:
                raise _damaged(item.index, "record fails its CRC-32")
            yield leaf_hash(item.data)


def _log_head(ledger: Ledger, sizes: Iterable[int], leaf_index: int | None = None) -> _LogHead:
    """Read ``log.bin`` once (never the ``tree/`` cache): the tree head and the roots at
    ``sizes``. O(n): one leaf hash and about one node hash per entry, O(log n) memory.

    Raises:
        EvidenceError: if a record is damaged (a frame or record CRC fails), or the log
            is not a regular file. A torn tail ends the log, as for every reader.
    """
    wanted = frozenset(sizes)
    tree = CompactRange()
    roots = {0: EMPTY_ROOT}
    leaf: bytes | None = None
    try:
        fd = ledger.store.open_fd()
    except FileNotFoundError:
        return _LogHead(0, roots, None)
    try:
        append = tree.append
        for hashed in log_leaf_hashes(fd, os.fstat(fd).st_size):
            if tree.size == leaf_index:
                leaf = hashed
            append(hashed)
            if tree.size in wanted:
                roots[tree.size] = tree.root()
    except OSError as exc:
        raise EvidenceError(f"cannot read {ledger.store.path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    roots[tree.size] = tree.root()
    return _LogHead(tree.size, roots, leaf)


def log_root(ledger: Ledger, size: int) -> bytes:
    """The RFC 9162 root hash (32 bytes) of the first ``size`` entries, recomputed from
    ``log.bin`` (never the ``tree/`` cache): one O(n) hashing pass.

    Raises:
        UsageError: if the log holds fewer than ``size`` entries.
        EvidenceError: if a record is damaged or the log is not a regular file.
    """
    head = _log_head(ledger, (size,))
    if size > head.size:
        raise UsageError(f"tree size {size} is larger than the ledger ({head.size} entries)")
    return head.roots[size]


def _from_store(
    ledger: Ledger, make: Callable[[TiledTree], _T], notice: Callable[[str], None] | None
) -> _T:
    """``make(tree)`` from the tree store; if the store fails, or ``make`` finds that its
    proof does not verify against the log, rebuild the store from the log and retry once
    (``notice`` gets one line saying so)."""
    store = TreeStore(ledger)
    try:
        return make(store.update())
    except (EvidenceError, UsageError) as exc:  # the arguments were checked against the log
        reason = exc.problem if isinstance(exc, TreeStoreError) else str(exc)
    result = make(store.rebuild())
    if notice is not None:
        notice(
            f"the tree store {store.directory} did not match log.bin ({reason}); rebuilt it "
            "from the log (run verify if the log should not have changed)"
        )
    return result


def prove_inclusion_checked(
    ledger: Ledger | str | os.PathLike[str] | None,
    index: int,
    tree_size: int | None = None,
    notice: Callable[[str], None] | None = None,
) -> InclusionProof:
    """Inclusion proof of entry ``index``, checked against the log itself.

    The ``tree/`` store is a cache that anyone who can write the ledger directory can
    change, and nothing in it can be checked without the log. So the root and the leaf
    hash are recomputed from ``log.bin`` in one pass (O(n) hashing), the audit path is
    read from the store (as :func:`prove_inclusion` reads it) and verified against them
    (RFC 9162 §2.1.3.2). A store that fails or gives a path that does not verify is
    rebuilt from the log and the proof made again; ``notice`` is told in one line. The
    proof returned always verifies against the root of the log as it is.

    Args:
        ledger: the ledger or its directory.
        index: the entry's seq; requires ``0 <= index < tree_size``.
        tree_size: defaults to the number of entries in the log.
        notice: called with one line when the store had to be rebuilt.

    Raises:
        UsageError: if there is no ledger or an argument is out of range.
        EvidenceError: if the log is damaged (or not a regular file), or a proof from the
            rebuilt store still does not verify (the log changed meanwhile).
        StorageError: if the store cannot be rebuilt.
    """
    book = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
    book.require_exists()
    head = _log_head(book, () if tree_size is None else (tree_size,), index)
    size = head.size if tree_size is None else tree_size
    if not 0 <= index < size:
        raise UsageError(f"want 0 <= seq < tree size, got seq {index}, tree size {size}")
    if size > head.size:
        raise UsageError(f"tree size {size} is larger than the ledger ({head.size} entries)")
    leaf, root = head.leaf, head.roots[size]
    assert leaf is not None

    def make(tree: TiledTree) -> InclusionProof:
        path = Prover(tree).inclusion(index, size)
        verify_inclusion(index, size, leaf, path, root)
        return InclusionProof(index, size, leaf, root, tuple(path))

    return _from_store(book, make, notice)


def prove_consistency_checked(
    ledger: Ledger | str | os.PathLike[str] | None,
    size1: int,
    size2: int | None = None,
    notice: Callable[[str], None] | None = None,
) -> ConsistencyProof:
    """Consistency proof between the trees of ``size1`` and ``size2`` leaves, checked
    against the log itself, as :func:`prove_inclusion_checked` checks an inclusion proof:
    both roots are recomputed from ``log.bin`` and the proof verified against them
    (RFC 9162 §2.1.4.2), rebuilding the store once if it does not.

    Raises:
        UsageError: if there is no ledger or a size is out of range.
        EvidenceError: if the log is damaged (or not a regular file), or a proof from the
            rebuilt store still does not verify.
        StorageError: if the store cannot be rebuilt.
    """
    book = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
    book.require_exists()
    head = _log_head(book, {size1} if size2 is None else {size1, size2})
    size2 = head.size if size2 is None else size2
    if not 0 < size1 <= size2:
        raise UsageError(f"want 0 < from <= to, got from {size1}, to {size2}")
    if size2 > head.size:
        raise UsageError(f"size {size2} is larger than the ledger ({head.size} entries)")
    root1, root2 = head.roots[size1], head.roots[size2]

    def make(tree: TiledTree) -> ConsistencyProof:
        proof = Prover(tree).consistency(size1, size2)
        verify_consistency(size1, size2, proof, root1, root2)
        return ConsistencyProof(size1, size2, root1, root2, tuple(proof))

    return _from_store(book, make, notice)
