"""File-system primitives the stores share: fsync by path, OS file locks, and opening
files inside a ledger directory that may have been tampered with."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from evidence_ledger.format.errors import LockTimeout, StorageError

_TAIL_CHUNK = 1 << 20  # bytes of a cut tail copied at a time


def close_fd(fd: int) -> None:
    """Close the descriptor ``fd``, ignoring an error close reports (EIO, EINTR).

    Linux releases the descriptor whatever ``close`` returns, so retrying would close one
    another thread just opened (close(2), "Dealing with error returns from close()"). Every
    byte this package needs durable is synced (``fsync``, ``fdatasync`` or ``syncfs``)
    before its file is closed, or the write fails there: a failed close loses nothing.
    """
    with contextlib.suppress(OSError):
        os.close(fd)


@contextlib.contextmanager
def reading(fd: int, buffering: int = -1) -> Iterator[BinaryIO]:
    """The descriptor ``fd`` (open for reading) as a binary file, closed on exit with an
    error close reports ignored, as :func:`close_fd` does (nothing read can be lost)."""
    fh = os.fdopen(fd, "rb", buffering=buffering)
    try:
        yield fh
    finally:
        with contextlib.suppress(OSError):
            fh.close()


def fsync_path(path: str | os.PathLike[str]) -> None:
    """``fsync`` a file or directory by path (a directory: to make new entries durable).

    Raises:
        OSError: if it cannot be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        close_fd(fd)


class NotRegularFileError(OSError):
    """A path inside the ledger names a symlink, FIFO, socket, device or directory where
    a regular file belongs: it is never read (a FIFO blocks, ``/dev/zero`` never ends)."""


_SAFE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """Open the regular file at ``path`` and return its descriptor.

    The last path element must not be a symlink (``O_NOFOLLOW``); opening never blocks
    (``O_NONBLOCK``: a FIFO without a writer returns at once), and anything that is not a
    regular file is closed again unread. ``O_NONBLOCK`` changes nothing for regular files.

    Args:
        path: the file.
        flags: ``os.open`` flags (``O_RDONLY`` by default; ``O_RDWR | O_CREAT`` to create).
        mode: permissions of a file created by ``O_CREAT``.

    Raises:
        NotRegularFileError: if ``path`` is a symlink, FIFO, socket, device or directory.
        OSError: for any other failure (``FileNotFoundError`` when it does not exist).
    """
    try:
        fd = os.open(path, flags | _SAFE_FLAGS, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFileError(
                errno.ELOOP, "is a symbolic link, not a regular file", os.fspath(path)
            ) from None
        if exc.errno in (errno.ENXIO, errno.EISDIR, errno.ENODEV, errno.EOPNOTSUPP):
            raise NotRegularFileError(exc.errno, "is not a regular file", os.fspath(path)) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFileError(
                errno.EINVAL,
                "is not a regular file (a directory, FIFO, socket or device)",
                os.fspath(path),
            )
    except BaseException:
        close_fd(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """All bytes of the regular file at ``path`` (see :func:`open_regular`).

    Args:
        path: the file.
        limit: read at most ``limit + 1`` bytes (so that a caller can tell a file larger
            than ``limit`` from one of exactly ``limit`` bytes); None reads it all.

    Raises:
        NotRegularFileError: if it is not a regular file.
        OSError: if it cannot be read.
    """
    with reading(open_regular(path)) as fh:
        return fh.read() if limit is None else fh.read(limit + 1)


def problem(exc: OSError) -> str:
    """``exc`` as a short phrase: "is a symbolic link, not a regular file", "No such
    file or directory"..."""
    return exc.strerror or str(exc)


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
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _SAFE_FLAGS, 0o644)
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
        with contextlib.suppress(OSError):  # released even if the close below fails
            fcntl.flock(fd, fcntl.LOCK_UN)
        close_fd(fd)


def keep_tail(fd: int, offset: int, folder: Path, name: str) -> Path:
    """Copy the bytes of the open file ``fd`` from byte ``offset`` to its end into
    ``folder/name`` (1 MiB at a time, whatever their size; runs of zeros left as holes of a
    sparse file), made durable (the file and ``folder`` synced) before the caller cuts them
    off: a tail cut back is kept, never dropped. Returns the path written.

    Raises:
        OSError: if the bytes cannot be read, written or synced.
    """
    folder.mkdir(exist_ok=True)
    target = folder / name
    with open(target, "wb") as dst:
        at = offset
        while chunk := os.pread(fd, _TAIL_CHUNK, at):
            at += len(chunk)
            if chunk.count(0) == len(chunk):  # zeros: left a hole, read back as zeros
                dst.seek(len(chunk), os.SEEK_CUR)
            else:
                dst.write(chunk)
        dst.truncate()  # the size, holes at the end included
        dst.flush()
        os.fsync(dst.fileno())
    fsync_path(folder)
    return target


def replace_durably(path: str | os.PathLike[str], data: bytes, tmp: str | os.PathLike[str],
                    mode: int = 0o644) -> None:
    """Replace the file at ``path`` with ``data`` (bytes): written to ``tmp`` (created anew
    with ``mode``, never through a symlink or a leftover planted there), fsynced, renamed
    over ``path``, then the folder fsynced. A crash leaves the old file or the new one,
    whole.

    Raises:
        OSError: if a step fails (``tmp`` is then removed where it can be).
    """
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # a leftover, or a planted symlink: never written through
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_path(os.path.dirname(os.path.abspath(path)))
