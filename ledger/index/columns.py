"""Entries decoded straight into the columns of the index's chunk tables (pure reference,
and the native core's fast path).

:func:`fill_columns` appends the rows of a list of records to per-kind column lists:
``seq``, entry hash, ``prev``, time (ns), refs (a tuple of 32-byte hashes), then the body
fields the views read (:data:`evidence_ledger.index.db.BODIES`, in order), stopping at the
first record :func:`evidence_ledger.format.entries.decode_entry` would refuse.
:func:`column_table` makes a kind's lists into its Arrow table
(:data:`evidence_ledger.index.db.CHECKED_SCHEMAS`). On the native core
(:mod:`evidence_ledger.format.core`) a compiled :class:`Layout` fills them without making
the entry's dicts; it takes a subset of what the reference takes (every kind whose checks
it knows), and stops, appending nothing, at any other record: :func:`fill_columns` hands
that one to the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from evidence_ledger.format import core, entries
from evidence_ledger.format.errors import EncodingError
from evidence_ledger.index.db import BODIES, CHECKED_SCHEMAS, exact_ns, timestamps
from evidence_ledger.tlog import merkle

__all__ = ["Columns", "Fill", "column_table", "fill_columns", "fill_columns_native",
           "fill_columns_reference"]

Columns = dict[str, list[list[Any]]]
"""Entry kind -> its column lists (see the module doc), in the order kinds first appear."""
Fill = Callable[[list[bytes], int, Columns], tuple[int, bytes, bytes]]
"""``fill(records, begin, columns) -> (stop, hashes, leaves)``: append the rows of
``records[begin:stop]`` to ``columns``; ``stop`` is the first record not taken
(``len(records)`` when all were); ``hashes`` and ``leaves`` their entry and RFC 9162 leaf
hashes (32 bytes each, concatenated)."""

_BODY_COLUMNS = {kind: BODIES[kind].names for kind in BODIES}


def fill_columns_reference(records: list[bytes], begin: int,
                           columns: Columns) -> tuple[int, bytes, bytes]:
    """:data:`Fill`, stopping at the first record :func:`decode_entry` refuses."""
    hashes, leaves = bytearray(), bytearray()
    stop = begin
    for data in records[begin:]:
        try:
            entry = entries.decode_entry(data)
        except EncodingError:
            break
        hash_ = entries.entry_hash(data)
        hashes += hash_
        leaves += merkle.leaf_hash(data)
        names = _BODY_COLUMNS[entry.kind]
        lists = columns.get(entry.kind)
        if lists is None:
            lists = columns[entry.kind] = [[] for _ in range(5 + len(names))]
        for column, value in zip(lists, (entry.seq, hash_, entry.prev, entry.time, entry.refs),
                                 strict=False):
            column.append(value)
        body = entry.body
        for column, name in zip(lists[5:], names, strict=True):
            column.append(body[name])
        stop += 1
    return stop, bytes(hashes), bytes(leaves)


_LAYOUT_CHECKS = frozenset({"str", "opt_str", "bool", "opt_bool", "hash", "opt_hash", "scope",
                            "count", "signature", "one_of"})
"""The checks of :data:`entries.BODY_FIELDS` the native layout knows (as
:func:`entries.native_fields` names them); a kind with another is left to the reference."""


def _layout_spec() -> dict[str, list[tuple[str, str, list[str | None] | None, int | None]]]:
    """Every kind whose body checks the native layout knows: its fields as
    :class:`Layout` takes them."""
    spec = {}
    for kind, fields in entries.BODY_FIELDS.items():
        names = _BODY_COLUMNS[kind]
        described = entries.native_fields(fields)
        if any(code not in _LAYOUT_CHECKS for _, code, _ in described):
            continue
        spec[kind] = [
            (name, code, None if arg is None else list(arg),
             names.index(name) if name in names else None)
            for name, code, arg in described
        ]
    return spec


_layout: Any = None if core.compiled is None else core.compiled.Layout(_layout_spec())
"""The compiled core's layout of :data:`entries.BODY_FIELDS`, where it is built."""


def fill_columns_native(records: list[bytes], begin: int,
                        columns: Columns) -> tuple[int, bytes, bytes]:
    """:data:`Fill` on the native core: a record its layout does not take goes to
    :func:`fill_columns_reference`, which takes it or stops there."""
    hashes, leaves = bytearray(), bytearray()
    while True:
        stop, more_hashes, more_leaves = _layout.fill(records, begin, columns)
        hashes += more_hashes
        leaves += more_leaves
        if stop == len(records):
            return stop, bytes(hashes), bytes(leaves)
        taken, more_hashes, more_leaves = fill_columns_reference(
            records[stop:stop + 1], 0, columns)
        hashes += more_hashes
        leaves += more_leaves
        if not taken:  # the reference refuses it too
            return stop, bytes(hashes), bytes(leaves)
        begin = stop + 1


fill_columns: Fill = fill_columns_reference if core.native is None else fill_columns_native
""":data:`Fill` on the core in use."""


def column_table(kind: str, lists: list[list[Any]]) -> pa.Table:
    """A kind's column lists (:data:`Columns`) -> its chunk table
    (:data:`evidence_ledger.index.db.CHECKED_SCHEMAS`)."""
    seqs, hashes, prevs, times, refs, *body = lists
    ns = pa.array(times, pa.uint64())
    struct = BODIES[kind]
    if struct.num_fields:
        bodies = pa.StructArray.from_arrays(
            [pa.array(values, field.type) for values, field in zip(body, struct, strict=True)],
            fields=list(struct))
    else:
        bodies = pa.array([{}] * len(seqs), struct)
    return pa.Table.from_arrays([
        pa.array(seqs, pa.int64()), pa.array(hashes, pa.binary()), pa.array(prevs, pa.binary()),
        exact_ns(ns), timestamps(ns), pa.array(refs, pa.list_(pa.binary())), bodies,
    ], schema=CHECKED_SCHEMAS[kind])
