"""A ledger directory: the append-only log, the payload store beside it, and the lock.

Layout of ``<dir>`` (default ``./.evidence``; ``--ledger`` or ``EVIDENCE_LEDGER``)::

    format         the format version (absent: 1; see evidence_ledger.storage.ledger_format)
    log.bin        framed entries (see evidence_ledger.storage.log_store)
    payloads/      content-addressed payloads: version 1 one file each
                   (evidence_ledger.storage.payloads), version 2 segments
                   (evidence_ledger.storage.segment_store)
    writer.lock    exclusive writer lock (flock)
    torn/          torn tails cut back by a writer after a crash, kept for inspection
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from evidence_ledger.format.entries import Entry, decode_entry, entry_hash
from evidence_ledger.format.errors import EncodingError, EvidenceError, StorageError, UsageError
from evidence_ledger.format.framing import Damage, Record, TornTail
from evidence_ledger.storage.ledger_format import read_format
from evidence_ledger.storage.log_store import FileLogStore
from evidence_ledger.storage.payload_store import Payloads, open_payloads

DEFAULT_DIR = ".evidence"
ENV_VAR = "EVIDENCE_LEDGER"


def resolve_dir(directory: str | os.PathLike[str] | None) -> Path:
    """The ledger directory: ``directory``, else ``$EVIDENCE_LEDGER``, else ``./.evidence``."""
    if directory:
        return Path(directory)
    return Path(os.environ.get(ENV_VAR) or DEFAULT_DIR)


def decode_record(record: Record) -> tuple[Entry, bytes]:
    """The entry a log record holds, and its entry hash (32 bytes).

    Raises:
        EvidenceError: if the record fails its CRC-32 or canonical decoding (the message
            names its seq).
    """
    if not record.crc_ok:
        raise EvidenceError(f"log damaged at seq {record.index}: record fails its CRC-32")
    try:
        entry = decode_entry(record.data)
    except EncodingError as exc:
        raise EvidenceError(f"log damaged at seq {record.index}: {exc}") from exc
    return entry, entry_hash(record.data)


@dataclass(frozen=True)
class Tail:
    """Where the next entry goes.

    Attributes:
        size: number of entries in the log (the next seq).
        last_hash: entry hash of entry ``size - 1`` (zeros when empty).
        offset: byte length of the log up to and including that entry.
    """

    size: int
    last_hash: bytes
    offset: int


class Ledger:
    """One ledger directory.

    Args:
        directory: path of the ledger directory (see :func:`resolve_dir`).

    Attributes:
        format_version: 1 (one file per payload) or 2 (payload segments; new ledgers).

    Raises:
        EvidenceError: if its ``format`` file is not a regular file naming a known version.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = resolve_dir(directory)
        self.format_version = read_format(self.directory)
        self.store = FileLogStore(self.directory, self.format_version)
        self.payloads: Payloads = open_payloads(self.directory, self.format_version)

    def require_exists(self) -> None:
        """Raise :class:`UsageError` unless the directory holds a log."""
        if not self.store.exists():
            raise UsageError(f"no ledger at {self.directory} (no {self.store.path.name})")

    def scan(self) -> Iterator[Record | Damage | TornTail]:
        """Raw records of the log, in order (see :meth:`FileLogStore.scan`); never writes."""
        return self.store.scan()

    def entries(self) -> Iterator[tuple[Entry, bytes]]:
        """Decoded entries with their entry hashes, in order.

        Stops quietly before a torn tail.

        Raises:
            EvidenceError: at the first damaged or non-canonical record (run ``verify``
                for the full report).
        """
        for item in self.scan():
            if isinstance(item, Damage):
                raise EvidenceError(f"log damaged at seq {item.index}: {item.reason}")
            if isinstance(item, TornTail):
                return
            yield decode_record(item)

    @contextlib.contextmanager
    def locked_tail(
        self, tail: Tail, visit: Callable[[Entry, bytes], None], timeout: float = 30.0,
        floor: Callable[[], int] = lambda: 0,
    ) -> Iterator[Tail]:
        """Hold the writer lock, catch up from ``tail``, and yield where the next entry goes.

        Entries appended since ``tail`` (by this or another process) are decoded and
        passed to ``visit(entry, entry_hash)`` so a writer can keep its indexes current;
        a torn tail is cut back (its bytes kept in ``torn/``), unless the log would then
        hold fewer entries than ``floor()`` (the tree size of the latest signed
        checkpoint): entries a checkpoint covers are never cut or written over.

        Raises:
            LockTimeout: if another writer holds the lock past ``timeout`` seconds.
            StorageError: if a ledger opened in format version 1 was migrated since.
            EvidenceError: if the log is damaged (a writer never appends to a damaged log),
                or holds fewer whole entries than ``floor()`` (cut back under a signed
                checkpoint: appending would fork the log).
        """
        with self.store.lock(timeout):
            if self.format_version == 1 and read_format(self.directory) != 1:
                raise StorageError(f"{self.directory} was migrated to format version 2 while "
                                   "this writer had it open; open it again to append")
            size, last_hash, offset = tail.size, tail.last_hash, tail.offset
            for item in self.store.scan(offset, size):
                if isinstance(item, TornTail):
                    self._refuse_below(floor, size)
                    self.store.cut_torn_tail(item)
                    break
                if isinstance(item, Damage) or not item.crc_ok:
                    raise EvidenceError(
                        f"log damaged at seq {item.index}; refusing to append (run verify)"
                    )
                try:
                    entry = decode_entry(item.data)
                except EncodingError as exc:
                    raise EvidenceError(f"log damaged at seq {item.index}: {exc}") from exc
                last_hash = entry_hash(item.data)
                visit(entry, last_hash)
                size, offset = size + 1, item.end
            self._refuse_below(floor, size)
            yield Tail(size, last_hash, offset)

    def _refuse_below(self, floor: Callable[[], int], size: int) -> None:
        covered = floor()
        if size < covered:
            raise EvidenceError(
                f"the log holds {size} whole entries but a signed checkpoint covers {covered}: "
                "it was cut back; refusing to append (run verify)"
            )
