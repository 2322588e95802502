"""``evidence-ledger migrate --to 2``: rewrite a format-1 ledger's payload files into payload
segments (FORMAT.md), leaving ``log.bin``, every checkpoint and so every proof byte for byte
as they were.

Under the writer lock, in three steps, each safe to cut short anywhere (kill -9, power
loss) and finished by running it again:

1. *copy*: every payload file is read, checked against its name (SHA-256) and appended to
   the segments (synced every 16 files or 8 MiB); payloads already there (from a run cut
   short) are not copied again. The ledger is still version 1: readers use the files.
   Then every payload in the segments without a file that a ``redaction`` entry of
   ``log.bin`` names (redacted since a run cut short) is erased there too: a redacted
   payload is never brought back. One with neither a file nor a redaction entry is kept
   (a version-2 writer stored it: a ``format`` file edited or lost); nothing is ever erased
   without a redaction entry.
2. *commit*: the ``format`` file says 2 (written atomically, synced): from now on readers
   use the segments.
3. *clean up*: the payload files are removed (a version-2 ledger reads none; a redaction
   erases any left behind as well).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from evidence_ledger.format.digests import PayloadStatus
from evidence_ledger.format.errors import EvidenceError, StorageError, UsageError
from evidence_ledger.storage.fsutil import NotRegularFileError, fsync_path, open_regular, problem
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.ledger_format import CURRENT, read_format, write_format
from evidence_ledger.storage.payload_view import PayloadView
from evidence_ledger.storage.payloads import PayloadStore
from evidence_ledger.storage.segment_store import SegmentStore

__all__ = ["Migration", "migrate"]

_SYNC_FILES = 16  # payload files copied between two syncs of the segments
_SYNC_BYTES = 8 << 20  # or bytes

Progress = Callable[[str, int, int], None]
"""``progress(step, done, total)``: ``step`` is ``copy``, ``check``, ``commit`` or
``clean``; called after each unit of work (a payload file copied or removed ...)."""


@dataclass(frozen=True)
class Migration:
    """What :func:`migrate` did.

    Attributes:
        directory: the ledger directory.
        from_version: its format version before (2 when it already was).
        to_version: its format version now.
        copied: payload files copied into segments now.
        reused: payload files found in the segments already (a run cut short copied them).
        erased: payloads erased from the segments because their file was gone and a
            ``redaction`` entry names them (redacted since a run cut short).
        kept: payloads in the segments with neither a file nor a ``redaction`` entry, kept
            (a version-2 writer stored them).
        removed: payload files removed.
    """

    directory: Path
    from_version: int
    to_version: int
    copied: int
    reused: int
    erased: int
    kept: int
    removed: int

    @property
    def changed(self) -> bool:
        """False when there was nothing to do (a version-2 ledger with no payload file)."""
        return self.from_version != self.to_version or self.removed > 0


def _payload_files(store: PayloadStore) -> Iterator[tuple[bytes, str]]:
    """``(digest, path)`` of each payload file of format 1, shard by shard (memory: one
    shard's listing); temporary files and erasure markers are not payloads."""
    for shard in _shards(store):
        folder = store.root / shard
        for name in sorted(os.listdir(folder)):
            if len(name) == 64 and name.startswith(shard):
                try:
                    yield bytes.fromhex(name), str(folder / name)
                except ValueError:
                    continue


def _shards(store: PayloadStore) -> list[str]:
    """The shard folders of format 1 (two hex digits; never through a symbolic link)."""
    root = store.root
    if os.path.islink(root) or not os.path.isdir(root):
        return []
    return [shard for shard in sorted(os.listdir(root))
            if len(shard) == 2 and all(c in "0123456789abcdef" for c in shard)
            and not os.path.islink(root / shard) and os.path.isdir(root / shard)]


def _count(store: PayloadStore) -> int:
    return sum(1 for _ in _payload_files(store))


def _copy_one(target: SegmentStore, legacy: PayloadStore, digest: bytes, path: str) -> int:
    """Hold the file's bytes in ``target`` (checked against ``digest``); their length.

    Raises:
        UsageError: if a redaction of it was cut short (finish it first).
        EvidenceError: if it is not a regular file or does not hash to its name.
    """
    status = legacy.check(digest)
    if status is PayloadStatus.ERASING:
        raise UsageError(f"payload sha256:{digest.hex()} is being erased by a redaction cut "
                         "short: run `evidence-ledger redact` on it again, then migrate")
    if status is not PayloadStatus.OK:
        why = legacy.problem(digest) or "does not hash to its name"
        raise EvidenceError(f"payload file {path} {why}: not migrated (run verify)")
    try:
        fd = open_regular(path)
    except (NotRegularFileError, OSError) as exc:
        raise EvidenceError(f"payload file {path} {problem(exc)}: not migrated") from exc
    with PayloadView(fd, 0, os.fstat(fd).st_size) as view:
        size = view.size

        def fill(write: Callable[[bytes], object]) -> None:
            while chunk := view.read(1 << 20):
                write(chunk)

        if target.put_stream(fill) != digest:
            raise EvidenceError(f"payload file {path} changed while it was copied: not "
                                "migrated (run verify)")
    return size


def _copy(target: SegmentStore, legacy: PayloadStore, total: int,
          progress: Progress) -> tuple[int, int]:
    copied = reused = held = since = 0
    for done, (digest, path) in enumerate(_payload_files(legacy), 1):
        if target.check(digest) is PayloadStatus.OK:
            reused += 1
        else:
            held += _copy_one(target, legacy, digest, path)
            copied += 1
            since += 1
            if since >= _SYNC_FILES or held >= _SYNC_BYTES:
                target.flush()
                held = since = 0
        progress("copy", done, total)
    target.flush()
    return copied, reused


def _redacted(ledger: Ledger) -> set[bytes]:
    """Digests the ``redaction`` entries of ``log.bin`` name, read up to its first damaged
    record or torn tail (memory: one digest per redaction entry; fewer found erases less)."""
    found: set[bytes] = set()
    try:
        for entry, _ in ledger.entries():
            if entry.kind == "redaction":
                found.add(entry.body["digest"])
    except EvidenceError:
        pass  # damage: only the redactions before it count
    return found


def _erase_orphans(target: SegmentStore, legacy: PayloadStore, redacted: set[bytes],
                   total: int, progress: Progress) -> tuple[int, int]:
    """Erase every payload in the segments that has no file and that a ``redaction`` entry
    names (redacted after a run cut short copied it); keep one that no redaction names.
    Returns ``(erased, kept)``."""
    erased = kept = 0
    orphans = []
    for seen, digest in enumerate(target.stored(), 1):
        if not os.path.lexists(legacy.describe(digest)):
            if digest in redacted:
                orphans.append(digest)  # erased below: not while the map is paged through
            else:
                kept += 1
        progress("check", seen, total)
    for digest in orphans:
        target.scrub(digest)
        target.remove(digest)
        erased += 1
    return erased, kept


def _clean(legacy: PayloadStore, total: int, progress: Progress) -> int:
    removed = 0
    folders: set[str] = set()
    for _digest, path in _payload_files(legacy):
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StorageError(f"cannot remove {path}: {problem(exc)}") from exc
        folders.add(os.path.dirname(path))
        removed += 1
        progress("clean", removed, total)
    folders.update(str(legacy.root / shard) for shard in _shards(legacy))  # emptied before
    for folder in sorted(folders):
        for name in os.listdir(folder):  # erasure markers, temporary files: not payloads
            if name.endswith(".erasing") or name.endswith(".tmp"):
                os.unlink(os.path.join(folder, name))
        try:
            os.rmdir(folder)
        except OSError:  # something else is in it: left for verify to name
            fsync_path(folder)
    if folders:
        fsync_path(legacy.root)
    return removed


def migrate(directory: str | os.PathLike[str] | None, to: int = CURRENT, *,
            progress: Progress | None = None, lock_timeout: float = 30.0) -> Migration:
    """Migrate the ledger in ``directory`` to format version ``to`` (2): its payload files
    rewritten into payload segments, with ``log.bin`` and every checkpoint unchanged, under
    the writer lock. Crash-safe at every point: a ledger cut short verifies (as version 1
    before the ``format`` file says 2, as version 2 after), and running it again finishes
    the job. A ledger of version 2 with no payload file left is not changed.

    Args:
        directory: the ledger directory.
        to: the format version wanted (only 2).
        progress: called after each unit of work (see :data:`Progress`).
        lock_timeout: seconds to wait for another writer.

    Returns:
        What it did (:class:`Migration`).

    Raises:
        UsageError: if there is no ledger, ``to`` is not 2, or a redaction of a payload was
            cut short (finish it first).
        EvidenceError: if a payload file is damaged or not a regular file (nothing is
            committed: the ledger stays version 1).
        StorageError: if the segments or the ``format`` file cannot be written.
        LockTimeout: if another writer holds the lock.
    """
    if to != CURRENT:
        raise UsageError(f"a ledger can be migrated to format version {CURRENT} only, not {to}")
    report = progress or (lambda step, done, total: None)
    ledger = Ledger(directory)
    ledger.require_exists()
    with ledger.store.lock(lock_timeout):
        version = read_format(ledger.directory)
        legacy = PayloadStore(ledger.directory)
        total = _count(legacy)
        copied = reused = erased = kept = 0
        if version == 1:
            target = SegmentStore(ledger.directory)
            try:
                copied, reused = _copy(target, legacy, total, report)
                erased, kept = _erase_orphans(target, legacy, _redacted(ledger), total,
                                              report)
            except OSError as exc:
                raise StorageError(f"cannot migrate: {exc}") from exc
            finally:
                target.close()
            write_format(ledger.directory, CURRENT)
            report("commit", 1, 1)
        try:
            removed = _clean(legacy, total, report)
        except OSError as exc:
            raise StorageError(f"cannot remove payload files: {exc}") from exc
    return Migration(ledger.directory, version, CURRENT, copied, reused, erased, kept,
                     removed)

