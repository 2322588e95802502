"""Arguments and output digests (RFC 8785 JCS + SHA-256, raw fallback)."""

import hashlib

import pytest

from ledger import digests


def test_whitespace_and_key_order_do_not_change_the_digest():
    a = digests.arguments_digest('{"b": 2, "a": [1, 2.50]}')
    b = digests.arguments_digest('{"a":[1,2.5],"b":2}')
    assert a.form == b.form == "jcs"
    assert a.digest == b.digest == hashlib.sha256(b'{"a":[1,2.5],"b":2}').digest()
    assert a.raw != b.raw


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',  # duplicate keys: json keeps the last, rfc8785 would too
        '{"a": NaN}',
        '{"a": Infinity}',
        "not json",
        '{"a": 1',
        '{"big": 1e400}',
    ],
)
def test_non_strict_json_is_digested_raw(text):
    d = digests.arguments_digest(text)
    assert d.form == "raw"
    assert d.digest == hashlib.sha256(text.encode()).digest()


def test_deep_nesting_is_digested_raw():
    text = "[" * 100_000 + "]" * 100_000
    assert digests.arguments_digest(text).form == "raw"


def test_output_digest_string_is_utf8_and_structured_is_jcs():
    assert digests.output_bytes("ré") == "ré".encode()
    assert digests.output_bytes([{"type": "text", "text": "x"}]) == b'[{"text":"x","type":"text"}]'


def test_digest_text_round_trip():
    d = hashlib.sha256(b"x").digest()
    assert digests.from_text(digests.to_text(d)) == d
    with pytest.raises(ValueError):
        digests.from_text("sha256:abcd")
