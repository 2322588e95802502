"""Proofs from the tree cache in O(log n), each checked against roots the cache cannot forge.

The ``tree/`` cache (:mod:`evidence_ledger.storage.tree_store`) is derived data that
anyone who can write the ledger directory can change. A proof read from it is handed
out only after it verifies (RFC 9162 §2.1.3.2, §2.1.4.2) against:

- the root of ``log.bin`` recorded in ``tree/root.json``
  (:mod:`evidence_ledger.storage.root_record`): computed from the log alone, once, then
  extended by the entries appended since (O(new entries)) and recorded again;
- the latest stored checkpoint's root, tied to it by a consistency proof, its signature
  verified when verifier keys are given (a key held elsewhere is the one thing a writer
  of the ledger directory cannot forge);
- and with the leaf hash recomputed from the entry's bytes in ``log.bin`` (one frame,
  found through ``offsets.bin``; the entry must decode and name that seq).

A cache that fails (unreadable, or a proof that does not verify) is rebuilt from the log
once, with one notice; if the proof still does not verify, the log no longer gives a root
it gave before (or that a checkpoint signed), and nothing is proven (EvidenceError, exit 1,
saying which). Each proof names what it was checked against (``checked_against``).

:class:`CheckedProofs` keeps what it loaded (the tree, the roots, the open files) for as
many proofs as wanted: a proof costs one ``stat`` of ``log.bin`` (to see whether it
grew), one frame read, O(log n) node reads and the hashes of one verification, fewer as
the nodes earlier proofs authenticated are remembered
(:class:`~evidence_ledger.tlog.verified_nodes.VerifiedNodes`). A proof already checked is
handed out again while ``log.bin`` is unchanged (an inclusion proof only if the entry's
bytes, read again, still hash to its leaf): it rests on the same trusted roots.
"""

from __future__ import annotations

import base64
import datetime
import os
from collections.abc import Callable, Sequence
from typing import TypeVar

from evidence_ledger.format.entries import decode_entry
from evidence_ledger.format.errors import EncodingError, EvidenceError, UsageError
from evidence_ledger.format.framing import read_frame
from evidence_ledger.storage.checkpoint_store import CheckpointStore, StoredCheckpoint
from evidence_ledger.storage.fsutil import close_fd, open_regular
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.root_record import (
    ROOT_NAME,
    RecordedRoot,
    RecordedRootError,
    extend_root,
    read_recorded_root,
    record_root,
)
from evidence_ledger.storage.tree_store import TREE_DIR, TiledTree, TreeStore, TreeStoreError
from evidence_ledger.tlog.checkpoint import Checkpoint, parse_checkpoint, verify_checkpoint
from evidence_ledger.tlog.merkle import leaf_hash
from evidence_ledger.tlog.note import Verifier, parse_note
from evidence_ledger.tlog.proof_verify import ProofError, verify_consistency
from evidence_ledger.tlog.proofs import ConsistencyProof, InclusionProof, Prover
from evidence_ledger.tlog.verified_nodes import VerifiedNodes

__all__ = ["CheckedProofs", "prove_consistency_checked"]

_T = TypeVar("_T")
_U64 = 8
_MEMO = 1 << 14  # checked proofs remembered (by seq and tree size, or by both sizes)
_WHERE = f"{TREE_DIR}/{ROOT_NAME}"
Notice = Callable[[str], None]


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _when(ns: int) -> str:
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Unchecked(Exception):
    """The cache gave something that does not check out (a proof that does not verify, a
    file it cannot read): rebuild it and try again."""


