"""Canonical MessagePack: one value, one byte form; everything else refused (decoding on both
cores where the native one is built: the ``core`` fixture)."""

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evidence_ledger.format import encoding
from evidence_ledger.format.errors import EncodingError

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@pytest.mark.usefixtures("core")
@given(values)
def test_round_trip_is_identity(value):
    data = encoding.encode(value)
    assert encoding.decode(data) == value
    assert encoding.encode(encoding.decode(data)) == data


@pytest.mark.usefixtures("core")
def test_map_keys_sorted_by_encoded_bytes():
    # "b" (0xa1 0x62) sorts before "aa" (0xa2 ...) because the length prefix comes first
    assert list(encoding.decode(encoding.encode({"aa": 1, "b": 2}))) == ["b", "aa"]


@pytest.mark.usefixtures("core")
@pytest.mark.parametrize(
    "data, why",
    [
        (msgpack.packb({"b": 1, "a": 2}), "unsorted keys"),
        (b"\x82\xa1a\x01\xa1a\x02", "duplicate keys"),
        (b"\xcd\x00\x01", "integer 1 in a 16-bit form"),
        (msgpack.packb(1.5), "float"),
        (b"\xd4\x01\x00", "extension type"),
        (b"\x01\x02", "trailing bytes"),
        (b"\x92\x01", "truncated array"),
        (b"", "empty input"),
        (b"\xa2\xff\xfe", "invalid UTF-8"),
        (b"\x81\x01\x02", "integer map key"),
    ],
)
def test_non_canonical_refused(data, why):
    with pytest.raises(EncodingError):
        encoding.decode(data)


def _nested(depth):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value", [1.0, {1: 2}, 2**64, -(2**63) - 1, object(), _nested(encoding.MAX_DEPTH + 2)]
)
def test_encode_refuses(value):
    with pytest.raises(EncodingError):
        encoding.encode(value)


@pytest.mark.usefixtures("core")
@pytest.mark.parametrize("depth", [encoding.MAX_DEPTH + 1, 40, 500])
def test_decode_refuses_what_encode_refuses_for_depth(depth):
    # deeper than MAX_DEPTH but within msgpack's own limit: decoded, then not re-encodable
    data = b"\x91" * depth + b"\xc0"
    with pytest.raises(EncodingError, match=f"nesting deeper than {encoding.MAX_DEPTH} levels"):
        encoding.decode(data)


@pytest.mark.usefixtures("core")
def test_decode_takes_the_deepest_value_encode_makes():
    value = _nested(encoding.MAX_DEPTH - 1)
    assert encoding.decode(encoding.encode(value)) == value


@pytest.mark.usefixtures("core")
def test_deep_nesting_refused_without_crash():
    data = b"\x91" * 100_000 + b"\xc0"
    with pytest.raises(EncodingError):
        encoding.decode(data)


def test_the_reused_packer_holds_nothing_back_after_a_value_it_refused():
    too_deep: list = []
    inner = too_deep
    for _ in range(2000):  # deeper than msgpack's own limit
        inner.append([])
        inner = inner[0]
    for refused in (too_deep, 2**70):
        with pytest.raises((ValueError, OverflowError)):
            encoding._pack(refused)
        assert encoding.encode({"k": 1}) == msgpack.packb({"k": 1}, use_bin_type=True)


@pytest.mark.usefixtures("core")
def test_bytes_msgpack_refuses_without_a_message_are_named():
    # before: "not a MessagePack value: " (msgpack's FormatError has no message)
    with pytest.raises(EncodingError, match=r"^not a MessagePack value: FormatError$"):
        encoding.decode(b"\xc1")
