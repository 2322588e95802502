"""The append-only log: framing, atomic groups, torn tails, tampering, two writers."""

import tracemalloc

import pytest

from evidence_ledger.format import framing
from evidence_ledger.format.errors import EvidenceError
from evidence_ledger.format.framing import TornTail
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.log_store import LOG_NAME
from evidence_ledger.verify.audit import verify_ledger
from tests.helpers import ingest, rewrite_payload, run_cli, stored_payloads


def _ledger(tmp_path, entries=5):
    writer = EvidenceWriter(tmp_path)
    for i in range(entries):
        writer.run_end(run_id=f"r{i}", status="completed")
    return writer


def test_entries_are_chained_and_contiguous(tmp_path):
    _ledger(tmp_path)
    entries = list(Ledger(tmp_path).entries())
    assert [e.seq for e, _ in entries] == list(range(5))
    assert all(entries[i + 1][0].prev == entries[i][1] for i in range(4))


def test_two_writers_interleave_without_gaps(tmp_path):
    a, b = EvidenceWriter(tmp_path), EvidenceWriter(tmp_path)
    for i in range(6):
        (a if i % 2 else b).run_end(run_id=f"r{i}", status="completed")
    report = verify_ledger(Ledger(tmp_path))
    assert report.ok and report.tree_size == 6


def test_failed_group_appends_nothing(tmp_path):
    writer = _ledger(tmp_path, 2)
    with pytest.raises(RuntimeError), writer.atomic():
        writer.run_end(run_id="x", status="completed")
        raise RuntimeError("producer died mid-group")
    assert verify_ledger(Ledger(tmp_path)).tree_size == 2
    writer.run_end(run_id="y", status="completed")
    assert [e.body["run_id"] for e, _ in Ledger(tmp_path).entries()] == ["r0", "r1", "y"]


@pytest.mark.parametrize("cut", [1, 5, 11, 20])
def test_torn_tail_is_a_notice_then_cut_back_and_kept(tmp_path, cut):
    _ledger(tmp_path, 3)
    log = tmp_path / LOG_NAME
    good = log.read_bytes()
    EvidenceWriter(tmp_path).run_end(run_id="torn", status="failed")
    full = log.read_bytes()
    log.write_bytes(full[: len(good) + cut])  # a crash part-way through the 4th frame

    result = run_cli("verify", "--ledger", str(tmp_path))
    assert result.code == 0, result.out
    assert "torn tail" in result.out
    assert log.read_bytes() == full[: len(good) + cut]  # readers never write

    EvidenceWriter(tmp_path).run_end(run_id="next", status="completed")
    assert [e.body["run_id"] for e, _ in Ledger(tmp_path).entries()] == ["r0", "r1", "r2", "next"]
    kept = list((tmp_path / "torn").iterdir())
    assert len(kept) == 1 and kept[0].read_bytes() == full[len(good) : len(good) + cut]
    assert verify_ledger(Ledger(tmp_path)).ok


def test_unfinished_group_is_torn_not_half_applied(tmp_path):
    writer = _ledger(tmp_path, 1)
    size_before = (tmp_path / LOG_NAME).stat().st_size
    with writer.atomic():
        for i in range(3):
            writer.run_end(run_id=f"g{i}", status="completed")
    data = (tmp_path / LOG_NAME).read_bytes()
    # drop the group's last frame entirely: the first two frames say "more follows"
    frames = list(Ledger(tmp_path).scan())
    assert frames[1].offset == size_before
    (tmp_path / LOG_NAME).write_bytes(data[: frames[-1].offset])
    items = list(Ledger(tmp_path).scan())
    assert isinstance(items[-1], TornTail) and items[-1].records == 2
    assert verify_ledger(Ledger(tmp_path)).tree_size == 1


def test_zero_filled_tail_is_torn(tmp_path):
    _ledger(tmp_path, 2)
    with open(tmp_path / LOG_NAME, "ab") as fh:
        fh.write(bytes(64))
    report = verify_ledger(Ledger(tmp_path))
    assert report.ok and report.tree_size == 2 and "torn tail" in report.notices[0]


