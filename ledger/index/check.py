"""Stage one of deriving the index: check a batch of log records, each on its own (pure).

What the index needs of each record that does not depend on the records before it:
:func:`check_batch` holds the record to its CRC-32 and to
:func:`evidence_ledger.format.entries.decode_entry`
(canonical MessagePack, a typed body), takes its entry hash and its RFC 9162 §2.1.1 leaf
hash, its bytes (what the rules read) and its row of the chunk tables
(:data:`evidence_ledger.index.db.CHECKED_SCHEMAS`: every column but ``call_seq``). Stage two,
:class:`evidence_ledger.index.build.Deriver`, then runs the batch in order: ``seq`` and ``prev``
links, the tree, the rules, and ``call_seq``.

A batch needs nothing from the other batches, so a big update reads and checks the next
batch in a process of its own (:mod:`evidence_ledger.index.worker`) while stage two runs on this
one; a small one checks it in line. Both give the same :class:`CheckedBatch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from evidence_ledger.format.entries import decode_entry
from evidence_ledger.format.errors import EncodingError
from evidence_ledger.format.framing import Record
from evidence_ledger.index.columns import Columns, column_table, fill_columns

__all__ = ["BLOCK", "CheckedBatch", "check_batch"]

BLOCK = 4096
"""Records between two rows of ``log_blocks`` (besides the first record of each batch an
update reads): a reader of the index reads at most this many records to reach one it
names."""


@dataclass(frozen=True)
class CheckedBatch:
    """What :func:`check_batch` found in a batch of records.

    Attributes:
        first: index of the batch's first record (the seq it must hold).
        count: records that passed, from the first (all of the batch unless ``problem``).
        hashes: their entry hashes, 32 bytes each, concatenated (``count * 32`` bytes).
        leaves: their RFC 9162 leaf hashes, 32 bytes each, concatenated.
        tables: entry kind -> those records' rows, in seq order
            (:data:`evidence_ledger.index.db.CHECKED_SCHEMAS`).
        records: those records' bytes, in order (what the rules read, decoded again by
            :func:`evidence_ledger.format.entries.decode_checked`: cheaper than shipping
            decoded entries from the worker).
        blocks: ``(seq, byte offset)`` of those records at a multiple of :data:`BLOCK`,
            and of the first (the ``log_blocks`` rows of the batch).
        last_offset: byte offset of the last of them (0 when ``count`` is 0).
        end: byte offset just past the last of them (the first record's offset when
            ``count`` is 0).
        problem: why record ``first + count`` cannot be indexed (one line, naming its
            seq), or None when every record passed.
    """

    first: int
    count: int
    hashes: bytes
    leaves: bytes
    tables: dict[str, pa.Table]
    problem: str | None
    records: list[bytes]
    blocks: list[tuple[int, int]]
    last_offset: int
    end: int


def check_batch(records: Sequence[Record]) -> CheckedBatch:
    """Check a non-empty batch of consecutive records, up to the first that fails.

    A record fails when its CRC-32 does not match or it does not decode canonically with
    the fields of its kind (:func:`evidence_ledger.format.entries.decode_entry`, whose
    message names it). Its ``seq`` and ``prev`` are not checked here: they depend on the
    records before. Rows: :func:`evidence_ledger.index.columns.fill_columns`, on the core in
    use.

    Returns:
        A :class:`CheckedBatch`; never raises on bad records.
    """
    first = records[0].index
    crc_ok = next((i for i, record in enumerate(records) if not record.crc_ok), len(records))
    data = [record.data for record in records[:crc_ok]]
    columns: Columns = {}
    count, hashes, leaves = fill_columns(data, 0, columns)
    problem = None
    if count < crc_ok:
        problem = f"log damaged at seq {first + count}: {_refusal(data[count])} (run verify)"
    elif count < len(records):
        problem = f"log damaged at seq {first + count}: record fails its CRC-32 (run verify)"
    blocks = [(seq, records[seq - first].offset) for seq in range(first, first + count)
              if seq % BLOCK == 0 or seq == first]
    last = records[count - 1] if count else None
    return CheckedBatch(
        first, count, hashes, leaves,
        {kind: column_table(kind, lists) for kind, lists in columns.items()}, problem,
        data[:count], blocks,
        last.offset if last else 0, last.end if last else records[0].offset,
    )


def _refusal(data: bytes) -> str:
    """Why :func:`decode_entry` refuses ``data`` (where :func:`fill_columns` stopped)."""
    try:
        decode_entry(data)
    except EncodingError as exc:
        return str(exc)
    raise AssertionError("fill_columns stops only at a record decode_entry refuses")
