"""Content-addressed payload store beside the log.

Arguments, results and session items live here as files named by the SHA-256 of their
bytes (``payloads/<first 2 hex>/<64 hex>``); entries hold only those digests, so a
payload can later be erased (redacted) without changing a single entry hash.

A payload is written to a temporary file, fsynced, renamed into place; the directories
touched are fsynced by :meth:`PayloadStore.sync` before the entries that name the
payloads are appended, so an acknowledged entry never points at a lost payload.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .errors import StorageError
from .findings import PayloadStatus

PAYLOAD_DIR = "payloads"


class PayloadStore:
    """Payload files under ``<ledger>/payloads``.

    Args:
        directory: the ledger directory.
    """

    def __init__(self, directory: Path) -> None:
        self.root = Path(directory) / PAYLOAD_DIR
        self._dirty: set[Path] = set()

    def path_for(self, digest: bytes) -> Path:
        """Path of the payload with this 32-byte SHA-256 digest."""
        hexd = digest.hex()
        return self.root / hexd[:2] / hexd

    def put(self, data: bytes) -> bytes:
        """Store ``data`` (bytes) and return its 32-byte SHA-256 digest.

        Idempotent: an existing payload with that digest is kept.

        Raises:
            StorageError: if the file cannot be written and synced.
        """
        digest = hashlib.sha256(data).digest()
        target = self.path_for(digest)
        if target.exists():
            return digest
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StorageError(f"cannot store payload {digest.hex()}: {exc}") from exc
        self._dirty.add(target.parent)
        return digest

    def sync(self) -> None:
        """fsync every directory a :meth:`put` created entries in since the last sync.

        Raises:
            StorageError: if a directory cannot be synced.
        """
        dirs = sorted(self._dirty) + ([self.root] if self._dirty else [])
        try:
            for path in dirs:
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise StorageError(f"cannot sync payload directory: {exc}") from exc
        self._dirty.clear()

    def get(self, digest: bytes) -> bytes | None:
        """The payload bytes for ``digest``, or None when absent (never stored or erased)."""
        try:
            return self.path_for(digest).read_bytes()
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
