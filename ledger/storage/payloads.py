"""Content-addressed payload store beside the log.

Arguments, results and session items live here as files named by the SHA-256 of their
bytes (``payloads/<first 2 hex>/<64 hex>``); entries hold only those digests, so a
payload can later be erased (redacted) without changing a single entry hash.

A payload is written to a temporary file and renamed into place. An append writes the
payloads, then the log group, then makes both durable with :meth:`PayloadStore.sync`
(one ``syncfs(2)`` on Linux when they share a file system, else an ``fsync`` of each
file, directory and the log) before it is acknowledged: an acknowledged entry never
points at a lost payload, and a group costs one sync, not one per file. (An entry that
a power loss leaves unacknowledged may survive without its payload: ``verify`` reports
it, as every payload gone without a ``redaction`` entry, as ``payload_missing``.)

Readers open only regular files here, never through a symlink and never blocking (see
:func:`evidence_ledger.storage.fsutil.open_regular`): a FIFO or a link to ``/dev/zero`` in place of
a payload is never read.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import os
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from evidence_ledger.format.digests import PayloadStatus
from evidence_ledger.format.errors import StorageError
from evidence_ledger.storage.fsutil import (
    NotRegularFileError,
    close_fd,
    fsync_path,
    open_regular,
    problem,
    read_regular,
)
from evidence_ledger.storage.payload_view import PayloadView

PAYLOAD_DIR = "payloads"
_ERASING = ".erasing"  # suffix of the marker of a payload being erased
_CHECK_CHUNK = 1 << 20  # bytes per read when re-hashing a payload
_NAME = re.compile(r"[0-9a-f]{64}")



_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_HAS_SYNCFS = hasattr(_libc, "syncfs")


def _syncfs(target: str | int) -> bool:
    """``syncfs(2)`` the file system holding ``target`` (a path or an open descriptor);
    False where the call does not exist.

    Raises:
        OSError: if the call fails.
    """
    if not _HAS_SYNCFS:
        return False
    fd = os.open(target, os.O_RDONLY) if isinstance(target, str) else target
    try:
        if _libc.syncfs(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
    finally:
        if isinstance(target, str):
            close_fd(fd)
    return True


def _same_device(fd: int, path: str) -> bool:
    return os.fstat(fd).st_dev == os.stat(path).st_dev


class PayloadStore:
    """Payload files under ``<ledger>/payloads`` (ledger format version 1).

    Args:
        directory: the ledger directory.
    """

    version = 1
    pending_bytes = 0
    """Bytes held for :meth:`flush` (none: a put writes its file at once)."""

    def __init__(self, directory: Path) -> None:
        self.root = Path(directory) / PAYLOAD_DIR
        self._root = str(self.root)
        self._dirty: set[str] = set()  # files written or reused since the last sync
        self._safe: set[str] = set()  # folders found not to be symlinks (checked once)

    def path_for(self, digest: bytes) -> Path:
        """Path of the payload with this 32-byte SHA-256 digest."""
        return Path(self._path(digest))

    def _path(self, digest: bytes) -> str:
        hexd = digest.hex()
        return f"{self._root}/{hexd[:2]}/{hexd}"

    def _checked(self, digest: bytes) -> str:
        """:meth:`_path`, once ``payloads/`` and the digest's shard folder are known not to
        be symlinks (which would lead reads and writes out of the ledger; each folder is
        checked once per store, when it exists).

        Raises:
            NotRegularFileError: if either is a symlink.
        """
        path = self._path(digest)
        for folder in (self._root, os.path.dirname(path)):
            if folder in self._safe:
                continue
            if os.path.islink(folder):
                raise NotRegularFileError(
                    errno.ELOOP, "is in a folder that is a symbolic link", folder
                )
            if os.path.isdir(folder):
                self._safe.add(folder)
        return path

    def put(self, data: bytes) -> bytes:
        """Store ``data`` (bytes) and return its 32-byte SHA-256 digest.

        Idempotent: an existing payload with that digest is kept.

        Raises:
            StorageError: if the file cannot be written and synced.
        """
        digest = hashlib.sha256(data).digest()
        try:
            target = self._checked(digest)
        except NotRegularFileError as exc:
            raise StorageError(f"cannot store payload {digest.hex()}: {exc}") from exc
        self._dirty.add(target)  # even when it exists: an earlier writer may not have synced it
        if os.path.exists(target):
            return digest
        tmp = f"{target}.{os.getpid()}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        try:
            try:
                fd = os.open(tmp, flags, 0o644)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                fd = os.open(tmp, flags, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                close_fd(fd)
            os.replace(tmp, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            self._dirty.discard(target)
            raise StorageError(f"cannot store payload {digest.hex()}: {exc}") from exc
        return digest

    def put_stream(
        self, fill: Callable[[Callable[[bytes], object]], None], *, in_memory: int = 1 << 20
    ) -> bytes:
        """Store the bytes ``fill`` produces and return their 32-byte SHA-256 digest.

        ``fill(write)`` calls ``write(piece)`` with each piece of the payload (bytes) in
        order. Up to ``in_memory`` bytes are gathered and stored as :meth:`put` does;
        beyond that the pieces are hashed and written to a temporary file in the payload
        folder as they come, and the file is renamed to its content address: a large
        payload is never held whole. Idempotent and made durable as :meth:`put`.

        Raises:
            StorageError: if the file cannot be written (nothing is stored).
            Exception: whatever ``fill`` raises (nothing is stored).
        """
        pieces: list[bytes] = []
        held = 0
        hasher = hashlib.sha256()
        tmp = f"{self._root}/.{os.getpid()}-{threading.get_ident()}.tmp"
        spool: BinaryIO | None = None

        def write(piece: bytes) -> None:
            nonlocal held, spool
            hasher.update(piece)
            if spool is not None:
                spool.write(piece)
                return
            pieces.append(piece)
            held += len(piece)
            if held > in_memory:
                spool = self._spool(tmp)
                spool.writelines(pieces)
                pieces.clear()

        digest: bytes | None = None
        try:
            try:
                fill(write)
            finally:
                if spool is not None:
                    spool.close()
            if spool is None:
                return self.put(b"".join(pieces))
            digest = hasher.digest()
            target = self._checked(digest)
            if os.path.exists(target):
                with contextlib.suppress(OSError):
                    os.remove(tmp)
            else:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.replace(tmp, target)
            self._dirty.add(target)  # even when it exists: an earlier writer may not have synced it
            return digest
        except BaseException as exc:
            if spool is not None:
                with contextlib.suppress(OSError):
                    os.remove(tmp)
            if isinstance(exc, OSError):
                name = digest.hex() if digest else "(streamed)"
                raise StorageError(f"cannot store payload {name}: {exc}") from exc
            raise

    def _spool(self, tmp: str) -> BinaryIO:
        """Open (truncate) the temporary file ``tmp`` in the payload folder for writing;
        a symlink planted there is not followed.

        Raises:
            OSError: if it cannot be created.
        """
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        try:
            fd = os.open(tmp, flags, 0o644)
        except FileNotFoundError:
            os.makedirs(self._root, exist_ok=True)
            fd = os.open(tmp, flags, 0o644)
        return os.fdopen(fd, "wb", buffering=1 << 16)

    def flush(self) -> None:
        """Nothing to do: each put wrote its file (:meth:`sync` makes them durable)."""

    def describe(self, digest: bytes) -> str:
        """Where the payload ``digest`` is stored: its file's path."""
        return self._path(digest)

    def notices(self) -> list[str]:
        """Nothing: a file that is not a regular file is named per payload (:meth:`problem`)."""
        return []

    def with_prefix(self, prefix: str) -> list[bytes]:
        """Digests of the payload files whose names start with ``prefix`` (lowercase hex, at
        least 2 digits; its shard folder listed, never through a symbolic link)."""
        folder = os.path.join(self._root, prefix[:2])
        if os.path.islink(self._root) or os.path.islink(folder):
            return []
        try:
            names = os.listdir(folder)
        except OSError:  # no such shard: no payload starts so
            return []
        return [bytes.fromhex(n) for n in names if _NAME.fullmatch(n) and n.startswith(prefix)]

    def sync(self, log_fd: int | None = None) -> None:
        """Make every payload put (:meth:`put`, :meth:`put_stream`) since the last sync
        durable, and the log too.

        Args:
            log_fd: an open descriptor of the log, just appended to; it is made durable
                in the same step (one ``syncfs(2)`` when the log and the payloads share
                a file system, else ``fsync`` of each payload, directory and the log).

        Raises:
            StorageError: if a sync fails (nothing is then acknowledged).
        """
        try:
            covered = False
            if self._dirty:
                target = log_fd if log_fd is not None else self._root
                if _syncfs(target):
                    covered = log_fd is not None and _same_device(log_fd, self._root)
                    if not covered:
                        _syncfs(self._root)
                else:
                    dirs = {os.path.dirname(p) for p in self._dirty} | {self._root}
                    for path in sorted(self._dirty) + sorted(dirs):
                        fsync_path(path)
                self._dirty.clear()
            if log_fd is not None and not covered:
                os.fsync(log_fd)
        except OSError as exc:
            raise StorageError(f"cannot sync: {exc}") from exc

    def scrub(self, digest: bytes) -> bool:
        """Mark the payload with this 32-byte digest as being erased (an empty
        ``<digest>.erasing`` file beside it, made durable), then overwrite its bytes with
        zeros where they are stored and sync them (``fsync`` of its file), leaving the file
        in place; False if it is absent. While the marker stands, :meth:`check` says
        :attr:`PayloadStatus.ERASING` of a payload that holds nothing but zeros. (What no software
        erase reaches: blocks an SSD remaps, copy-on-write and snapshotting file systems,
        backups and other links to the file.)

        Raises:
            StorageError: if the file exists but cannot be marked, overwritten or synced.
        """
        path = self._path(digest)
        try:
            target = self._checked(digest)
            os.lstat(target)  # absent: FileNotFoundError; unreadable folder: raises
            with contextlib.suppress(FileExistsError):  # a redaction cut short made it
                close_fd(os.open(f"{target}{_ERASING}", os.O_WRONLY | os.O_CREAT | os.O_EXCL
                                 | os.O_NOFOLLOW, 0o644))
            fsync_path(os.path.dirname(target))
            _overwrite(target)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot overwrite payload {path}: {exc}") from exc
        return True

    def remove(self, digest: bytes) -> bool:
        """Remove the file of the payload with this 32-byte digest (after :meth:`scrub`)
        and its marker, durably (``fsync`` of its folder); False if it was absent.

        Raises:
            StorageError: if the file exists but cannot be removed.
        """
        path = self._path(digest)
        try:
            target = self._checked(digest)
            removed = True
            try:
                os.remove(target)
            except FileNotFoundError:
                removed = False
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{target}{_ERASING}")
            fsync_path(os.path.dirname(target))
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot remove payload {path}: {exc}") from exc
        return removed

    def get(self, digest: bytes, limit: int | None = None) -> bytes | None:
        """The payload bytes for ``digest``, or None when absent (never stored or erased).
        ``limit``: read at most ``limit + 1`` bytes (a longer result says the payload is
        larger than ``limit``); None reads it all.

        Only a regular file is read: a symlink, FIFO or device in its place (which could
        block or never end) counts as absent; :meth:`check` reports it.
        """
        try:
            return read_regular(self._checked(digest), limit)
        except (FileNotFoundError, NotADirectoryError, NotRegularFileError):
            return None

    def open(self, digest: bytes) -> PayloadView | None:
        """The stored payload ``digest``, open for reading, or None when absent (as for
        :meth:`get`: only a regular file is opened); the caller closes it.

        Raises:
            OSError: if it exists but cannot be opened.
        """
        try:
            fd = open_regular(self._checked(digest))
        except (FileNotFoundError, NotADirectoryError, NotRegularFileError):
            return None
        return PayloadView(fd, 0, os.fstat(fd).st_size)

    def check(self, digest: bytes) -> PayloadStatus:
        """Re-hash the stored payload (streamed, in 1 MiB reads) and compare it with
        ``digest``: :attr:`PayloadStatus.ERASING` where what is stored is a regular file of
        nothing but zero bytes and an empty regular marker stands beside it (the state a
        redaction cut short between its overwrite and its entry leaves; :meth:`scrub`).

        A path that exists but is not a readable regular file (a symlink, FIFO, device,
        directory, or unreadable) is a :attr:`PayloadStatus.MISMATCH`: something other
        than the payload sits there; :meth:`problem` says what.
        """
        status, zeros = self._rehash(digest)
        if status is PayloadStatus.MISMATCH and zeros and self._marked(digest):
            return PayloadStatus.ERASING
        return status

    def _marked(self, digest: bytes) -> bool:
        """Whether the marker of a payload being erased stands for ``digest``: an empty
        regular file (never through a link)."""
        try:
            info = os.lstat(f"{self._path(digest)}{_ERASING}")
        except OSError:
            return False
        return stat.S_ISREG(info.st_mode) and info.st_size == 0

    def _rehash(self, digest: bytes) -> tuple[PayloadStatus, bool]:
        """What :meth:`check` finds of the bytes, and whether they are all zero (a regular
        file read to its end)."""
        try:
            fd = open_regular(self._checked(digest))
        except (FileNotFoundError, NotADirectoryError):
            return PayloadStatus.MISSING, False
        except OSError:
            return PayloadStatus.MISMATCH, False
        zeros = True
        try:
            hasher = hashlib.sha256()
            while chunk := os.read(fd, _CHECK_CHUNK):
                hasher.update(chunk)
                zeros = zeros and chunk.count(0) == len(chunk)
        except OSError:
            return PayloadStatus.MISMATCH, False
        finally:
            close_fd(fd)
        return (PayloadStatus.OK if hasher.digest() == digest else PayloadStatus.MISMATCH,
                zeros)

    def problem(self, digest: bytes) -> str | None:
        """Why the payload file for ``digest`` cannot be read (e.g. "is a symbolic link,
        not a regular file"), or None when it is a readable regular file or absent."""
        try:
            close_fd(open_regular(self._checked(digest)))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            return problem(exc)
        return None


def _overwrite(path: str) -> None:
    """Write zeros over every byte of the regular file at ``path`` in place (never through
    a symbolic link; anything but a regular file is left as it is), then sync them.

    Raises:
        OSError: if it cannot be opened, written or synced.
    """
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # a FIFO or device put there: nothing to erase
            return
        size = info.st_size
        zeros = bytes(min(size, 1 << 20))
        done = 0
        while done < size:
            done += os.pwrite(fd, zeros[: size - done], done)
        os.fsync(fd)
    finally:
        close_fd(fd)
