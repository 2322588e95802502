"""``tree/root.json``: the root of ``log.bin``, recomputed from the log and recorded.

The proof commands check every proof taken from the tree cache (``tree/``, see
:mod:`evidence_ledger.storage.tree_store`) against a root that does not come from that
cache: the latest stored checkpoint's, and this one. It is computed from ``log.bin``
alone, once (one O(n) pass, :func:`recompute_root`), then extended by the entries
appended since (O(new entries), :func:`extend_root`), and recorded so that the next
proof starts from it. What is recorded is the compact range of the tree (one hash per
set bit of its size), so extending it needs neither the cache nor the older entries::

    {"version": 1, "size": n, "end_offset": int, "last_offset": int, "last_leaf": b64,
     "peaks": [b64, ...], "recorded_ns": int}

``end_offset`` is the byte offset in ``log.bin`` just past entry ``n - 1`` (the end of a
complete group), ``last_offset`` where that entry's frame starts and ``last_leaf`` its
leaf hash (checked before the root is extended: a log rewritten or cut back under it is
refused, not read from a byte offset that no longer starts an entry), ``peaks`` the roots
of the perfect subtrees covering ``[0, n)``, largest first (RFC 9162 §2.1.1: folded right
to left they give MTH(D[0:n])), ``recorded_ns`` when it was recorded (Unix ns).

It is written only under the ledger's writer lock (``writer.lock``), taken without
waiting: a reader never holds up a writer, and when a writer holds the lock the root is
used for this proof and simply not recorded. With the lock held no append is half
done, and ``log.bin`` is synced first, so a recorded root never covers bytes a crash
could still take away. It survives a rebuild of the cache (that is its point: a log
changed under a cache that agrees with the old log is then caught). Like everything in
the ledger directory, whoever can write the directory can rewrite it; the proof
commands say which roots a proof was checked against, and only a checkpoint verified
with a key held elsewhere (``--verifier-key``) is beyond the reach of that writer.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json
import os
import stat
import time
from dataclasses import dataclass
from typing import Any

from evidence_ledger.format.errors import EvidenceError, LockTimeout, StorageError
from evidence_ledger.format.framing import read_frame
from evidence_ledger.storage.fsutil import close_fd, read_regular, replace_durably
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.log_proofs import LogLeaves
from evidence_ledger.storage.tree_store import ROOT_NAME, TREE_DIR
from evidence_ledger.tlog.merkle import CompactRange, leaf_hash

__all__ = [
    "ROOT_NAME",
    "RecordedRoot",
    "RecordedRootError",
    "extend_root",
    "read_recorded_root",
    "recompute_root",
    "record_root",
]

VERSION = 1
_MAX_BYTES = 1 << 14  # a document holds at most 64 peaks (~3 KB)


class RecordedRootError(EvidenceError):
    """``tree/root.json`` is not a root document (malformed, or not a regular file)."""


@dataclass(frozen=True)
class RecordedRoot:
    """The tree of the first ``size`` entries of ``log.bin``, as a compact range.

    Attributes:
        size: entries covered.
        end_offset: byte offset in ``log.bin`` just past entry ``size - 1`` (0 when empty).
        last_offset: byte offset of entry ``size - 1``'s frame (0 when empty).
        last_leaf: its leaf hash, 32 bytes (empty when ``size`` is 0).
        peaks: one 32-byte hash per set bit of ``size``, largest subtree first.
        recorded_ns: when it was recorded (Unix ns); 0 when it was not (yet).
        base_size: the size of the recorded root it was extended from (``size`` when it
            was not extended; 0 when recomputed from the whole log). Not stored.
    """

    size: int
    end_offset: int
    last_offset: int
    last_leaf: bytes
    peaks: tuple[bytes, ...]
    recorded_ns: int = 0
    base_size: int = 0

    @property
    def root(self) -> bytes:
        """MTH(D[0:size]) (RFC 9162 §2.1.1), 32 bytes."""
        return CompactRange.from_peaks(self.size, self.peaks).root()

    def to_json(self) -> bytes:
        """The document (module docstring), ASCII with a final newline."""
        doc = {
            "version": VERSION, "size": self.size, "end_offset": self.end_offset,
            "last_offset": self.last_offset,
            "last_leaf": base64.b64encode(self.last_leaf).decode("ascii"),
            "peaks": [base64.b64encode(p).decode("ascii") for p in self.peaks],
            "recorded_ns": self.recorded_ns,
        }
        return json.dumps(doc, indent=1).encode("ascii") + b"\n"

    @classmethod
    def from_json(cls, data: bytes) -> RecordedRoot:
        """Parse :meth:`to_json`'s document.

        Raises:
            RecordedRootError: if it is not one (the message says what is wrong).
        """
        try:
            doc: Any = json.loads(data)
            if doc.get("version") != VERSION:
                raise ValueError(f"version {doc.get('version')!r}, want {VERSION}")
            size, end, last, when = (doc["size"], doc["end_offset"], doc["last_offset"],
                                     doc["recorded_ns"])
            if not all(type(v) is int and 0 <= v < 2**63 for v in (size, end, last, when)):
                raise ValueError("sizes, offsets and recorded_ns are integers in [0, 2^63)")
            leaf = base64.b64decode(doc["last_leaf"], validate=True)
            if len(leaf) != (32 if size else 0):
                raise ValueError(f"last_leaf is {len(leaf)} bytes")
            peaks = tuple(base64.b64decode(p, validate=True) for p in doc["peaks"])
            CompactRange.from_peaks(size, peaks)  # one 32-byte peak per set bit of size
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error,
                RecursionError) as exc:
            raise RecordedRootError(f"unreadable ({exc or type(exc).__name__})") from exc
        return cls(size, end, last, leaf, peaks, when, size)


def _path(ledger: Ledger) -> str:
    return os.path.join(ledger.directory, TREE_DIR, ROOT_NAME)


def read_recorded_root(ledger: Ledger) -> RecordedRoot | None:
    """The root recorded in ``tree/root.json``, or None when there is none.

    Raises:
        RecordedRootError: if the file is unreadable, not a regular file, or not a root
            document.
    """
    try:
        data = read_regular(_path(ledger), _MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordedRootError(f"cannot read {_path(ledger)} ({exc.strerror or exc})") from exc
    if len(data) > _MAX_BYTES:
        raise RecordedRootError(f"{_path(ledger)} is larger than {_MAX_BYTES} bytes")
    return RecordedRoot.from_json(data)


def extend_root(ledger: Ledger, base: RecordedRoot | None) -> RecordedRoot:
    """``base`` extended by every entry of ``log.bin`` after it (in complete groups), read
    from ``base.end_offset`` on: O(new entries) hashing, O(log n) memory. With no base,
    the whole log is read (:func:`recompute_root`).

    Raises:
        EvidenceError: if the log no longer holds ``base``'s last entry where it was
            (rewritten or cut back under the recorded root), is damaged after it (the
            message names the seq), or cannot be read.
    """
    start = base or RecordedRoot(0, 0, 0, b"", ())
    try:
        fd = ledger.store.open_fd()
    except FileNotFoundError:
        fd = -1
    try:
        length = os.fstat(fd).st_size if fd >= 0 else 0
        if start.size:
            last = read_frame(fd, start.last_offset) if length >= start.end_offset else None
            if (last is None or last.end != start.end_offset
                    or leaf_hash(last.data) != start.last_leaf):
                raise EvidenceError(
                    f"the log contradicts the root recorded in {_path(ledger)} (tree size "
                    f"{start.size}): entry {start.size - 1} is not where it was (the log was "
                    "rewritten or cut back); nothing is proven (run verify)")
        tree = CompactRange.from_peaks(start.size, start.peaks)
        leaves = LogLeaves(fd, length, start.end_offset, start.size)
        append = tree.append
        for leaf in leaves if fd >= 0 else ():
            append(leaf)
    except OSError as exc:
        raise EvidenceError(f"cannot read {ledger.store.path}: {exc.strerror or exc}") from exc
    finally:
        if fd >= 0:
            close_fd(fd)
    if tree.size == start.size:
        return start
    return RecordedRoot(tree.size, leaves.end, leaves.last_offset, leaves.last_leaf,
                        tree.peaks, 0, start.size)


def recompute_root(ledger: Ledger) -> RecordedRoot:
    """The root of every entry in complete groups of ``log.bin``, from the log alone (one
    O(n) pass; never the ``tree/`` cache). Raises as :func:`extend_root`."""
    return extend_root(ledger, None)


def record_root(ledger: Ledger, root: RecordedRoot) -> str | None:
    """Record ``root`` in ``tree/root.json`` under the writer lock, if it can be taken at
    once; returns None when recorded, else why not (one phrase).

    Under the lock, ``log.bin`` is synced and must still be at least ``root.end_offset``
    bytes long; the document is written to a new temporary file, synced, renamed over
    the old one, and the folder synced. Nothing is written through a symlink.
    """
    try:
        with ledger.store.lock(timeout=0):
            fd = ledger.store.open_fd()
            try:
                os.fsync(fd)
                if os.fstat(fd).st_size < root.end_offset:
                    return "log.bin is shorter than the root covers"
            finally:
                close_fd(fd)
            _write(ledger, root)
    except LockTimeout:
        return "a writer holds the ledger's lock"
    except (OSError, EvidenceError) as exc:  # StorageError among them: read-only ledger
        return str(exc)
    return None


def _write(ledger: Ledger, root: RecordedRoot) -> None:
    """Replace ``tree/root.json`` with ``root`` stamped now (lock held).

    Raises:
        StorageError: if ``tree/`` is not a folder (a symlink?) or the file cannot be
            written.
    """
    folder = os.path.join(ledger.directory, TREE_DIR)
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o755)
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise StorageError(f"{folder} is not a folder (a symlink?)")
    path = _path(ledger)
    tmp = f"{path}.{os.getpid()}.tmp"
    stamped = dataclasses.replace(root, recorded_ns=time.time_ns(), base_size=root.size)
    try:
        replace_durably(path, stamped.to_json(), tmp)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc}") from exc
