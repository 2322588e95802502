"""The ledger directory's format version: the file ``format`` (one line, the version number;
absent: version 1, one file per payload). Version 2 keeps payloads in segment files
(:mod:`evidence_ledger.storage.segment_store`). FORMAT.md documents both."""

from __future__ import annotations

import os
from pathlib import Path

from evidence_ledger.format.errors import EvidenceError, StorageError
from evidence_ledger.storage.fsutil import NotRegularFileError, close_fd, fsync_path, open_regular

FORMAT_NAME = "format"
CURRENT = 2
"""The version new ledgers are written in."""
VERSIONS = (1, 2)
_MAX = 16  # bytes of the file read at most


def read_format(directory: Path) -> int:
    """The format version of the ledger in ``directory``: the number in its ``format`` file;
    1 when there is none but a log is there; :data:`CURRENT` for a directory without a log
    (a new ledger).

    Raises:
        EvidenceError: if ``format`` is not a regular file, or not a known version.
    """
    path = Path(directory) / FORMAT_NAME
    try:
        fd = open_regular(path)
    except (FileNotFoundError, NotADirectoryError):  # no ledger there (yet)
        return 1 if os.path.lexists(Path(directory) / "log.bin") else CURRENT
    except NotRegularFileError as exc:
        raise EvidenceError(f"{path} {exc.strerror}: refusing to read it (run verify)") from exc
    except OSError as exc:
        raise EvidenceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        text = os.read(fd, _MAX)
    finally:
        close_fd(fd)
    try:
        version = int(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        version = 0
    if version not in VERSIONS:
        raise EvidenceError(f"{path} names no format version this program reads "
                            f"({', '.join(map(str, VERSIONS))}): {text[:_MAX]!r}")
    return version


def write_format(directory: Path, version: int) -> None:
    """Write ``version`` to ``directory/format`` atomically and durably (a temporary file
    synced, renamed over it, the directory synced).

    Raises:
        StorageError: if it cannot be written.
    """
    path = Path(directory) / FORMAT_NAME
    tmp = path.with_name(f".{FORMAT_NAME}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, f"{version}\n".encode("ascii"))
            os.fsync(fd)
        finally:
            close_fd(fd)
        os.replace(tmp, path)
        fsync_path(directory)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
