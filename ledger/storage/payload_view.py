"""One stored payload open for reading: a byte range of a file (a whole payload file of
format version 1, a record's bytes in a segment of version 2), read to its end and no
further."""

from __future__ import annotations

import os
from types import TracebackType

from evidence_ledger.storage.fsutil import close_fd


class PayloadView:
    """``length`` bytes of the open descriptor ``fd`` from byte ``start`` on; owns ``fd``
    (closed by :meth:`close` or on leaving the context).

    Attributes:
        size: the payload's length in bytes.
    """

    def __init__(self, fd: int, start: int, length: int) -> None:
        self._fd = fd
        self._at = start
        self._end = start + length
        self.size = length

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all that is left when negative); b"" at the end.

        Raises:
            OSError: if the file cannot be read.
        """
        left = self._end - self._at
        want = left if size is None or size < 0 else min(size, left)
        parts = []
        while want > 0:
            chunk = os.pread(self._fd, min(want, 1 << 20), self._at)
            if not chunk:
                break
            parts.append(chunk)
            self._at += len(chunk)
            want -= len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        """Close the descriptor (an error close reports is ignored)."""
        if self._fd >= 0:
            close_fd(self._fd)
            self._fd = -1

    def __enter__(self) -> PayloadView:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