@pytest.mark.parametrize("last", [b"\0", b"\1"], ids=["zero-tail", "garbage-at-its-end"])
def test_a_large_tail_after_a_bad_header_is_read_in_bounded_memory(tmp_path, last):
    _ledger(tmp_path, 2)
    size = (tmp_path / LOG_NAME).stat().st_size
    with open(tmp_path / LOG_NAME, "r+b") as fh:  # sparse: 64 MiB of zeros, cheap to make
        fh.truncate(size + (64 << 20))
        fh.seek(size + (64 << 20) - 1)
        fh.write(last)
    tracemalloc.start()
    try:
        items = list(Ledger(tmp_path).scan())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * framing.READ_SIZE, peak  # a few reads; was the whole tail, twice over
    assert [type(i).__name__ for i in items] == ["Record", "Record"] + (
        ["TornTail"] if last == b"\0" else ["Damage"])


def test_every_flipped_byte_is_an_integrity_violation_with_its_seq(tmp_path):
    ingest(tmp_path, "approval_binding")
    log = tmp_path / LOG_NAME
    original = log.read_bytes()
    frames = [(r.offset, r.end, r.index) for r in Ledger(tmp_path).scan()]
    for position in range(len(original)):
        tampered = bytearray(original)
        tampered[position] ^= 0x01
        log.write_bytes(bytes(tampered))
        report = verify_ledger(Ledger(tmp_path))
        seq = next(index for start, end, index in frames if start <= position < end)
        integrity = [v for v in report.violations if v.rule == "integrity"]
        assert integrity and integrity[0].seq == seq, (position, report.violations)
    log.write_bytes(original)
    assert {v.rule for v in verify_ledger(Ledger(tmp_path)).violations} == {"approval_binding"}


def test_writer_refuses_a_damaged_log(tmp_path):
    _ledger(tmp_path, 3)
    log = tmp_path / LOG_NAME
    data = bytearray(log.read_bytes())
    data[20] ^= 0xFF
    log.write_bytes(bytes(data))
    with pytest.raises(EvidenceError, match="damaged at seq 0"):
        EvidenceWriter(tmp_path).run_end(run_id="x", status="completed")
    assert log.read_bytes() == bytes(data)


def test_changed_payload_is_an_integrity_violation(tmp_path):
    ingest(tmp_path)
    digest, data = next(iter(stored_payloads(tmp_path).items()))
    rewrite_payload(tmp_path, digest, b"!" * len(data))
    result = run_cli("verify", "--ledger", str(tmp_path), "--json")
    assert result.code == 1 and '"integrity"' in result.out


def test_a_changed_payload_finding_names_its_digest_and_the_call(tmp_path):
    # before: "payload args_payload does not match its digest", with no digest and no call
    # (a trial user's note): an auditor could not tell which payload or call it was
    ingest(tmp_path)
    call = next(e for e, _ in Ledger(tmp_path).entries() if e.kind == "call")
    digest = call.body["args_payload"]
    rewrite_payload(tmp_path, digest, b"!" * len(stored_payloads(tmp_path)[digest]))
    report = verify_ledger(Ledger(tmp_path))
    found = [v for v in report.violations if v.seq == call.seq]
    assert [v.rule for v in found] == ["integrity"]
    assert found[0].detail == (
        f"payload args_payload sha256:{digest.hex()} of call {call.body['call_id']} (run "
        f"{call.body['run_id']}) does not match its digest")


def test_a_payload_deleted_without_a_redaction_is_a_violation(tmp_path):
    ingest(tmp_path)
    digest = next(iter(stored_payloads(tmp_path)))
    assert Ledger(tmp_path).payloads.remove(digest)  # no redaction entry
    report = verify_ledger(Ledger(tmp_path))
    assert [v.rule for v in report.violations] == ["payload_missing"]
    assert digest.hex() in report.violations[0].detail
    assert verify_ledger(Ledger(tmp_path), payloads=False).ok


@pytest.mark.parametrize("read_size", [1, 5, 13, 64])
def test_scan_reads_the_same_items_whatever_its_read_size(tmp_path, monkeypatch, read_size):
    writer = _ledger(tmp_path, 3)
    with writer.atomic():
        for i in range(3):
            writer.run_end(run_id=f"g{i}", status="completed")
    whole = (tmp_path / LOG_NAME).read_bytes()
    damaged = bytearray(whole)
    damaged[len(whole) // 2] ^= 0xFF
    variants = [whole, whole[:-7], whole + bytes(40), bytes(damaged), whole[:-20] + bytes(9)]
    for data in variants:
        expected = list(framing.scan_bytes(data))
        monkeypatch.setattr(framing, "READ_SIZE", read_size)
        assert list(framing.scan_bytes(data)) == expected
        monkeypatch.undo()
    assert len([r for r in framing.scan_bytes(whole) if isinstance(r, framing.Record)]) == 6