class CheckedProofs:
    """Inclusion and consistency proofs of one ledger, checked as the module docstring says.

    Args:
        ledger: the ledger or its directory.
        verifier_keys: C2SP verifier keys; when given, the latest stored checkpoint must
            carry a valid signature by one of them.
        notice: called with one line when the cache is rebuilt or ``tree/root.json``
            cannot be used.

    Raises:
        KeyFormatError: (a UsageError) for a malformed verifier key.
    """

    def __init__(self, ledger: Ledger | str | os.PathLike[str] | None,
                 verifier_keys: Sequence[str] = (), notice: Notice | None = None) -> None:
        self._fds: tuple[int, int] | None = None  # log.bin, offsets.bin (first: __del__)
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self.store = TreeStore(self.ledger)
        self.verifiers = [Verifier.from_vkey(k) for k in verifier_keys]
        self.notice = notice
        self._log_path = str(self.ledger.store.path)
        self._stamp: tuple[int, int] | None = None  # (inode, bytes) of log.bin when loaded
        self._size = 0  # entries covered by the trusted root
        self._roots: dict[int, bytes] = {}  # tree size -> root checked against the anchors
        self._checked: tuple[str, ...] = ()
        self._checkpoint: Checkpoint | None = None
        self._prover: Prover | None = None
        self._verified: dict[int, VerifiedNodes] = {}  # by tree size, against _roots
        self._proven: dict[tuple[int, int], InclusionProof] = {}  # (seq, size) -> checked
        self._consistent: dict[tuple[int, int], ConsistencyProof] = {}  # (size1, size2)

    # -- the proofs ------------------------------------------------------------------

    def inclusion(self, index: int, tree_size: int | None = None) -> InclusionProof:
        """Inclusion proof (RFC 9162 §2.1.3) of entry ``index`` in the tree of ``tree_size``
        entries (default: every complete entry of the log), checked (module docstring).

        Raises:
            UsageError: if there is no ledger, or unless ``0 <= index < tree_size <= size``.
            EvidenceError: if the log is damaged, the entry does not decode or names another
                seq, or the log contradicts a recorded root or the latest checkpoint.
            StorageError: if the cache must be rebuilt and cannot be written.
        """
        size = self._sized(tree_size, "tree size")
        if not 0 <= index < size:
            raise UsageError(f"want 0 <= seq < tree size, got seq {index}, tree size {size}")
        key = (index, size)

        def make(prover: Prover) -> InclusionProof:
            data = self._frame(index)
            if data is None:
                raise _Unchecked(f"{self.store.offsets_path} points at no readable entry "
                                 f"{index}")
            leaf = leaf_hash(data)
            done = self._proven.get(key)
            if done is not None and done.leaf_hash == leaf:  # these very bytes, proven
                return done
            root = self._root(prover, size)
            path = prover.inclusion(index, size)
            try:
                self._verifier(size, root).check_inclusion(index, leaf, path)
            except ProofError as exc:
                raise _Unchecked(f"entry {index}'s path does not verify ({exc})") from exc
            _check_entry(index, data)
            if len(self._proven) >= _MEMO:
                self._proven.clear()
            done = self._proven[key] = InclusionProof(index, size, leaf, root, tuple(path),
                                                      self._checked)
            return done

        return self._repairing(make, f"entry {index} of log.bin")

    def consistency(self, size1: int, size2: int | None = None) -> ConsistencyProof:
        """Consistency proof (RFC 9162 §2.1.4) from tree size ``size1`` to ``size2``
        (default: every complete entry), checked (module docstring).

        Raises:
            UsageError: if there is no ledger, or unless ``0 < size1 <= size2 <= size``.
            EvidenceError: if the log is damaged or contradicts a recorded root or the
                latest checkpoint.
            StorageError: if the cache must be rebuilt and cannot be written.
        """
        size2 = self._sized(size2, "size")
        if not 0 < size1 <= size2:
            raise UsageError(f"want 0 < from <= to, got from {size1}, to {size2}")

        done = self._consistent.get((size1, size2))
        if done is not None:  # checked against these trusted roots, which are unchanged
            return done

        def make(prover: Prover) -> ConsistencyProof:
            root1, root2 = self._root(prover, size1), self._root(prover, size2)
            proof = prover.consistency(size1, size2)
            try:
                verify_consistency(size1, size2, proof, root1, root2)
            except ProofError as exc:
                raise _Unchecked(f"the proof from {size1} to {size2} does not verify "
                                 f"({exc})") from exc
            return ConsistencyProof(size1, size2, root1, root2, tuple(proof), self._checked)

        done = self._repairing(make, f"the tree of {size2} entries")
        if len(self._consistent) >= _MEMO:
            self._consistent.clear()
        self._consistent[(size1, size2)] = done
        return done

    def close(self) -> None:
        """Close the files kept open (the next proof opens them again)."""
        fds, self._fds, self._prover, self._stamp = self._fds, None, None, None
        for fd in fds or ():
            if fd >= 0:
                close_fd(fd)

    def __del__(self) -> None:
        self.close()

    # -- loading and checking --------------------------------------------------------

    def _sized(self, size: int | None, what: str) -> int:
        """``size``, or the number of entries when None, after :meth:`_refresh`.

        Raises:
            UsageError: if ``size`` is larger than the ledger.
        """
        top = self._refresh()
        if size is not None and size > top:
            raise UsageError(f"{what} {size} is larger than the ledger ({top} entries)")
        return top if size is None else size

    def _refresh(self) -> int:
        """Entries covered by the trusted root, loading again when ``log.bin`` changed
        (one ``stat`` when it did not)."""
        try:
            st = os.stat(self._log_path)
        except OSError:
            st = None
        if st is None or (st.st_ino, st.st_size) != self._stamp or self._prover is None:
            self._load()
        return self._size

    def _load(self) -> None:
        """Extend (or compute) the recorded root to the end of the log, find the latest
        checkpoint, bring the cache up to date, tie the checkpoint to the root, and record
        the root when it grew."""
        self.close()
        self.ledger.require_exists()
        st = os.stat(self._log_path)
        try:
            base = read_recorded_root(self.ledger)
        except RecordedRootError as exc:
            self._tell(f"{_WHERE} {exc}; recomputing the root from log.bin")
            base = None
        anchor = extend_root(self.ledger, base)
        self._size, self._roots = anchor.size, {anchor.size: anchor.root}
        self._verified.clear()
        self._proven.clear()
        self._consistent.clear()
        self._checkpoint = None
        stored = self._latest_checkpoint()
        named: tuple[str, ...] = ()
        if stored is not None:
            self._checkpoint, said = stored
            named = (said,)
            if self._checkpoint.size > anchor.size:
                raise EvidenceError(
                    f"the log holds {anchor.size} entries but {said.split(' (')[0]} covers "
                    f"{self._checkpoint.size}: it was cut back (run verify)")
        self._checked = (*named, _anchor_phrase(base, anchor, None))
        self._stamp = (st.st_ino, st.st_size)
        self._repairing(self._tie_checkpoint, "the log")
        if anchor is not base:  # checked against the checkpoint: record it
            why = record_root(self.ledger, anchor)
            self._checked = (*named, _anchor_phrase(base, anchor, why or ""))

    def _latest_checkpoint(self) -> tuple[Checkpoint, str] | None:
        """The latest stored checkpoint that parses (with verifier keys: the latest one,
        whose signature must verify) and a phrase naming it."""
        store = CheckpointStore(self.ledger)
        numbered = store.files()[0]
        if not numbered and self.verifiers:
            raise EvidenceError("no stored checkpoint to check against the --verifier-key")
        for number, path in reversed(numbered):
            name = f"checkpoint {number:08d}"
            if not self.verifiers:
                try:
                    checkpoint = _parse(store.read(number, path))
                except EvidenceError:
                    continue  # unreadable or malformed: verify's to say
                return checkpoint, (f"{name} (tree size {checkpoint.size}; signature not "
                                    "checked: no --verifier-key)")
            try:
                verified = verify_checkpoint(store.read(number, path).data, self.verifiers)
            except EvidenceError as exc:
                raise EvidenceError(f"{name} does not verify: {exc}; nothing is proven from "
                                    "this ledger (run verify)") from exc
            signers = ", ".join(f"{s.name}+{s.key_id:08x}" for s in verified.note.verified)
            size = verified.checkpoint.size
            return verified.checkpoint, f"{name} (tree size {size}; signature verified: {signers})"
        return None

    def _verifier(self, size: int, root: bytes) -> VerifiedNodes:
        """The :class:`VerifiedNodes` of the tree of ``size`` entries (root checked)."""
        found = self._verified.get(size)
        if found is None:
            if len(self._verified) >= 8:
                self._verified.clear()
            found = self._verified[size] = VerifiedNodes(size, root)
        return found

    def _tie_checkpoint(self, prover: Prover) -> None:
        """Check the latest checkpoint's root against the recorded root through the cache
        (a consistency proof between their sizes); remember it as checked."""
        checkpoint = self._checkpoint
        if checkpoint is None:
            return
        if checkpoint.size == self._size and checkpoint.root != self._roots[self._size]:
            raise EvidenceError(
                f"the log contradicts {self._checked[0]}: its {self._checked[1]} has root "
                f"{_b64(self._roots[self._size])}, the checkpoint {_b64(checkpoint.root)}; "
                "nothing is proven (run verify)")
        self._roots[checkpoint.size] = self._root(prover, checkpoint.size)

    def _root(self, prover: Prover, size: int) -> bytes:
        """The root at ``size``, checked against the trusted root at :attr:`_size` by a
        consistency proof from the cache (and for the checkpoint's size, equal to it)."""
        known = self._roots.get(size)
        if known is not None:
            return known
        top, checkpoint = self._size, self._checkpoint
        if checkpoint is not None and size == checkpoint.size:
            root = checkpoint.root
        elif size == 0:
            return prover.root(0)
        else:
            root = prover.root(size)
        try:
            verify_consistency(size, top, prover.consistency(size, top), root, self._roots[top])
        except ProofError as exc:
            raise _Unchecked(f"the tree of {size} entries does not extend to the root at "
                             f"{top} ({exc})") from exc
        self._roots[size] = root
        return root

    # -- the cache, and repairing it ------------------------------------------------

    def _open_cache(self, tree: TiledTree) -> Prover:
        self.close_files()
        log = self.ledger.store.open_fd()
        try:
            offsets = open_regular(self.store.offsets_path)
        except OSError:
            offsets = -1
        self._fds = (log, offsets)
        self._prover = Prover(tree)
        return self._prover

    def close_files(self) -> None:
        """Close ``log.bin`` and ``offsets.bin`` if open."""
        fds, self._fds = self._fds, None
        for fd in fds or ():
            if fd >= 0:
                close_fd(fd)

    def _repairing(self, make: Callable[[Prover], _T], what: str) -> _T:
        """``make(prover)`` on the cache; when the cache fails, rebuild it from the log and
        try once more; when that fails too, the log contradicts a trusted root."""
        if self._prover is None:
            try:
                tree = self.store.update()
                if tree.size < self._size:
                    raise TreeStoreError(f"it covers {tree.size} entries, the log "
                                         f"{self._size}")
                prover = self._open_cache(tree)
                return make(prover)
            except (TreeStoreError, _Unchecked, UsageError, OSError) as exc:
                reason = exc.problem if isinstance(exc, TreeStoreError) else str(exc)
        else:
            try:
                return make(self._prover)
            except (TreeStoreError, _Unchecked, OSError) as exc:
                reason = exc.problem if isinstance(exc, TreeStoreError) else str(exc)
        prover = self._open_cache(self.store.rebuild())
        self._tell(f"the tree store {self.store.directory} did not match log.bin ({reason}); "
                   "rebuilt it from the log (run verify if the log should not have changed)")
        try:
            return make(prover)
        except _Unchecked as exc:
            raise EvidenceError(
                f"{what} contradicts {' and '.join(self._checked)}: log.bin was changed "
                f"after ({exc}); nothing is proven (run verify)") from None

    def _tell(self, line: str) -> None:
        if self.notice is not None:
            self.notice(line)

    # -- entries ---------------------------------------------------------------------

    def _frame(self, index: int) -> bytes | None:
        """Entry ``index``'s bytes, through ``offsets.bin``: None when they cannot be read
        there."""
        assert self._fds is not None
        log, offsets = self._fds
        if offsets < 0:
            return None
        raw = os.pread(offsets, _U64, index * _U64)
        if len(raw) != _U64:
            return None
        found = read_frame(log, int.from_bytes(raw, "big"))
        return None if found is None else found.data


