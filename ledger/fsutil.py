"""File-system primitives the stores share: fsync by path, and OS file locks."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import LockTimeout, StorageError


def fsync_path(path: str | os.PathLike[str]) -> None:
    """``fsync`` a file or directory by path (a directory: to make new entries durable).

    Raises:
        OSError: if it cannot be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def file_lock(
    path: Path, *, exclusive: bool = True, timeout: float | None = None
) -> Iterator[None]:
    """Hold an OS lock (``flock``) on the file at ``path`` (created, with its folder).

    Args:
        path: the lock file.
        exclusive: exclusive (writers) or shared (readers) lock.
        timeout: seconds to wait for another holder; None waits for ever, 0 fails at once.

    Raises:
        LockTimeout: if the lock is still held elsewhere after ``timeout`` seconds.
        StorageError: if the lock file cannot be created or opened.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StorageError(f"cannot open lock file {path}: {exc.strerror or exc}") from exc
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    try:
        if timeout is None:
            fcntl.flock(fd, mode)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout(
                            f"another process holds {path} (waited {timeout:g} s)"
                        ) from None
                    time.sleep(0.005)
        yield
    finally:
        os.close(fd)  # closing releases the lock
