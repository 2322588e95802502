"""Reading files the user names on the command line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from evidence_ledger.format.errors import UsageError

MAX_INPUT = 1 << 30
"""Largest input file read whole (bytes)."""


def read_input(path: str | os.PathLike[str], limit: int | None = None,
               largest: int = MAX_INPUT, what: str = "input") -> bytes:
    """The bytes of the regular input file at ``path``: all of them, or only its first
    ``limit`` bytes. A file over ``largest`` bytes (at most :data:`MAX_INPUT`; ``what`` it
    is, for the message) is refused before anything of it is read.

    Raises:
        UsageError: if it is missing, not a regular file (a directory, FIFO or device,
            which could block or never end), too large, or unreadable (one line naming it).
    """
    try:
        with open(path, "rb", opener=open_nonblocking) as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise UsageError(f"{os.fspath(path)} is not a regular file")
            if limit is not None:
                return fh.read(limit)
            largest = min(largest, MAX_INPUT)
            if info.st_size > largest:
                raise UsageError(f"{os.fspath(path)} is {info.st_size} bytes, larger than the "
                                 f"largest {what} ({largest} bytes)")
            return fh.read(largest + 1)  # a file that grew meanwhile: its size says so
    except FileNotFoundError as exc:
        raise UsageError(f"{os.fspath(path)} not found") from exc
    except IsADirectoryError as exc:
        raise UsageError(f"{os.fspath(path)} is a directory, not a file") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from exc


def open_nonblocking(path: str, flags: int) -> int:
    """An ``opener`` for :func:`open`: ``O_NONBLOCK``, so opening a FIFO with no writer
    returns at once instead of hanging (check ``S_ISREG`` on the result)."""
    return os.open(path, flags | os.O_NONBLOCK)


def refuse_inside(ledger_dir: str | os.PathLike[str], path: str | os.PathLike[str],
                  what: str) -> None:
    """Refuse ``path`` (``what`` it is, for the message) when it resolves to the ledger
    directory or a path inside it: nothing but the ledger's own files goes there (a file
    written into ``checkpoints/``, say, would break every later command).

    Raises:
        UsageError: if ``path`` is ``ledger_dir`` or inside it.
    """
    root, target = Path(ledger_dir).resolve(), Path(path).resolve()
    if target == root or root in target.parents:
        raise UsageError(f"refusing {what} {os.fspath(path)}: it is inside the ledger "
                         f"directory {os.fspath(ledger_dir)}; write it elsewhere")
