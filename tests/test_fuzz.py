"""Hostile input: every parser of ours answers with our own errors, never a crash, and each
input class gets the one answer it must: what decodes re-encodes to the same bytes, what
does not raises exactly the documented error, and the verifier counts exactly the
entries in front of the damage."""

import functools
import hashlib
import io
import json
import tempfile
import zlib
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from benchmarks import fuzz_table
from evidence_ledger.format import encoding
from evidence_ledger.format.entries import decode_entry
from evidence_ledger.format.errors import EncodingError, IngestError
from evidence_ledger.format.framing import Record, frame, scan_bytes
from evidence_ledger.record.ingest import ingest_file, read_events
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.findings import INTEGRITY, Finding
from evidence_ledger.verify.records import verify_records
from tests.fuzzing import FUZZ
from tests.helpers import DATA, run_cli
from tests.test_proofs import naive_mth

VALID_LINES = (DATA / "rules" / "valid.jsonl").read_bytes().splitlines()
HEADER = 8
"""Bytes of a frame header (length word and its CRC-32)."""


def _mutate(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for position, value in edits:
        if out:
            out[position % len(out)] = value
    return bytes(out)


edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4)


@functools.cache
def _valid_records() -> tuple[bytes, ...]:
    """The entry bytes of a ledger that ingested ``valid.jsonl``: 24 events, then the
    ``ingest`` entry. Framed one group each, every prefix verifies with no violation and
    no notice."""
    with tempfile.TemporaryDirectory() as tmp:
        ingest_file(EvidenceWriter(Path(tmp)), DATA / "rules" / "valid.jsonl")
        items = list(Ledger(tmp).scan())
    assert all(isinstance(i, Record) and i.crc_ok for i in items) and len(items) == 25
    return tuple(i.data for i in items if isinstance(i, Record))


def _root(records: list[bytes] | tuple[bytes, ...]) -> bytes:
    """RFC 9162 root of ``records`` as leaves, by the naive recursive definition."""
    return naive_mth([hashlib.sha256(b"\x00" + r).digest() for r in records])


def _header_checks(data: bytes) -> bool:
    """Whether ``data`` starts with a frame header whose CRC-32 holds (for random bytes,
    a 2^-32 chance; the well-framed tests below cover that class)."""
    return len(data) >= HEADER and zlib.crc32(data[:4]) == int.from_bytes(data[4:8], "big")


def _torn_tail(length: int, offset: int, entries: int) -> str:
    """The start of the verifier's notice for a torn tail after ``entries`` entries."""
    after = f"after seq {entries - 1}" if entries else "before the first entry"
    return f"torn tail: {length} bytes at offset {offset}, {after} (a crash mid-append"


def _bad_header(seq: int, offset: int) -> Finding:
    return Finding(INTEGRITY, seq, "frame header fails its CRC-32; nothing after offset "
                                   f"{offset} can be read")


# -- the entry decoder: decodes to the same bytes, or raises EncodingError -------------


def _check_entry_decoder(data: bytes) -> None:
    try:
        entry = decode_entry(data)
    except EncodingError as exc:
        assert type(exc) is EncodingError, repr(exc)  # the documented type, not a subclass
        return
    assert entry.to_bytes() == data
    assert encoding.encode(encoding.decode(data)) == data  # canonical to the generic decoder


@FUZZ
@given(st.binary(max_size=512))
def test_entry_decoder_random_bytes(data):
    _check_entry_decoder(data)


@FUZZ
@given(st.integers(0, 10_000), edits)
def test_entry_decoder_mutated_entries(pick, changes):
    # a byte changed in a string or a hash keeps the entry decodable: the round trip is
    # then checked on bytes the encoder never wrote
    records = _valid_records()
    _check_entry_decoder(_mutate(records[pick % len(records)], changes))


def test_entry_decoder_round_trips_every_valid_entry():
    for data in _valid_records():
        assert decode_entry(data).to_bytes() == data


def test_entry_decoder_refuses_a_body_with_an_integer_key():
    # found by test_entry_decoder_mutated_entries (a key's str header turned into an int):
    # the message listing the body's keys sorted int and str together, a TypeError
    data = msgpack.packb({"v": 1, "seq": 0, "body": {1: "x", "run_id": "r"}, "kind": "run_end",
                          "prev": bytes(32), "refs": [], "time": 0}, use_bin_type=True)
    with pytest.raises(EncodingError, match="run_end body fields") as caught:
        decode_entry(data)
    assert type(caught.value) is EncodingError


# -- the verifier over logs: exactly the entries in front of the damage ------------------


def _log_notices(report: Any) -> list[str]:
    """The report's notices about the log itself (a prefix of a good ledger may also hold
    a run whose session items come later: the rules' notice about it is left out)."""
    return [n for n in report.notices if "persisted no session item" not in n]