def _check_entry(index: int, data: bytes) -> None:
    """Refuse a proof of ``data`` (entry ``index``'s bytes) unless it is a canonical entry
    naming seq ``index``: a proof of bytes that are not evidence proves nothing anyone
    asked.

    Raises:
        EvidenceError: if the entry does not decode, or names another seq.
    """
    try:
        entry = decode_entry(data)
    except EncodingError as exc:
        raise EvidenceError(f"entry {index} does not decode ({exc}): no proof is made of "
                            "it (run verify)") from None
    if entry.seq != index:
        raise EvidenceError(f"the entry at seq {index} says seq {entry.seq}: no proof is "
                            "made of it (run verify)")


def _anchor_phrase(base: RecordedRoot | None, anchor: RecordedRoot, why: str | None) -> str:
    """What the root ``anchor`` (``base`` extended) is, in a phrase; ``why`` is why it was
    not recorded ("" when it was, None when that was not tried)."""
    if base is None:
        said = f"root recomputed from log.bin (tree size {anchor.size})"
    else:
        said = f"root recorded in {_WHERE} (tree size {base.size}, {_when(base.recorded_ns)})"
        if anchor.size != base.size:
            added = anchor.size - base.size
            said += f" and {added} {'entry' if added == 1 else 'entries'} read from log.bin since"
    if why is None or anchor is base:
        return said
    if why:
        return said + f"; not recorded ({why})"
    return said + (f"; recorded in {_WHERE}" if base is None else "; the new root recorded")


def _parse(stored: StoredCheckpoint) -> Checkpoint:
    return parse_checkpoint(parse_note(stored.data).text)


def prove_consistency_checked(
    ledger: Ledger | str | os.PathLike[str] | None,
    size1: int,
    size2: int | None = None,
    notice: Notice | None = None,
) -> ConsistencyProof:
    """One checked consistency proof: ``CheckedProofs(ledger, notice=notice).consistency(
    size1, size2)`` (see :meth:`CheckedProofs.consistency`, which says what it raises)."""
    return CheckedProofs(ledger, notice=notice).consistency(size1, size2)
