"""Hostile input: every parser of ours answers with our own errors, never a crash."""

import contextlib
import json
import tempfile
from pathlib import Path

from evidence_ledger.format.entries import decode_entry
from evidence_ledger.format.errors import EncodingError, IngestError
from evidence_ledger.format.framing import frame, scan_bytes
from evidence_ledger.record.ingest import parse_events
from evidence_ledger.verify.records import verify_records
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing import FUZZ
from tests.helpers import DATA, run_cli

VALID_LINES = (DATA / "rules" / "valid.jsonl").read_bytes().splitlines()


def _mutate(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for position, value in edits:
        if out:
            out[position % len(out)] = value
    return bytes(out)


edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4)


@FUZZ
@given(st.binary(max_size=512))
def test_entry_decoder_random_bytes(data):
    with contextlib.suppress(EncodingError):
        decode_entry(data)


@FUZZ
@given(st.binary(max_size=4096))
def test_verifier_random_logs(data):
    report = verify_records(scan_bytes(data))
    assert report.tree_size >= 0


@FUZZ
@given(st.lists(st.binary(max_size=300), max_size=6), st.booleans())
def test_verifier_well_framed_garbage(records, more):
    log = b"".join(frame(r, more and i == 0) for i, r in enumerate(records))
    report = verify_records(scan_bytes(log))
    assert report.ok == (not records) or not report.ok or report.tree_size == 0


@FUZZ
@given(st.binary(max_size=2048))
def test_ingest_parser_random_bytes(data):
    try:
        parse_events(data)
    except IngestError as exc:
        assert exc.line >= 0


@FUZZ
@given(st.lists(st.sampled_from(VALID_LINES), min_size=1, max_size=8), edits)
def test_ingest_parser_mutated_lines(lines, changes):
    data = _mutate(b"\n".join(lines), changes)
    try:
        for _, event in parse_events(data):
            assert isinstance(event, dict) and "kind" in event
    except IngestError:
        pass


@FUZZ
@given(st.lists(st.sampled_from(VALID_LINES), min_size=1, max_size=4), edits)
def test_cli_ingest_then_verify_never_crashes(lines, changes):
    with tempfile.TemporaryDirectory() as tmp:
        _ingest_and_verify(Path(tmp), _mutate(b"\n".join(lines), changes))


def _ingest_and_verify(ledger: Path, data: bytes) -> None:
    events = ledger / "events.jsonl"
    events.write_bytes(data)
    result = run_cli("ingest", str(events), "--ledger", str(ledger / "book"))
    assert result.code in (0, 2) and "Traceback" not in result.err, result.err
    if result.code == 0:
        verdict = run_cli("verify", "--ledger", str(ledger / "book"), "--json")
        assert verdict.code in (0, 1) and json.loads(verdict.out)["tree_size"] > 0


@FUZZ
@given(st.binary(max_size=2048))
def test_cli_verify_random_log_file(tmp_path, data):
    ledger = tmp_path
    (ledger / "log.bin").write_bytes(data)
    result = run_cli("verify", "--ledger", str(ledger), "--json")
    assert result.code in (0, 1) and "Traceback" not in result.err
    json.loads(result.out)


def test_hostile_cases_named_by_the_issue(tmp_path):
    cases = {
        "empty": b"",
        "random": bytes(range(256)) * 4,
        "truncated msgpack": b"\x87\xa1v\x01\xa3seq",
        "non-utf8": b'{"kind": "run_end", "status": "\xff\xfe"}',
        "nan": b'{"kind":"call","agent":"a","tool":"t","call_id":"c","arguments":{"x":NaN}}',
        "duplicate keys": b'{"kind":"run_end","status":"completed","status":"failed"}',
        "overflowing number": b'{"kind":"execution","call_id":"c","arguments":"{}",'
                              b'"result":1e400}',
        "deep": b"[" * 100_000 + b"]" * 100_000,
    }
    for name, data in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(data)
        result = run_cli("ingest", str(path), "--ledger", str(tmp_path / "l"))
        assert result.code == 2 and result.err.count("\n") == 1, (name, result.err)
        try:
            decode_entry(data)
        except EncodingError:
            pass
        else:
            raise AssertionError(name)
        (tmp_path / "v").mkdir(exist_ok=True)
        (tmp_path / "v" / "log.bin").write_bytes(data)
        assert run_cli("verify", "--ledger", str(tmp_path / "v")).code in (0, 1)
