"""Payload segments (ledger format version 2, FORMAT.md): what a new ledger writes, how a
redaction erases a payload in place, and how readers and writers treat a torn tail, a
segment that is not a regular file, and a lost or damaged location map."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage import segments
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.segment_store import SegmentStore
from tests.helpers import rewrite_payload, run_cli, stored_payloads

SECRET = '{"password": "hunter2-hunter2"}'


def _recorded(book: Path, calls: int = 3) -> bytes:
    """A new ledger with ``calls`` calls, the first with :data:`SECRET`; its digest."""
    writer = EvidenceWriter(Ledger(book))
    for n in range(calls):
        writer.call(run_id="r", call_id=f"c{n}", agent="a", tool="t",
                    arguments=SECRET if n == 0 else json.dumps({"n": n}))
        writer.execution(run_id="r", call_id=f"c{n}", agent="a", tool="t",
                         arguments=SECRET if n == 0 else json.dumps({"n": n}), result=f"r{n}")
    return hashlib.sha256(SECRET.encode()).digest()


def _segment(book: Path, number: int = 1) -> Path:
    return book / "payloads" / "segments" / segments.segment_name(number)


def _verify(book: Path) -> tuple[int, dict]:
    result = run_cli("verify", "--ledger", str(book), "--json")
    return result.code, json.loads(result.out) if result.out else {}


def _every_file_holding(book: Path, data: bytes) -> list[Path]:
    return [p for p in book.rglob("*") if p.is_file() and data in p.read_bytes()]


def test_a_new_ledger_is_version_2_with_one_segment_and_no_payload_files(tmp_path: Path) -> None:
    _recorded(tmp_path)
    assert (tmp_path / "format").read_text() == "2\n"
    names = {p.name for p in (tmp_path / "payloads").iterdir()}
    assert {"locations.sqlite", "segments"} <= names  # no payload file, no shard folder
    assert names <= {"locations.sqlite", "locations.sqlite-shm", "locations.sqlite-wal",
                     "segments"}
    assert [p.name for p in (tmp_path / "payloads" / "segments").iterdir()] == ["00000001.seg"]
    assert len(stored_payloads(tmp_path)) == 6  # arguments shared by call and execution
    code, report = _verify(tmp_path)
    assert code == 0 and report["ok"] and not any("did not write" in n
                                                  for n in report["notices"])


def test_each_record_is_self_describing_and_the_map_is_rebuilt_from_the_segments(
        tmp_path: Path) -> None:
    digest = _recorded(tmp_path)
    raw = _segment(tmp_path).read_bytes()
    head = segments.parse_header(raw[:segments.HEADER_SIZE], 0)
    assert head is not None and head.state == segments.STORED
    assert raw[segments.HEADER_SIZE:head.end] == SECRET.encode() and head.digest == digest
    (tmp_path / "payloads" / "locations.sqlite").write_bytes(b"not a database at all")
    for companion in ("-wal", "-shm"):
        (tmp_path / "payloads" / f"locations.sqlite{companion}").unlink(missing_ok=True)
    assert Ledger(tmp_path).payloads.get(digest) == SECRET.encode()
    assert _verify(tmp_path)[0] == 0
    (tmp_path / "payloads" / "locations.sqlite").unlink()
    assert _verify(tmp_path)[0] == 0


def test_a_map_that_names_a_record_the_segment_does_not_hold_is_rebuilt(tmp_path: Path) -> None:
    digest = _recorded(tmp_path)
    store = Ledger(tmp_path).payloads
    assert isinstance(store, SegmentStore)
    store.map.add([(digest, 1, 12345, 10, 0)], (1, 0))  # a copy that is not there
    store.map._db.execute("DELETE FROM loc WHERE offset = 0")
    assert Ledger(tmp_path).payloads.get(digest) == SECRET.encode()
    assert _verify(tmp_path)[0] == 0


def test_redaction_overwrites_the_payload_in_its_segment(tmp_path: Path) -> None:
    digest = _recorded(tmp_path)
    assert _every_file_holding(tmp_path, SECRET.encode()) == [_segment(tmp_path)]
    done = run_cli("redact", "--ledger", str(tmp_path), "--digest", "sha256:" + digest.hex(),
                   "--reason", "erasure", "--json")
    assert done.code == 0 and json.loads(done.out)["erased"] is True, done.err
    assert _every_file_holding(tmp_path, SECRET.encode()) == []
    assert _every_file_holding(tmp_path, b"hunter2") == []
    code, report = _verify(tmp_path)
    assert code == 0 and any("1 payload(s) redacted" in n for n in report["notices"])
    shown = run_cli("show", digest.hex(), "--ledger", str(tmp_path))
    assert shown.code == 0 and "redacted" in shown.out
    assert run_cli("redact", "--ledger", str(tmp_path), "--digest", digest.hex(),
                   "--reason", "again").code == 2
    EvidenceWriter(Ledger(tmp_path)).call(run_id="r", call_id="again", agent="a", tool="t",
                                          arguments=SECRET)  # recorded anew: stored anew
    assert Ledger(tmp_path).payloads.get(digest) == SECRET.encode()


def test_a_redaction_cut_short_reads_as_being_erased_and_is_finished_by_running_it_again(
        tmp_path: Path) -> None:
    digest = _recorded(tmp_path)
    assert Ledger(tmp_path).payloads.scrub(digest)  # zeroed and synced, then the process died
    assert _every_file_holding(tmp_path, SECRET.encode()) == []
    code, report = _verify(tmp_path)
    assert code == 0, report["violations"]
    assert any("redaction cut short" in n and digest.hex() in n for n in report["notices"])
    state_at = segments.STATE_OFFSET  # the first record: the secret's
    with open(_segment(tmp_path), "r+b") as fh:
        fh.seek(state_at)
        fh.write(bytes([segments.STORED]))  # without its mark, zeros are a changed payload
    assert _verify(tmp_path)[0] == 1
    with open(_segment(tmp_path), "r+b") as fh:
        fh.seek(state_at)
        fh.write(bytes([segments.ERASING]))
    again = run_cli("redact", "--ledger", str(tmp_path), "--digest", digest.hex(), "--reason", "r")
    assert again.code == 0, again.err
    assert Ledger(tmp_path).payloads.get(digest) is None
    assert _verify(tmp_path)[0] == 0


def test_a_forged_erasing_mark_hides_no_tampered_payload(tmp_path: Path) -> None:
    digest = _recorded(tmp_path)
    rewrite_payload(tmp_path, digest, b'{"password": "changed-by-someone"}')
    with open(_segment(tmp_path), "r+b") as fh:
        fh.seek(segments.STATE_OFFSET)
        fh.write(bytes([segments.ERASING]))
    code, report = _verify(tmp_path)
    assert code == 1 and {v["rule"] for v in report["violations"]} == {"integrity"}


@pytest.mark.parametrize("tail", ["half-record", "zeros", "header-only"])
def test_a_torn_segment_tail_is_ignored_by_readers_and_cut_back_by_the_next_writer(
        tmp_path: Path, tail: str) -> None:
    _recorded(tmp_path)
    segment = _segment(tmp_path)
    size = segment.stat().st_size
    record = segments.header(hashlib.sha256(b"x" * 100).digest(), 100) + b"x" * 100
    torn = {"half-record": record[:80], "zeros": bytes(4096),
            "header-only": record[:segments.HEADER_SIZE]}[tail]
    with open(segment, "ab") as fh:  # a crash cut an append short: never acknowledged
        fh.write(torn)
    code, report = _verify(tmp_path)
    assert code == 0 and any(f"00000001.seg: records stop being readable at byte {size}: "
                             in n for n in report["notices"]), report["notices"]
    writer = EvidenceWriter(Ledger(tmp_path))
    writer.call(run_id="r", call_id="late", agent="a", tool="t", arguments='{"late": 1}')
    added = segments.HEADER_SIZE + len(b'{"late": 1}')
    assert segment.stat().st_size == size + added  # cut back, then appended
    (kept,) = (tmp_path / "torn").iterdir()  # the cut bytes, kept
    assert kept.name.startswith(f"seg-00000001-{size:012d}-") and kept.read_bytes() == torn
    assert Ledger(tmp_path).payloads.get(hashlib.sha256(b'{"late": 1}').digest())
    assert _verify(tmp_path)[0] == 0


def test_a_header_edited_to_claim_2_62_bytes_costs_no_payload_its_tail_is_kept(
        tmp_path: Path) -> None:
    _recorded(tmp_path, calls=12)
    segment = _segment(tmp_path)
    before = segment.read_bytes()
    payloads = stored_payloads(tmp_path)
    first = segments.parse_header(before[:segments.HEADER_SIZE], 0)
    assert first is not None and len(payloads) == 24
    with open(segment, "r+b") as fh:  # length 2^62, CRC recomputed: reads as a torn tail
        fh.write(segments.header(first.digest, 1 << 62))
    _, report = _verify(tmp_path)
    assert any("00000001.seg: records stop being readable at byte 0: a record runs past "
               "the end of the file" in n for n in report["notices"]), report["notices"]
    EvidenceWriter(Ledger(tmp_path)).call(run_id="r", call_id="late", agent="a", tool="t",
                                          arguments='{"late": 1}')  # the next writer
    (kept,) = (tmp_path / "torn").iterdir()
    assert kept.name.startswith("seg-00000001-000000000000-")
    assert kept.read_bytes()[segments.HEADER_SIZE:] == before[segments.HEADER_SIZE:]
    assert all(data in kept.read_bytes() for data in payloads.values())  # nothing dropped
    code, report = _verify(tmp_path)
    assert code == 1 and report["violations"]  # the payloads cut are reported, not hidden


def test_a_damaged_record_header_stops_appends_to_its_segment(tmp_path: Path) -> None:
    _recorded(tmp_path)
    segment = _segment(tmp_path)
    with open(segment, "ab") as fh:
        fh.write(b"garbage that is not a record header" * 3)
    writer = EvidenceWriter(Ledger(tmp_path))
    writer.call(run_id="r", call_id="late", agent="a", tool="t", arguments='{"late": 1}')
    assert _segment(tmp_path, 2).exists()  # nothing written after damage
    code, report = _verify(tmp_path)
    assert code == 0, report
    assert any("00000001.seg is damaged at byte" in n for n in report["notices"])


@pytest.mark.parametrize("kind", ["symlink", "fifo", "dev-zero"])
def test_a_segment_that_is_not_a_regular_file_is_never_read(tmp_path: Path, kind: str) -> None:
    book = tmp_path / "l"
    _recorded(book)
    segment = _segment(book)
    outside = tmp_path / "outside.seg"
    segment.rename(outside)
    if kind == "symlink":
        segment.symlink_to(outside)
    elif kind == "fifo":
        os.mkfifo(segment)
    else:
        segment.symlink_to("/dev/zero")
    (book / "payloads" / "locations.sqlite").unlink()
    code, report = _verify(book)
    assert code == 1, report
    assert {v["rule"] for v in report["violations"]} == {"payload_missing"}
    assert any("00000001.seg" in n and "not read" in n for n in report["notices"]), report
    before = outside.read_bytes()
    EvidenceWriter(Ledger(book)).call(run_id="r", call_id="late", agent="a", tool="t",
                                      arguments="{}")
    assert outside.read_bytes() == before  # nothing written through it


def test_segments_roll_over_and_every_payload_stays_readable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segments, "SEGMENT_BYTES", 300)
    _recorded(tmp_path, calls=8)
    names = sorted(p.name for p in (tmp_path / "payloads" / "segments").iterdir())
    assert len(names) >= 3 and names[0] == "00000001.seg"
    assert len(stored_payloads(tmp_path)) == 16
    (tmp_path / "payloads" / "locations.sqlite").unlink()
    assert len(stored_payloads(tmp_path)) == 16 and _verify(tmp_path)[0] == 0


def test_a_format_file_naming_an_unknown_version_is_refused(tmp_path: Path) -> None:
    _recorded(tmp_path)
    (tmp_path / "format").write_text("7\n")
    result = run_cli("verify", "--ledger", str(tmp_path))
    assert result.code == 1 and "names no format version this program reads" in result.err


def test_a_map_missing_a_row_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    digest = _recorded(tmp_path)
    with contextlib.closing(sqlite3.connect(tmp_path / "payloads" / "locations.sqlite")) as db:
        db.execute("DELETE FROM loc WHERE digest = ?", (digest,))
        db.commit()
    code, report = _verify(tmp_path)
    assert code == 0, report["violations"]
    shown = run_cli("show", digest.hex(), "--ledger", str(tmp_path))
    assert shown.code == 0 and "hunter2" in shown.out and "lost" not in shown.out, shown.out


@pytest.mark.parametrize("companion", ["", "-wal", "-shm", "-journal"])
def test_a_map_that_is_a_symbolic_link_is_never_followed(tmp_path: Path, companion: str) -> None:
    book = tmp_path / "l"
    _recorded(book)
    for suffix in ("", "-wal", "-shm", "-journal"):
        (book / "payloads" / f"locations.sqlite{suffix}").unlink(missing_ok=True)
    absent, existing = tmp_path / "created-outside", tmp_path / "existing-outside"
    existing.write_bytes(b"not yours")
    (book / "payloads" / f"locations.sqlite{companion}").symlink_to(absent)
    (book / "payloads" / "locations.sqlite-x").symlink_to(existing)  # not a companion: left
    if companion:
        (book / "payloads" / "locations.sqlite").symlink_to(existing)
    code, report = _verify(book)
    assert code == 0, report["violations"]
    assert not absent.exists() and existing.read_bytes() == b"not yours"
    assert not (book / "payloads" / f"locations.sqlite{companion}").is_symlink()


def test_a_redaction_refuses_when_a_damaged_header_may_hide_the_payload(tmp_path: Path) -> None:
    digest = _recorded(tmp_path)
    with open(_segment(tmp_path), "r+b") as fh:
        fh.seek(segments.HEADER_SIZE - 1)  # the first record's (the secret's) CRC-32
        byte = fh.read(1)
        fh.seek(segments.HEADER_SIZE - 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    (tmp_path / "payloads" / "locations.sqlite").unlink()
    size = (tmp_path / "log.bin").stat().st_size
    done = run_cli("redact", "--ledger", str(tmp_path), "--digest", "sha256:" + digest.hex(),
                   "--reason", "erasure")
    assert done.code == 1, (done.out, done.err)
    assert "00000001.seg is damaged at byte 0" in done.err and "run verify" in done.err
    assert len(done.err.strip().splitlines()) == 1
    assert (tmp_path / "log.bin").stat().st_size == size  # no redaction entry
