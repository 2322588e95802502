"""Entries: canonical bytes, strict field checks, the JSON Schemas kept in step."""

import json
from pathlib import Path

import pytest

from ledger import encoding
from ledger.entries import BODY_FIELDS, ZERO_HASH, Entry, decode_entry
from ledger.errors import EncodingError

SCHEMAS = Path(__file__).parent.parent / "schemas" / "entry-bodies"
BODY = {"run_id": "r", "scope": [], "status": "completed"}


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
