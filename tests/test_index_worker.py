"""Deriving the index in two stages: records checked on their own (in line or in a
worker process), then derived in order. Wherever a batch is checked, the rows and the
errors are the same, and a worker that fails to start, dies or answers garbage changes
nothing but the speed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evidence_ledger.format.entries import entry_hash
from evidence_ledger.format.errors import EvidenceError
from evidence_ledger.format.framing import Record, scan_bytes
from evidence_ledger.index import build as index_mod
from evidence_ledger.index import worker as index_worker
from evidence_ledger.index.build import derive, update_index
from evidence_ledger.index.check import check_batch
from evidence_ledger.index.db import VIEWS
from evidence_ledger.index.worker import BatchChecker
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


class Popens:
    """Records every worker process started, to check each is gone afterwards."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started: list[subprocess.Popen[bytes]] = []
        real = subprocess.Popen

        def popen(*args, **kwargs):
            proc = real(*args, **kwargs)
            self.started.append(proc)
            return proc

        monkeypatch.setattr(index_worker.subprocess, "Popen", popen)

    def all_stopped(self) -> bool:
        return all(proc.poll() is not None for proc in self.started)


def checked_alike(batches: list[list[Record]]) -> float:
    """Submit every batch to a :class:`BatchChecker`, then take the results: each must
    equal the batch checked in line. Returns the seconds it took."""
    started = time.monotonic()
    with BatchChecker() as checker:
        for batch in batches:
            checker.submit(batch)
        assert [checker.result() for _ in batches] == [check_batch(b) for b in batches]
    return time.monotonic() - started


def no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_worker, "worker_command", lambda: ["/nonexistent/python"])


def test_a_checked_batch_holds_each_records_hashes_and_rows(audit):
    records = records_of(audit)
    checked = check_batch(records[3:10])
    assert (checked.first, checked.count, checked.problem) == (3, 7, None)
    assert checked.hashes == b"".join(entry_hash(r.data) for r in records[3:10])
    assert checked.leaves == b"".join(leaf_hash(r.data) for r in records[3:10])
    assert sum(t.num_rows for t in checked.tables.values()) == 7
    assert sorted(s for t in checked.tables.values() for s in t["seq"].to_pylist()) == list(
        range(3, 10))


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
    assert checked.count == 3 and len(checked.hashes) == 3 * 32
    assert checked.problem is not None and checked.problem.startswith(problem)


def test_the_worker_checks_what_the_line_checks(audit, monkeypatch):
    popens = Popens(monkeypatch)
    records = records_of(audit)
    batches = [records[i:i + 5] for i in range(0, len(records), 5)]
    with BatchChecker() as checker:
        checker.submit(batches[0])
        for i, batch in enumerate(batches):
            if i + 1 < len(batches):
                checker.submit(batches[i + 1])
            assert checker.result() == check_batch(batch)
    assert len(popens.started) == 1 and popens.all_stopped()


@pytest.mark.parametrize(
    "command",
    [
        ["/nonexistent/python"],  # cannot start
        [sys.executable, "-c", "pass"],  # exits at once
        [sys.executable, "-c", "import sys; sys.stdout.write('garbage' * 99)"],
        [sys.executable, "-c", "import pickle, sys; pickle.dump(7, sys.stdout.buffer)"],
    ],
)
def test_a_worker_that_fails_is_replaced_by_checks_in_line(audit, monkeypatch, command):
    popens = Popens(monkeypatch)
    monkeypatch.setattr(index_worker, "worker_command", lambda: command)
    records = records_of(audit)
    batches = [records[i:i + 4] for i in range(0, len(records), 4)]
    checked_alike(batches)
    assert popens.all_stopped()


def test_a_worker_killed_midway_is_replaced_by_checks_in_line(audit, monkeypatch):
    popens = Popens(monkeypatch)
    records = records_of(audit)
    batches = [records[i:i + 4] for i in range(0, len(records), 4)]
    with BatchChecker() as checker:
        for batch in batches:
            checker.submit(batch)
        results = [checker.result(), checker.result()]
        popens.started[0].kill()
        results += [checker.result() for _ in batches[2:]]
    assert results == [check_batch(b) for b in batches]
    assert popens.all_stopped()


def test_ctrl_c_while_waiting_for_the_worker_stops_it(audit, monkeypatch):
    popens = Popens(monkeypatch)
    monkeypatch.setattr(index_worker, "worker_command", lambda: [
        sys.executable, "-c", "import time; time.sleep(60)"])
    records = records_of(audit)
    with pytest.raises(KeyboardInterrupt), BatchChecker() as checker:
        checker.submit(records[:4])
        checker.submit(records[4:8])
        checker.result()
        raise KeyboardInterrupt
    assert len(popens.started) == 1 and popens.all_stopped()


