"""A batch of log records read in one call: each record's leaf hash appended to the tree,
its entry decoded and checked, and its entry hash taken.

This is the verifier's per-record work that does not depend on other records
(:func:`evidence_ledger.verify.records.verify_records`). On the native core it is one call per
batch (no Python-level step per record); :func:`read_entries_reference` is the
pure-Python reference it is tested against.
"""

from __future__ import annotations

from typing import Any

from evidence_ledger.format import core, entries
from evidence_ledger.format.entries import Entry
from evidence_ledger.format.errors import EncodingError
from evidence_ledger.tlog import merkle

EntryAndHash = tuple[Entry | None, bytes]
"""A record's entry (None where :func:`~evidence_ledger.format.entries.decode_entry`
refuses its bytes: call it for the reason) and its 32-byte entry hash."""


def read_entries_reference(records: list[bytes], tree: merkle.CompactRange
                           ) -> list[EntryAndHash]:
    """For each record's bytes in ``records``, in order: append its RFC 9162 leaf hash to
    ``tree`` and give ``(entry or None, entry hash)`` (see :data:`EntryAndHash`).

    Returns:
        One pair per record (a list as long as ``records``).
    """
    leaf_hash, decode, entry_hash = merkle.leaf_hash, entries.decode_entry, entries.entry_hash
    out: list[EntryAndHash] = []
    for data in records:
        tree.append(leaf_hash(data))
        try:
            entry: Entry | None = decode(data)
        except EncodingError:
            entry = None
        out.append((entry, entry_hash(data)))
    return out


_compiled: Any = core.compiled


def read_entries_native(records: list[bytes], tree: merkle.CompactRange) -> list[EntryAndHash]:
    """:func:`read_entries_reference` on the native core (``tree`` must be the native
    :class:`~evidence_ledger.tlog.merkle.CompactRange`)."""
    return _compiled.read_entries(records, entries.native_schema, tree)


read_entries = read_entries_reference if core.native is None else read_entries_native
"""Leaf hashes, entries and entry hashes of a batch of records: :func:`read_entries_reference`,
on the core in use."""
