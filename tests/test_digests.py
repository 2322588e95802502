"""Arguments and output digests (RFC 8785 JCS + SHA-256, raw fallback)."""

import hashlib

import pytest
import rfc8785

from evidence_ledger.format import digests


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


def _written(output) -> bytes:
    pieces: list[bytes] = []
    digests.write_output(output, pieces.append)
    return b"".join(pieces)


def test_output_digest_string_is_utf8_and_structured_is_jcs():
    assert _written("ré\ud800") == "ré\ud800".encode("utf-8", "surrogatepass")
    assert _written([{"type": "text", "text": "x"}]) == b'[{"text":"x","type":"text"}]'
    for refused in ([float("nan")], {1: "x"}, {"x": {1, 2}}):
        with pytest.raises(ValueError):
            _written(refused)


def test_digest_text_round_trip():
    d = hashlib.sha256(b"x").digest()
    assert digests.from_text(digests.to_text(d)) == d
    with pytest.raises(ValueError):
        digests.from_text("sha256:abcd")


TRICKY = [
    None, True, False, 0, -0.0, 1e21, 1e-7, 2**53 - 1, 3.14, "", [], {},
    "".join(map(chr, range(0x80))) + "\u2028 é ✓ \U0001f600 \ud7ff \ue000",
    {"b": [1, {"é": None, "a": "x"}], "a": [], "\U0001f600": 1, "\ue000": 2, "": 0},
    [[[["deep"]]], ("tuple", 1)],
]


@pytest.mark.parametrize("chunk", [1, 3, digests.CHUNK_CHARS])
@pytest.mark.parametrize("value", TRICKY)
def test_streamed_jcs_equals_rfc8785_at_every_chunk_size(monkeypatch, value, chunk):
    monkeypatch.setattr(digests, "CHUNK_CHARS", chunk)
    pieces: list[bytes] = []
    digests.jcs_dump(value, pieces.append)
    assert b"".join(pieces) == rfc8785.dumps(value)
    assert digests.jcs_sha256(value) == hashlib.sha256(rfc8785.dumps(value)).digest()
    if isinstance(value, str) and len(value) > chunk:
        assert max(map(len, pieces)) <= 6 * chunk + 2  # streamed, not one piece


@pytest.mark.parametrize(
    "value", [2**53, {1: "non-string key"}, "lone \ud800", {"\udc00": 1}, object()]
)
def test_streamed_jcs_refuses_what_rfc8785_refuses(value):
    with pytest.raises(ValueError):  # CanonicalizationError, or UnicodeEncodeError for keys
        rfc8785.dumps(value)
    with pytest.raises(ValueError):
        digests.jcs_sha256(value)


def test_utf8_chunks_keep_lone_surrogates_like_surrogatepass():
    text = "a\ud83d\ude00b\U0001f600" * 5
    for chunk in (1, 2, 7, 100):
        joined = b"".join(digests.utf8_chunks(text, chunk))
        assert joined == text.encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("text", ['"\ud800"', '{"\ud800": 1}', "[1, \ud800]", '"\ud83d\ude00"'])
def test_literal_surrogates_are_digested_raw_as_str_and_bytes(text):
    raw = text.encode("utf-8", "surrogatepass")
    for given in (text, raw):
        d = digests.arguments_digest(given)
        assert d.form == "raw" and d.digest == hashlib.sha256(raw).digest()
        assert d.raw == raw


def test_the_cache_keeps_no_argument_alive():
    text = '{"k": "' + "v" * 100_000 + '"}'
    first = digests.arguments_digest(text)
    assert digests.arguments_digest(text.encode()) == first  # same raw bytes: same digest
    assert first.arguments is text
    assert not any(isinstance(v, (str, bytes)) and len(v) > 64
                   for key, value in digests._cache.items() for v in (key, *value))