def test_a_worker_ends_when_its_input_ends():
    proc = subprocess.run(
        index_worker.worker_command(), input=b"", capture_output=True, timeout=60, check=False,
        env=index_worker._worker_env(),
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")


def test_rows_are_the_same_with_and_without_a_worker(audit, monkeypatch):
    monkeypatch.setattr(index_mod, "CHUNK", 4)
    popens = Popens(monkeypatch)
    report, tables = derive(audit.scan())
    assert len(popens.started) == 1 and popens.all_stopped()
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
def test_damage_is_named_alike_with_and_without_a_worker(audit, monkeypatch, seq):
    monkeypatch.setattr(index_mod, "CHUNK", 4)
    log = _flip_crc_of(records_of(audit), seq, audit.store.path.read_bytes())
    with pytest.raises(EvidenceError) as with_worker:
        derive(scan_bytes(log))
    no_worker(monkeypatch)
    with pytest.raises(EvidenceError) as in_line:
        derive(scan_bytes(log))
    assert str(with_worker.value) == str(in_line.value)
    assert str(in_line.value).startswith(f"log damaged at seq {seq}: record fails its CRC-32")


def test_an_index_built_with_a_worker_updates_in_line(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path / "l")
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    with monkeypatch.context() as patch:
        patch.setattr(index_mod, "CHUNK", 3)
        built = update_index(ledger)
    EvidenceWriter(ledger).run_end(run_id="late", status="completed")
    updated = update_index(ledger)
    assert (built.tree_size, updated.tree_size, updated.rebuilt) == (25, 26, False)
    shutil.copytree(tmp_path / "l", tmp_path / "fresh", ignore=shutil.ignore_patterns("index*"))
    update_index(Ledger(tmp_path / "fresh"))
    for name in VIEWS:
        assert table(ledger, name).equals(table(Ledger(tmp_path / "fresh"), name)), name


def test_the_worker_imports_this_ledger_package():
    env = index_worker._worker_env()
    assert env["PYTHONPATH"].split(":")[0] == str(Path(index_worker.__file__).parents[1])


def test_the_worker_never_imports_a_ledger_package_from_the_working_directory(
    audit, monkeypatch, tmp_path
):
    # before: python -m put the working directory first on the worker's path
    marker = tmp_path / "ran"
    planted = tmp_path / "cwd" / "ledger"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text("")
    (planted / "index_worker.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(planted.parent)
    records = records_of(audit)
    with BatchChecker() as checker:
        checker.submit(records[:4])
        checker.submit(records[4:8])
        assert checker.result() == check_batch(records[:4])
        assert checker.result() == check_batch(records[4:8])
    assert not marker.exists()


def test_a_stopped_worker_is_replaced_by_checks_in_line(audit, monkeypatch):
    # before: a worker stopped with SIGSTOP hung the update for ever
    popens = Popens(monkeypatch)
    monkeypatch.setattr(index_worker, "STALL_SECONDS", 0.5)
    monkeypatch.setattr(index_worker, "worker_command", lambda: [
        sys.executable, "-c", "import time; time.sleep(120)"])
    records = records_of(audit)
    batches = [records[i:i + 4] for i in range(0, 12, 4)]
    assert checked_alike(batches) < 60  # not waiting for the worker's sleep to end
    assert len(popens.started) == 1 and popens.all_stopped()


@pytest.mark.parametrize("banner", ["Tracing enabled\n", "XBooting\n", "hello\n"])
def test_a_worker_whose_output_starts_with_a_banner_is_replaced_at_once(
    audit, monkeypatch, banner
):
    # before: a banner starting with T, X or B was read as a result's length (1.7 GB),
    # and the update waited for it
    monkeypatch.setattr(index_worker, "STALL_SECONDS", 30.0)
    command = [*index_worker.worker_command()[:-2], "-c",
               f"import sys; sys.stdout.write({banner!r}); sys.stdout.flush(); "
               "from evidence_ledger.index.worker import main; main()"]
    monkeypatch.setattr(index_worker, "worker_command", lambda: command)
    records = records_of(audit)
    batches = [records[i:i + 4] for i in range(0, 12, 4)]
    assert checked_alike(batches) < 25  # not waiting for the stall time-out


def test_no_interpreter_to_start_is_checked_in_line(audit, monkeypatch):
    # before: sys.executable None (an embedded interpreter) raised TypeError
    monkeypatch.setattr(index_worker, "worker_command", lambda: [None, "-m", "x"])
    records = records_of(audit)
    with BatchChecker() as checker:
        checker.submit(records[:4])
        checker.submit(records[4:8])
        assert [checker.result(), checker.result()] == [
            check_batch(records[:4]), check_batch(records[4:8])]
