"""Content-addressed payload store beside the log.

Arguments, results and session items live here as files named by the SHA-256 of their
bytes (``payloads/<first 2 hex>/<64 hex>``); entries hold only those digests, so a
payload can later be erased (redacted) without changing a single entry hash.

A payload is written to a temporary file and renamed into place. An append writes the
payloads, then the log group, then makes both durable with :meth:`PayloadStore.sync`
(one ``syncfs(2)`` on Linux when they share a file system, else an ``fsync`` of each
file, directory and the log) before it is acknowledged: an acknowledged entry never
points at a lost payload, and a group costs one sync, not one per file. (An entry that
a crash leaves unacknowledged may survive without its payload: ``verify`` reports the
missing payload as a notice.)
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import os
from pathlib import Path

from .errors import StorageError
from .findings import PayloadStatus
from .fsutil import fsync_path

PAYLOAD_DIR = "payloads"



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
            os.close(fd)
    return True


def _same_device(fd: int, path: str) -> bool:
    return os.fstat(fd).st_dev == os.stat(path).st_dev


class PayloadStore:
    """Payload files under ``<ledger>/payloads``.

    Args:
        directory: the ledger directory.
    """

    def __init__(self, directory: Path) -> None:
        self.root = Path(directory) / PAYLOAD_DIR
        self._root = str(self.root)
        self._dirty: set[str] = set()  # files written or reused since the last sync

    def path_for(self, digest: bytes) -> Path:
        """Path of the payload with this 32-byte SHA-256 digest."""
        return Path(self._path(digest))

    def _path(self, digest: bytes) -> str:
        hexd = digest.hex()
        return f"{self._root}/{hexd[:2]}/{hexd}"

    def put(self, data: bytes) -> bytes:
        """Store ``data`` (bytes) and return its 32-byte SHA-256 digest.

        Idempotent: an existing payload with that digest is kept.

        Raises:
            StorageError: if the file cannot be written and synced.
        """
        digest = hashlib.sha256(data).digest()
        target = self._path(digest)
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
                os.close(fd)
            os.replace(tmp, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            self._dirty.discard(target)
            raise StorageError(f"cannot store payload {digest.hex()}: {exc}") from exc
        return digest

    def sync(self, log_fd: int | None = None) -> None:
        """Make every payload :meth:`put` since the last sync durable, and the log too.

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

    def erase(self, digest: bytes) -> bool:
        """Remove the payload with this 32-byte digest, durably; False if it was absent.

        Raises:
            StorageError: if the file exists but cannot be removed.
        """
        path = self._path(digest)
        try:
            os.remove(path)
            fsync_path(os.path.dirname(path))
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot remove payload {path}: {exc}") from exc
        return True

    def get(self, digest: bytes) -> bytes | None:
        """The payload bytes for ``digest``, or None when absent (never stored or erased)."""
        try:
            with open(self._path(digest), "rb") as fh:
                return fh.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def check(self, digest: bytes) -> PayloadStatus:
        """Re-hash the stored payload and compare it with ``digest``."""
        data = self.get(digest)
        if data is None:
            return PayloadStatus.MISSING
        if hashlib.sha256(data).digest() != digest:
            return PayloadStatus.MISMATCH
        return PayloadStatus.OK
