"""Proofs of a ledger's entries: from its tree store, and checked against its log.

The I/O around the pure prover (:mod:`evidence_ledger.tlog.proofs`): this module opens
the ledger, brings its tree store (:mod:`evidence_ledger.storage.tree_store`) up to date,
reads leaf hashes back from ``log.bin``, and recomputes roots from the log itself.

- :func:`prove_inclusions`, :func:`prove_inclusion`, :func:`prove_consistency`: proofs
  from the stored nodes, O(log n) reads each, trusting the store as it is.
- :func:`log_root`, :func:`checked_log_root`, :class:`LogLeaves`: one pass over the log,
  never the cache (what a checkpoint is signed over).

The proof commands use :mod:`evidence_ledger.storage.checked_proofs`, which checks every
proof from the store against roots the store cannot forge.

Every hash is 32 bytes (RFC 9162 §2.1.1); indices and sizes are 0-based entries.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.format.framing import (
    FRAME_OVERHEAD,
    HEADER_SIZE,
    Damage,
    TornTail,
    scan_stream,
    split_frames,
)
from evidence_ledger.storage.checkpoint_store import CheckpointStore
from evidence_ledger.storage.fsutil import close_fd, reading
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.tree_store import TreeStore, TreeStoreError
from evidence_ledger.tlog.merkle import EMPTY_ROOT, LEAF_PREFIX, CompactRange, leaf_hash
from evidence_ledger.tlog.proofs import ConsistencyProof, InclusionProof, Prover

__all__ = [
    "LogLeaves",
    "checked_log_root",
    "log_leaf_hashes",
    "log_root",
    "prove_consistency",
    "prove_inclusion",
    "prove_inclusions",
]


def prove_inclusions(
    ledger: Ledger | str | os.PathLike[str] | None,
    indices: Iterable[int],
    tree_size: int | None = None,
) -> list[InclusionProof]:
    """Inclusion proofs (RFC 9162 §2.1.3.1) of entries ``indices`` in the ledger's tree of
    ``tree_size`` leaves.

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
    """Consistency proof (RFC 9162 §2.1.4.1) between the ledger's trees of ``size1`` and
    ``size2`` leaves.

    As :func:`prove_inclusions`: brings the hash store up to date first, then reads
    O(log n) stored hashes from one :class:`Prover`, trusting the store as it is.

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



@dataclass(frozen=True)
class _LogHead:
    """What one pass over ``log.bin`` recomputed: the number of complete entries, the
    roots at the sizes asked for (and at ``size``), and one leaf hash if asked for."""

    size: int
    roots: dict[int, bytes]
    leaf: bytes | None


_READ = 1 << 22  # bytes per read of the log


def _damaged(index: int, reason: str) -> EvidenceError:
    return EvidenceError(
        f"the log is damaged at seq {index} ({reason}); run verify"
    )


class LogLeaves:
    """Leaf hashes SHA-256(0x00 || entry bytes) (RFC 9162 §2.1.1), 32 bytes each, of every
    entry in complete groups of the log open at ``fd`` (its first ``size`` bytes) from the
    frame at byte ``start`` (entry ``index``; a group boundary) on, in order: what
    :func:`evidence_ledger.format.framing.scan_stream` reads, without building a record per
    entry. Iterate once; afterwards :attr:`end` is the byte offset just past the last
    complete group read, :attr:`last_offset` the offset of its last frame,
    :attr:`last_leaf` that entry's leaf hash and :attr:`count` the number of leaves
    yielded (unchanged from the start when there were none).

    Frames are parsed by :func:`~evidence_ledger.format.framing.split_frames` from large
    positioned reads (4 MiB, more for a larger frame) while every one checks out; at the
    first that does not (a CRC or length that fails, or the end of the file inside a
    group), the rest is read by :func:`~evidence_ledger.format.framing.scan_stream` from
    the start of that group, so torn tails and damage are told apart exactly as every
    reader does.

    Raises (while iterating):
        EvidenceError: at the first damaged frame or record (after the entries before
            it); a torn tail ends the log quietly.
        OSError: if a read fails.
    """

    def __init__(self, fd: int, size: int, start: int = 0, index: int = 0) -> None:
        self.fd, self.size, self.start, self.index = fd, size, start, index
        self.end = start
        self.last_offset = 0
        self.last_leaf = b""
        self.count = 0

    def __iter__(self) -> Iterator[bytes]:
        fd, size = self.fd, self.size
        pending: list[bytes] = []  # leaves of the group being read
        index = self.index  # entries in complete groups so far
        group = self.start  # file offset of the group being read
        pos = self.start  # file offset of the next frame
        need = HEADER_SIZE  # bytes the next frame takes, as far as is known
        sha256, prefix = hashlib.sha256, LEAF_PREFIX
        while pos < size:
            if pos + need > size:
                break  # the log ends inside a frame
            buf = os.pread(fd, min(max(_READ, need), size - pos), pos)
            if len(buf) < need:
                break  # the file was cut short meanwhile
            run = split_frames(buf)
            if run.problem or run.bad_records:
                break
            hashes = [sha256(prefix + data).digest() for data in run.records]
            if run.groups:
                yield from pending
                yield from hashes[: run.groups]
                index += len(pending) + run.groups
                pending = hashes[run.groups :]
                group = pos + run.group_end
                self.end, self.count = group, index - self.index
                self.last_offset = group - FRAME_OVERHEAD - len(run.records[run.groups - 1])
                self.last_leaf = hashes[run.groups - 1]
            else:
                pending += hashes
            pos += run.end
            need = run.need
        else:
            if not pending:
                return  # read to the end of the log
        # Something did not check out, or the log ends inside a group: read on from the
        # start of that group as every reader does.
        with reading(os.dup(fd), buffering=1 << 20) as fh:
            for item in scan_stream(fh, size, group, index):
                if isinstance(item, TornTail):
                    return
                if isinstance(item, Damage):
                    raise _damaged(item.index, item.reason)
                if not item.crc_ok:
                    raise _damaged(item.index, "record fails its CRC-32")
                leaf = leaf_hash(item.data)
                yield leaf
                self.end, self.count = item.end, item.index + 1 - self.index
                self.last_offset, self.last_leaf = item.offset, leaf


def log_leaf_hashes(fd: int, size: int) -> Iterator[bytes]:
    """The leaf hashes of every entry in complete groups of the log open at ``fd`` (its
    first ``size`` bytes): ``iter(LogLeaves(fd, size))`` (see :class:`LogLeaves`)."""
    return iter(LogLeaves(fd, size))


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
        close_fd(fd)
    roots[tree.size] = tree.root()
    return _LogHead(tree.size, roots, leaf)


def _checked_head(ledger: Ledger, sizes: Iterable[int], leaf_index: int | None = None,
                  ) -> _LogHead:
    """:func:`_log_head`, the roots at the sizes of the ledger's stored checkpoints taken in
    the same pass and compared with what each checkpoint says (its signature is
    ``verify``'s to check): a proof is never made from a log that contradicts its own
    signed tree heads.

    Raises:
        EvidenceError: as :func:`_log_head`, or when the log is shorter than a stored
            checkpoint or has another root at its size.
    """
    stored = []
    for number, path in CheckpointStore(ledger).files()[0]:
        with contextlib.suppress(EvidenceError):  # unreadable or malformed: verify's to say
            stored.append((number, CheckpointStore(ledger).read(number, path).checkpoint))
    head = _log_head(ledger, (*sizes, *(c.size for _, c in stored)), leaf_index)
    for number, checkpoint in stored:
        if checkpoint.size > head.size or head.roots[checkpoint.size] != checkpoint.root:
            found = (f"the log holds only {head.size} entries" if checkpoint.size > head.size
                     else "the log gives another root there")
            raise EvidenceError(
                f"the log contradicts its stored checkpoint {number} (tree size "
                f"{checkpoint.size}): {found}; nothing is proven or signed from it (run "
                "verify)")
    return head


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


def checked_log_root(ledger: Ledger, size: int) -> bytes:
    """:func:`log_root`, from a log that agrees with every stored checkpoint (their roots
    taken in the same pass): what a new signature over the head at ``size`` may rest on.

    Raises:
        UsageError: if the log holds fewer than ``size`` entries.
        EvidenceError: as :func:`log_root`, or when the log is shorter than a stored
            checkpoint or has another root at its size.
    """
    head = _checked_head(ledger, (size,))
    if size > head.size:
        raise UsageError(f"tree size {size} is larger than the ledger ({head.size} entries)")
    return head.roots[size]