@FUZZ
@given(st.integers(0, 25), st.binary(max_size=4096))
def test_verifier_random_bytes_after_good_entries(entries, garbage):
    """Random bytes after ``entries`` good ones: exactly those entries are leaves, and the
    bytes are nothing (empty), a torn tail (shorter than a frame header, or all zeros), or
    damage at seq ``entries`` (a frame header that fails its CRC-32)."""
    assume(not _header_checks(garbage))
    records = _valid_records()[:entries]
    prefix = b"".join(frame(r, False) for r in records)
    report = verify_records(scan_bytes(prefix + garbage))
    assert report.tree_size == entries
    assert report.root_hash == _root(records)
    if not garbage:
        assert (report.violations, _log_notices(report)) == ([], [])
    elif len(garbage) < HEADER or not garbage.strip(b"\x00"):
        assert report.violations == []
        (notice,) = _log_notices(report)
        assert notice.startswith(_torn_tail(len(garbage), len(prefix), entries)), notice
    else:
        assert report.violations == [_bad_header(entries, len(prefix))]
        assert _log_notices(report) == []


@FUZZ
@given(st.lists(st.binary(max_size=300), max_size=6), st.booleans())
def test_verifier_well_framed_garbage(records, more):
    """Records whose frames all check but whose bytes are no entry: every complete group
    is read, each record a leaf and one ``entry does not decode`` finding at its seq."""
    errors = []
    for data in records:
        try:
            decode_entry(data)
        except EncodingError as exc:
            errors.append(str(exc))
    assume(len(errors) == len(records))  # random bytes that are an entry: never seen
    log = b"".join(frame(r, more and i == 0) for i, r in enumerate(records))
    report = verify_records(scan_bytes(log))
    if not records:
        assert (report.tree_size, report.violations, _log_notices(report)) == (0, [], [])
    elif more and len(records) == 1:  # its group never closes: a torn tail, not evidence
        assert (report.tree_size, report.violations) == (0, [])
        (notice,) = _log_notices(report)
        assert notice.startswith(_torn_tail(len(log), 0, 0)), notice
    else:
        assert report.tree_size == len(records)
        assert report.root_hash == _root(records)
        assert report.violations == [
            Finding(INTEGRITY, seq, f"entry does not decode: {error}")
            for seq, error in enumerate(errors)
        ]
        assert _log_notices(report) == []


@FUZZ
@given(st.lists(st.booleans(), max_size=25))
def test_verifier_good_entries_in_random_groups(more):
    """Good entries framed with random "more follows" flags: the entries up to the last
    closed group are leaves and verify; the open group after it is one torn tail."""
    records = _valid_records()[: len(more)]
    frames = [frame(r, m) for r, m in zip(records, more, strict=True)]
    closed = max((i + 1 for i, m in enumerate(more) if not m), default=0)
    report = verify_records(scan_bytes(b"".join(frames)))
    assert report.tree_size == closed
    assert report.root_hash == _root(records[:closed])
    assert report.violations == []
    if closed == len(more):
        assert _log_notices(report) == []
    else:
        start = sum(map(len, frames[:closed]))
        length = sum(map(len, frames[closed:]))
        (notice,) = _log_notices(report)
        assert notice.startswith(_torn_tail(length, start, closed)), notice


# -- the ingest parser: every event back, or the first failing line named -----------------


def parse_events(data: bytes) -> list[tuple[int, dict[str, Any]]]:
    """Every (line number, event) of JSONL ``data``, as ingest reads them."""
    return list(read_events(io.BytesIO(data)))


def _check_parse(data: bytes) -> None:
    lines = data.split(b"\n")
    try:
        events = parse_events(data)
    except IngestError as exc:
        assert type(exc) is IngestError, repr(exc)
        number = exc.line
        assert 1 <= number <= len(lines), number
        problem = str(exc).removeprefix(f"line {number}: ")
        assert problem != str(exc), str(exc)
        parse_events(b"\n".join(lines[: number - 1]))  # every line before it passes...
        with pytest.raises(IngestError) as alone:  # ...and it fails alone, for the same reason
            parse_events(lines[number - 1])
        assert (alone.value.line, str(alone.value)) == (1, f"line 1: {problem}")
        return
    assert [n for n, _ in events] == [n for n, raw in enumerate(lines, 1) if raw.strip()]
    for number, event in events:
        assert event == json.loads(lines[number - 1].decode("utf-8"))
        assert isinstance(event["kind"], str)


@FUZZ
@given(st.binary(max_size=2048))
def test_ingest_parser_random_bytes(data):
    _check_parse(data)


