"""Entries: canonical bytes, strict field checks, the JSON Schemas kept in step."""

import json
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evidence_ledger.format import encoding
from evidence_ledger.format.entries import BODY_FIELDS, ZERO_HASH, Entry, decode_entry
from evidence_ledger.format.errors import EncodingError

SCHEMAS = Path(__file__).parent.parent / "schemas" / "entry-bodies"
BODY = {"run_id": "r", "scope": [], "status": "completed", "run_state": None}


def _raw(**changes):
    value = {
        "v": 1, "seq": 0, "prev": ZERO_HASH, "kind": "run_end", "time": 5, "refs": [],
        "body": dict(BODY),
    }
    value.update(changes)
    return encoding.encode(value)


def test_round_trip():
    entry = Entry(seq=0, prev=ZERO_HASH, kind="run_end", time=5, body=dict(BODY))
    assert decode_entry(entry.to_bytes()) == entry


@pytest.mark.parametrize(
    "changes",
    [
        {"prev": "00" * 32},  # str where bin belongs
        {"prev": b"\x00" * 31},
        {"seq": -1},
        {"seq": True},
        {"kind": "nope"},
        {"v": 2},
        {"refs": [b"x"]},
        {"body": {**BODY, "status": "exploded"}},
        {"body": {**BODY, "extra": 1}},
        {"body": {"run_id": "r", "scope": []}},
        {"body": {**BODY, "scope": "top"}},
    ],
)
def test_bad_fields_refused(changes):
    with pytest.raises(EncodingError):
        decode_entry(_raw(**changes))


def test_extra_top_level_field_refused():
    value = encoding.decode(_raw())
    value["x"] = 1
    with pytest.raises(EncodingError):
        decode_entry(encoding.encode(value))


@pytest.mark.parametrize("kind", sorted(BODY_FIELDS))
def test_json_schema_names_the_same_fields(kind):
    schema = json.loads((SCHEMAS / f"{kind}.schema.json").read_text())
    assert set(schema["properties"]) == set(BODY_FIELDS[kind])
    assert set(schema["required"]) == set(BODY_FIELDS[kind])


bodies = st.fixed_dictionaries({
    "run_id": st.text(max_size=8), "scope": st.lists(st.text(max_size=5), max_size=3),
    "call_id": st.text(max_size=8), "agent": st.text(max_size=5), "tool": st.text(max_size=5),
    "args_digest": st.binary(min_size=32, max_size=32),
    "args_form": st.sampled_from(["jcs", "raw"]),
    "args_payload": st.binary(min_size=32, max_size=32),
    "needs_approval": st.none() | st.booleans(), "response_id": st.none() | st.text(max_size=5),
})


@given(body=bodies, seq=st.integers(0, 2**64 - 1), time=st.integers(0, 2**64 - 1))
def test_fast_entry_encoding_equals_the_generic_canonical_encoding(body, seq, time):
    entry = Entry(seq=seq, prev=ZERO_HASH, kind="call", time=time, body=body, refs=(ZERO_HASH,))
    generic = encoding.encode({
        "v": 1, "seq": seq, "prev": ZERO_HASH, "kind": "call", "time": time,
        "refs": [ZERO_HASH], "body": body,
    })
    assert entry.to_bytes() == generic
    assert decode_entry(generic) == entry


@pytest.mark.parametrize(
    "changes", [{"seq": -1}, {"prev": b"x"}, {"time": 1.5}, {"refs": (b"short",)},
                {"body": {**BODY, "status": 3}}, {"kind": "nope"}],
)
def test_to_bytes_refuses_bad_fields(changes):
    fields = {"seq": 0, "prev": ZERO_HASH, "kind": "run_end", "time": 5, "body": dict(BODY)}
    with pytest.raises(EncodingError):
        Entry(**{**fields, **changes}).to_bytes()


def test_maps_out_of_canonical_order_are_refused():
    entry = Entry(seq=0, prev=ZERO_HASH, kind="run_end", time=5, body=dict(BODY))
    value = encoding.decode(entry.to_bytes())
    body_reversed = dict(reversed(list(value["body"].items())))
    top_reversed = dict(reversed(list(value.items())))
    for bad in ({**value, "body": body_reversed}, top_reversed):
        data = msgpack.packb(bad, use_bin_type=True)  # packed as given: not canonical
        with pytest.raises(EncodingError, match="order"):
            decode_entry(data)
