"""Entries decoded into the index's columns: the native core's layout against the reference
(:mod:`evidence_ledger.index.columns`), on the same random and mutated records: the same
rows, hashes and stopping point, and :func:`check_batch` the same batch and message.
Skipped where the native core is not built (failed under ``CI=true``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evidence_ledger.format import encoding, entries
from evidence_ledger.format.framing import Record
from evidence_ledger.index import check, columns

from .cores import compiled
from .fuzzing import FUZZ
from .test_native_core import ENTRY_BYTES, mutated

_INTERRUPTION = {"call_id": "c1", "tool": None, "agent": "a", "scope": ["x"],
                 "args_digest": bytes(32)}
_POOL: list[Any] = [
    None, True, False, "", "run-1", "é" * 40, bytes(32), bytes(range(32)), b"short",
    [], ["a", "b"], [1], 0, 7, 300, 2**40, -1, "A" * 86 + "==", [_INTERRUPTION],
    [{"call_id": "c1"}], {"nested": 1},
    *sorted({v for fields in entries.BODY_FIELDS.values()
             for _, code, values in entries.native_fields(fields) if code == "one_of"
             for v in values if v}),
]
"""Body values, and the words of every ``one_of`` field (approve, jcs, add, ...): each
check of :data:`entries.BODY_FIELDS` takes some, refuses others."""


@st.composite
def entry_records(draw: st.DrawFn) -> bytes:
    """Canonical bytes of an entry of any kind: mostly well formed (every body value
    passes its check), else with a value of a wrong type, a field missing or extra, a
    header field wrong, or its bytes mutated."""
    kind = draw(st.sampled_from(entries.KINDS))
    body = {}
    for name, check_ in entries.BODY_FIELDS[kind].items():
        good = [v for v in _POOL if check_(v)]
        body[name] = draw(st.sampled_from(good if good and draw(st.integers(0, 40)) else _POOL))
    if draw(st.integers(0, 20)) == 0:
        body.pop(draw(st.sampled_from(sorted(body))))
    if draw(st.integers(0, 20)) == 0:
        body["extra"] = None
    top = {"v": 1, "seq": draw(st.integers(0, 2**64 - 1)), "prev": bytes(32),
           "kind": kind if draw(st.integers(0, 30)) else "nonsense",
           "time": draw(st.integers(0, 2**64 - 1)),
           "refs": draw(st.lists(st.sampled_from([bytes(32), *[b"\x07" * 32] * 4, b"\x07" * 31]),
                                 max_size=2)),
           "body": body}
    if draw(st.integers(0, 20)) == 0:
        top[draw(st.sampled_from(sorted(top)))] = draw(st.sampled_from([-1, 2, "x", None]))
    data = encoding.encode(top)
    return draw(mutated(data)) if draw(st.integers(0, 5)) == 0 else data


def _filled(fill: columns.Fill, records: list[bytes]) -> tuple[Any, ...]:
    found: columns.Columns = {}
    stop, hashes, leaves = fill(records, 0, found)
    return stop, hashes, leaves, repr(found)  # repr: types count (True is not 1, tuples)


@FUZZ
@given(st.lists(entry_records(), min_size=1, max_size=6))
def test_native_columns_fuzz(records):
    compiled()
    assert _filled(columns.fill_columns_native, records) == _filled(
        columns.fill_columns_reference, records)
    taken, _, _ = columns._layout.fill(records, 0, {})  # what the layout takes alone
    stop, _, _, _ = _filled(columns.fill_columns_reference, records)
    assert taken <= stop  # it takes a subset of what the reference takes


def test_the_native_layout_takes_the_vectors_and_well_formed_entries_of_every_kind():
    compiled()
    assert _filled(columns.fill_columns_native, ENTRY_BYTES) == _filled(
        columns.fill_columns_reference, ENTRY_BYTES)
    assert _filled(columns.fill_columns_reference, ENTRY_BYTES)[0] == len(ENTRY_BYTES)
    # every kind but run_state (its interruptions are maps: left to the reference)
    assert set(columns._layout_spec()) == set(entries.KINDS) - {"run_state"}
    taken = [v for v in ENTRY_BYTES if entries.decode_entry(v).kind != "run_state"]
    assert columns._layout.fill(taken, 0, {})[0] == len(taken)


def test_check_batch_is_the_same_on_both_cores(monkeypatch):
    compiled()
    good = [v for v in ENTRY_BYTES if entries.decode_entry(v).kind != "run_state"]
    bad = good[1][:-1]  # cut short: not a MessagePack value
    datas = [*ENTRY_BYTES, bad, good[0]]
    records, offset = [], 100
    for i, data in enumerate(datas):
        records.append(Record(i + 7, offset, data, True))
        offset += 12 + len(data)
    batches = []
    for fill in (columns.fill_columns_reference, columns.fill_columns_native):
        monkeypatch.setattr(check, "fill_columns", fill)
        batches.append(check.check_batch(records))
    assert batches[0] == batches[1]
    assert batches[1].count == len(ENTRY_BYTES)
    assert batches[1].problem == (f"log damaged at seq {7 + len(ENTRY_BYTES)}: not a "
                                  "MessagePack value: Unpack failed: incomplete input "
                                  "(run verify)")


@pytest.mark.parametrize("spec", [
    {"call": [("run_id", "no-such-check", None, None)]},
    {"call": [("x" * 32, "str", None, None)]},
    {"call": [("run_id", "one_of", None, None)]},
])
def test_the_layout_refuses_a_spec_it_cannot_hold(spec):
    with pytest.raises(ValueError):
        compiled().Layout(spec)
