"""Reading files the user names on the command line."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

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
    with open_input(path, None if limit is not None else largest, what) as fh:
        try:
            return fh.read(limit if limit is not None else min(largest, MAX_INPUT) + 1)
        except OSError as exc:  # a file that grew meanwhile: its size says so
            raise UsageError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from exc


def open_input(path: str | os.PathLike[str], largest: int | None = MAX_INPUT,
               what: str = "input") -> BinaryIO:
    """The regular input file at ``path``, open for reading in binary. A file over
    ``largest`` bytes (at most :data:`MAX_INPUT`; None: any size) is refused before
    anything of it is read.

    Raises:
        UsageError: as :func:`read_input`.
    """
    try:
        fh = open(path, "rb", opener=open_nonblocking)  # noqa: SIM115 (the caller closes it)
    except FileNotFoundError as exc:
        raise UsageError(f"{os.fspath(path)} not found") from exc
    except IsADirectoryError as exc:
        raise UsageError(f"{os.fspath(path)} is a directory, not a file") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{os.fspath(path)} is not a regular file")
        if largest is not None and info.st_size > min(largest, MAX_INPUT):
            raise UsageError(f"{os.fspath(path)} is {info.st_size} bytes, larger than the "
                             f"largest {what} ({min(largest, MAX_INPUT)} bytes)")
    except BaseException:
        fh.close()
        raise
    return fh


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
