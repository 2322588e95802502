"""Deriving the index in two stages: records read and checked on their own (in line or in
a worker process of a standard pool), then derived in order. Wherever a chunk is checked,
the rows and the errors are the same, and a worker that fails to start, dies or stops
changes nothing but the speed."""

from __future__ import annotations

import os
import shutil
import signal
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from evidence_ledger.format.entries import entry_hash
from evidence_ledger.format.errors import EvidenceError
from evidence_ledger.format.framing import Record, scan_bytes
from evidence_ledger.index import build as index_mod
from evidence_ledger.index import worker as index_worker
from evidence_ledger.index.build import derive, update_index
from evidence_ledger.index.check import check_batch
from evidence_ledger.index.db import VIEWS
from evidence_ledger.index.worker import Checker, check_records, read_log_chunk
from evidence_ledger.record.ingest import ingest_file
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.merkle import leaf_hash
from tests.helpers import DATA
from tests.test_index import build_audit_ledger, table


@pytest.fixture(scope="module")
def audit(tmp_path_factory) -> Ledger:
    return build_audit_ledger(tmp_path_factory.mktemp("audit"))


def records_of(ledger: Ledger) -> list[Record]:
    return [r for r in ledger.scan() if isinstance(r, Record)]


class Pools:
    """Records every worker pool started, to check its processes are gone afterwards."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started: list[ProcessPoolExecutor] = []
        self.processes: list = []
        outer = self

        class Recorded(ProcessPoolExecutor):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                outer.started.append(self)

            def submit(self, *args, **kwargs):
                future = super().submit(*args, **kwargs)
                outer.processes += [p for p in self._processes.values()
                                    if p not in outer.processes]
                return future

        monkeypatch.setattr(index_worker, "ProcessPoolExecutor", Recorded)

    def all_stopped(self) -> bool:
        return all(not p.is_alive() for p in self.processes)


def no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    def cannot_start(*args, **kwargs):
        raise OSError("no interpreter to start")

    monkeypatch.setattr(index_worker, "ProcessPoolExecutor", cannot_start)


def checked_alike(batches: list[list[Record]]) -> float:
    """Submit every batch to a :class:`Checker`, then take the results: each must equal
    the batch checked in line. Returns the seconds it took."""
    started = time.monotonic()
    with Checker() as checker:
        for batch in batches:
            checker.submit(check_records, batch)
        assert [checker.result() for _ in batches] == [check_records(b) for b in batches]
    return time.monotonic() - started


def test_a_checked_batch_holds_each_records_hashes_bytes_and_rows(audit):
    records = records_of(audit)
    checked = check_batch(records[3:10])
    assert (checked.first, checked.count, checked.problem) == (3, 7, None)
    assert checked.hashes == b"".join(entry_hash(r.data) for r in records[3:10])
    assert checked.leaves == b"".join(leaf_hash(r.data) for r in records[3:10])
    assert sum(t.num_rows for t in checked.tables.values()) == 7
    assert sorted(s for t in checked.tables.values() for s in t["seq"].to_pylist()) == list(
        range(3, 10))
    assert checked.records == [r.data for r in records[3:10]]
    assert checked.blocks == [(3, records[3].offset)]
    assert (checked.last_offset, checked.end) == (records[9].offset, records[9].end)


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda r: r._replace(crc_ok=False), "log damaged at seq 5: record fails its CRC-32"),
        (lambda r: r._replace(data=r.data[:-1]), "log damaged at seq 5: not a MessagePack"),
    ],
)
def test_a_checked_batch_stops_at_the_first_record_that_fails(audit, damage, problem):
    records = records_of(audit)[2:9]
    records[3] = damage(records[3])
    checked = check_batch(records)
    assert checked.count == 3 and len(checked.hashes) == 3 * 32 and len(checked.records) == 3
    assert checked.problem is not None and checked.problem.startswith(problem)


def test_the_worker_reads_its_own_byte_range_of_the_log(audit, monkeypatch):
    # before: the updating process read every record and piped it to the worker
    pools = Pools(monkeypatch)
    records = records_of(audit)
    directory = str(audit.store.directory)
    with Checker() as checker:
        checker.submit(read_log_chunk, directory, records[4].offset, 4, 5)
        checker.submit(read_log_chunk, directory, records[20].offset, 20, 100)
        chunk, rest = checker.result(), checker.result()
    assert len(pools.started) == 1 and pools.all_stopped()
    assert chunk.more
    assert chunk.batch == check_batch(records[4:9]) and chunk.damage is None
    assert rest.batch == check_batch(records[20:]) and not rest.more


def test_the_worker_checks_what_the_line_checks(audit, monkeypatch):
    pools = Pools(monkeypatch)
    records = records_of(audit)
    checked_alike([records[i:i + 5] for i in range(0, len(records), 5)])
    assert len(pools.started) == 1 and pools.all_stopped()


def test_a_worker_that_cannot_start_is_replaced_by_checks_in_line(audit, monkeypatch):
    no_worker(monkeypatch)
    records = records_of(audit)
    checked_alike([records[i:i + 4] for i in range(0, len(records), 4)])


def test_a_worker_killed_midway_is_replaced_by_checks_in_line(audit, monkeypatch):
    pools = Pools(monkeypatch)
    records = records_of(audit)
    batches = [records[i:i + 4] for i in range(0, len(records), 4)]
    with Checker() as checker:
        for batch in batches:
            checker.submit(check_records, batch)
        results = [checker.result(), checker.result()]
        pools.processes[0].kill()
        results += [checker.result() for _ in batches[2:]]
    assert results == [check_records(b) for b in batches]
    assert pools.all_stopped()


def test_a_stopped_worker_is_replaced_by_checks_in_line(audit, monkeypatch):
    # a worker stopped with SIGSTOP must not hang the update for ever
    pools = Pools(monkeypatch)
    monkeypatch.setattr(index_worker, "STALL_SECONDS", 0.5)
    records = records_of(audit)
    batches = [records[i:i + 4] for i in range(0, 12, 4)]
    with Checker() as checker:
        checker.submit(check_records, batches[0])
        os.kill(pools.processes[0].pid, signal.SIGSTOP)
        for batch in batches[1:]:
            checker.submit(check_records, batch)
        started = time.monotonic()
        assert [checker.result() for _ in batches] == [check_records(b) for b in batches]
        assert time.monotonic() - started < 30
    assert pools.all_stopped()


def test_ctrl_c_while_the_worker_runs_stops_it(audit, monkeypatch):
    pools = Pools(monkeypatch)
    records = records_of(audit)
    with pytest.raises(KeyboardInterrupt), Checker() as checker:
        checker.submit(check_records, records[:4])
        raise KeyboardInterrupt
    assert len(pools.started) == 1 and pools.all_stopped()


def test_rows_are_the_same_with_and_without_a_worker(audit, monkeypatch):
    monkeypatch.setattr(index_mod, "CHUNK", 4)
    pools = Pools(monkeypatch)
    report, tables = derive(audit.scan())
    assert len(pools.started) == 1 and pools.all_stopped()
    no_worker(monkeypatch)
    report_in_line, tables_in_line = derive(audit.scan())
    assert report.root_hash == report_in_line.root_hash
    assert report.violations == report_in_line.violations
    for name in VIEWS:
        assert tables[name].equals(tables_in_line[name]), name


def _flip_crc_of(records: list[Record], seq: int, log: bytes) -> bytes:
    """The log with one byte of record ``seq`` flipped (its CRC-32 then fails)."""
    data = bytearray(log)
    data[records[seq].offset + 8] ^= 0x01
    return bytes(data)


@pytest.mark.parametrize("seq", [1, 9, 17])
def test_damage_is_named_alike_with_and_without_a_worker(audit, monkeypatch, seq, tmp_path):
    monkeypatch.setattr(index_mod, "CHUNK", 4)
    log = _flip_crc_of(records_of(audit), seq, audit.store.path.read_bytes())
    with pytest.raises(EvidenceError) as with_worker:
        derive(scan_bytes(log))
    shutil.copytree(audit.directory, tmp_path / "l", ignore=shutil.ignore_patterns("index*"))
    (tmp_path / "l" / "log.bin").write_bytes(log)
    with pytest.raises(EvidenceError) as reading_the_log:
        update_index(Ledger(tmp_path / "l"), tmp_path / "index.duckdb")
    no_worker(monkeypatch)
    with pytest.raises(EvidenceError) as in_line:
        derive(scan_bytes(log))
    assert str(with_worker.value) == str(in_line.value) == str(reading_the_log.value)
    assert str(in_line.value).startswith(f"log damaged at seq {seq}: record fails its CRC-32")


def test_an_index_built_with_a_worker_updates_in_line(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path / "l")
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    with monkeypatch.context() as patch:
        patch.setattr(index_mod, "CHUNK", 3)
        pools = Pools(patch)
        built = update_index(ledger)
        assert len(pools.started) == 1 and pools.all_stopped()
    EvidenceWriter(ledger).run_end(run_id="late", status="completed")
    updated = update_index(ledger)
    assert (built.tree_size, updated.tree_size, updated.rebuilt) == (25, 26, False)
    shutil.copytree(tmp_path / "l", tmp_path / "fresh", ignore=shutil.ignore_patterns("index*"))
    update_index(Ledger(tmp_path / "fresh"))
    for name in VIEWS:
        assert table(ledger, name).equals(table(Ledger(tmp_path / "fresh"), name)), name
