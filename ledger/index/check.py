"""Stage one of deriving the index: check a batch of log records, each on its own (pure).

What the index needs of each record that does not depend on the records before it:
:func:`check_batch` holds the record to its CRC-32 and to
:func:`evidence_ledger.format.entries.decode_entry`
(canonical MessagePack, a typed body), takes its entry hash and its RFC 9162 §2.1.1 leaf
hash, its decoded entry (what the rules read) and its row of the chunk tables
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

from evidence_ledger.format.entries import Entry, decode_entry, entry_hash
from evidence_ledger.format.errors import EncodingError
from evidence_ledger.format.framing import FRAME_OVERHEAD, Record
from evidence_ledger.index.db import BODIES, CHECKED_SCHEMAS, exact_ns, timestamps
from evidence_ledger.tlog import merkle

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
        entries: those records decoded, in order (what the rules read).
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
    entries: list[Entry]
    blocks: list[tuple[int, int]]
    last_offset: int
    end: int


def check_batch(records: Sequence[Record]) -> CheckedBatch:
    """Check a non-empty batch of consecutive records, up to the first that fails.

    A record fails when its CRC-32 does not match or it does not decode canonically with
    the fields of its kind.
    Its ``seq`` and ``prev`` are not checked here: they depend on the records before.

    Returns:
        A :class:`CheckedBatch`; never raises on bad records.
    """
    hashes, leaves = bytearray(), bytearray()
    rows: dict[str, tuple[list[tuple[object, ...]], list[dict[str, object]]]] = {}
    entries: list[Entry] = []
    blocks: list[tuple[int, int]] = []
    problem = None
    first = records[0].index
    last_offset, end = 0, records[0].offset
    for seq, (_, offset, data, crc_ok) in enumerate(records, start=first):
        if not crc_ok:
            problem = f"log damaged at seq {seq}: record fails its CRC-32 (run verify)"
            break
        try:
            entry = decode_entry(data)
        except EncodingError as exc:
            problem = f"log damaged at seq {seq}: {exc} (run verify)"
            break
        hash_ = entry_hash(data)
        entries.append(entry)
        if seq % BLOCK == 0 or seq == first:
            blocks.append((seq, offset))
        last_offset, end = offset, offset + FRAME_OVERHEAD + len(data)
        hashes += hash_
        leaves += merkle.leaf_hash(data)
        kind = rows.get(entry.kind)
        if kind is None:
            kind = rows[entry.kind] = ([], [])
        kind[0].append((entry.seq, hash_, entry.prev, entry.time, entry.refs))
        kind[1].append(entry.body)
    return CheckedBatch(
        first, len(hashes) // 32, bytes(hashes), bytes(leaves),
        {kind: _table(kind, *found) for kind, found in rows.items()}, problem, entries,
        blocks, last_offset, end,
    )


def _table(kind: str, rows: list[tuple[object, ...]], bodies: list[dict[str, object]]) -> pa.Table:
    seqs, hashes, prevs, times, refs = zip(*rows, strict=True)
    ns = pa.array(times, pa.uint64())
    return pa.Table.from_arrays([
        pa.array(seqs, pa.int64()), pa.array(hashes, pa.binary()), pa.array(prevs, pa.binary()),
        exact_ns(ns), timestamps(ns), pa.array(refs, pa.list_(pa.binary())),
        pa.array(bodies, BODIES[kind]),
    ], schema=CHECKED_SCHEMAS[kind])
