"""Reading files the user names on the command line."""

from __future__ import annotations

import os

from .errors import UsageError


def read_input(path: str | os.PathLike[str]) -> bytes:
    """All bytes of the input file at ``path``.

    Raises:
        UsageError: if it is missing, a directory, or unreadable (one line naming it).
    """
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError as exc:
        raise UsageError(f"{os.fspath(path)} not found") from exc
    except IsADirectoryError as exc:
        raise UsageError(f"{os.fspath(path)} is a directory, not a file") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from exc