@FUZZ
@given(st.lists(st.sampled_from(VALID_LINES), min_size=1, max_size=8), edits)
def test_ingest_parser_mutated_lines(lines, changes):
    _check_parse(_mutate(b"\n".join(lines), changes))


# -- the CLI ----------------------------------------------------------------------------


@FUZZ
@given(st.lists(st.sampled_from(VALID_LINES), min_size=1, max_size=4), edits)
def test_cli_ingest_then_verify_never_crashes(lines, changes):
    with tempfile.TemporaryDirectory() as tmp:
        _ingest_and_verify(Path(tmp), _mutate(b"\n".join(lines), changes))


def _ingest_and_verify(tmp: Path, data: bytes) -> None:
    """Ingest refuses what the parser refuses (exit 2, its message, nothing written);
    what it takes verifies with no integrity finding, exit 1 only for a rule's finding."""
    events, book = tmp / "events.jsonl", tmp / "book"
    events.write_bytes(data)
    result = run_cli("ingest", str(events), "--ledger", str(book))
    try:
        parsed = parse_events(data)
    except IngestError as exc:
        refusal: str | None = str(exc)
    else:
        refusal = None if parsed else f"{events}: no events"
    if refusal is not None:
        assert (result.code, result.err) == (2, f"evidence-ledger: error: {refusal}\n")
        assert not book.exists()
        return
    assert (result.code, result.err) == (0, "")
    verdict = run_cli("verify", "--ledger", str(book), "--json")
    report = json.loads(verdict.out)
    assert report["tree_size"] == len(parsed) + 1  # the events, then the ingest entry
    expected = verify_records(Ledger(book).scan())
    assert report["violations"] == [v.to_json() for v in expected.violations]
    assert INTEGRITY not in {v["rule"] for v in report["violations"]}
    assert verdict.code == (1 if report["violations"] else 0), verdict.err


@FUZZ
@given(st.binary(max_size=2048))
def test_cli_verify_random_log_file(tmp_path, data):
    assume(not _header_checks(data))
    (tmp_path / "log.bin").write_bytes(data)
    result = run_cli("verify", "--ledger", str(tmp_path), "--json")
    assert result.err == ""
    report = json.loads(result.out)
    assert report["tree_size"] == 0
    findings = [(v["rule"], v["seq"], v["detail"]) for v in report["violations"]]
    torn = [n for n in report["notices"] if n.startswith("torn tail")]
    if not data:
        assert (result.code, findings, torn) == (0, [], [])
    elif len(data) < HEADER or not data.strip(b"\x00"):
        assert (result.code, findings) == (0, [])
        (notice,) = torn
        assert notice.startswith(_torn_tail(len(data), 0, 0)), notice
    else:
        bad = _bad_header(0, 0)
        assert (result.code, findings, torn) == (1, [(bad.rule, bad.seq, bad.detail)], [])


HOSTILE = {  # name: (bytes, exit code of verify with them as log.bin)
    "empty": (b"", 0),
    "random": (bytes(range(256)) * 4, 1),
    "truncated msgpack": (b"\x87\xa1v\x01\xa3seq", 1),
    "non-utf8": (b'{"kind": "run_end", "status": "\xff\xfe"}', 1),
    "nan": (b'{"kind":"call","agent":"a","tool":"t","call_id":"c","arguments":{"x":NaN}}', 1),
    "duplicate keys": (b'{"kind":"run_end","status":"completed","status":"failed"}', 1),
    "overflowing number": (b'{"kind":"execution","call_id":"c","arguments":"{}",'
                           b'"result":1e400}', 1),
    "deep": (b"[" * 100_000 + b"]" * 100_000, 1),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_cases_named_by_the_issue(tmp_path, name):
    data, verdict = HOSTILE[name]
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(data)
    result = run_cli("ingest", str(path), "--ledger", str(tmp_path / "l"))
    assert result.code == 2 and result.err.count("\n") == 1, (name, result.err)
    with pytest.raises(EncodingError) as caught:
        decode_entry(data)
    assert type(caught.value) is EncodingError
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "log.bin").write_bytes(data)
    checked = run_cli("verify", "--ledger", str(tmp_path / "v"))
    assert checked.code == verdict, (checked.out, checked.err)
    if verdict:  # none of them starts with a frame header that checks
        assert "frame header fails its CRC-32" in checked.out and "FAIL" in checked.out
    else:
        assert "OK" in checked.out


@pytest.mark.parametrize("parser", sorted(fuzz_table.PARSERS))
def test_every_parser_answers_mutated_input_with_its_own_errors(parser):
    """``make fuzz``'s table at 10^5 inputs per parser; here 500: no internal error, no
    hang (benchmarks/fuzz_table.py)."""
    row = fuzz_table.worker(parser, 500, seed=7)
    assert (row["internal"], row["hangs"]) == (0, 0), row["first"]
