"""Crashes, injected I/O faults, concurrent writers and tampering (issue 8)."""

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.reliability import concurrency_trial, fault_trial, kill_trial, strace_trials
from evidence_ledger.format.framing import Record, frame, scan_bytes
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger
from evidence_ledger.verify.records import verify_records
from tests.helpers import ingest, require_strace


def test_sigkill_at_50_points_loses_no_acknowledged_entry(tmp_path):
    trial = kill_trial(tmp_path, kills=50)
    assert (trial.lost, trial.failures) == (0, 0), trial.detail


def test_injected_faults_raise_our_error_and_keep_the_ledger_valid(tmp_path):
    trial = fault_trial(tmp_path, rounds=2)
    assert trial.attempts == 10
    assert (trial.lost, trial.failures) == (0, 0), trial.detail


def test_four_writers_2500_entries_each(tmp_path):
    trial = concurrency_trial(tmp_path, writers=4, per_writer=2500)
    assert (trial.lost, trial.failures) == (0, 0), trial.detail


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Entry bytes of a clean ledger (25 entries) and of a foreign one."""
    out = []
    for name in ("valid", "approval_binding"):
        ledger = tmp_path_factory.mktemp(name)
        ingest(ledger, name)
        out.append([item.data for item in Ledger(ledger).scan() if isinstance(item, Record)])
    return out


def _verify(datas):
    log = b"".join(frame(d, more=False) for d in datas)
    return verify_records(scan_bytes(log))


def _first_integrity(report):
    return next((v.seq for v in report.violations if v.rule == "integrity"), None)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_deleted_duplicated_reordered_or_inserted_entries_are_reported(records, data):
    clean, foreign = records
    assert _verify(clean).ok
    n = len(clean)
    op = data.draw(st.sampled_from(["delete", "duplicate", "swap", "insert"]))
    i = data.draw(st.integers(0, n - 2))
    datas = list(clean)
    if op == "delete":
        del datas[i]
    elif op == "duplicate":
        datas.insert(i + 1, datas[i])
        i += 1
    elif op == "swap":
        j = data.draw(st.integers(i + 1, n - 1))
        datas[i], datas[j] = datas[j], datas[i]
    else:
        # a foreign genesis entry at 0 would be a valid (other) ledger: only checkpoints tell
        datas.insert(i, data.draw(st.sampled_from(foreign[1:])))
    report = _verify(datas)
    assert not report.ok
    assert _first_integrity(report) == i, (op, i, report.violations[:2])
    first = report.violations[0]  # the first break named is the integrity one, at i
    assert (first.rule, first.seq) == ("integrity", i), (op, i, report.violations[:2])


def test_every_system_call_of_ingest_and_redact_fails_once_under_strace(tmp_path):
    """Each system call of ``ingest`` and ``redact`` that touches the ledger's evidence
    (write, pwrite64, fsync, fdatasync, syncfs, rename, openat, close, ftruncate) fails once
    with EIO, at every position. The calls on the derived payload map alone are left to
    ``make reliability``, which runs every command on every file: they are most of the
    cases, and the map is rebuilt from the segments."""
    require_strace()
    trials = strace_trials(tmp_path, ("ingest", "redact"), evidence_only=True)
    assert [t.name for t in trials] == ["strace EIO into ingest", "strace EIO into redact"]
    for trial in trials:
        assert trial.attempts >= 15, trial  # each command touches the ledger that often
        assert (trial.lost, trial.failures) == (0, 0), trial.detail


_TORN_WRITER = """
import os, sys
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage import log_store
writer = EvidenceWriter(sys.argv[1])
for n in range(3):
    print(writer.run_end(run_id=f"acked-{n}", status="completed").hex(), flush=True)
real_write = os.write
def half_then_die(fd, data):
    real_write(fd, data[: len(data) // 2])  # the first half of the frame reaches the file
    os._exit(9)  # and the writer dies before the second
log_store.os.write = half_then_die
writer.run_end(run_id="torn", status="completed")
"""


def test_a_writer_stopped_between_the_halves_of_a_frame_leaves_a_torn_tail_only(tmp_path):
    done = subprocess.run([sys.executable, "-c", _TORN_WRITER, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 9, done.stderr
    acked = [bytes.fromhex(line) for line in done.stdout.split()]
    assert len(acked) == 3
    report = verify_ledger(Ledger(tmp_path))
    assert report.ok and any("torn tail" in n for n in report.notices), report.notices
    assert [h for _, h in Ledger(tmp_path).entries()] == acked
    EvidenceWriter(tmp_path).run_end(run_id="next", status="completed")  # cuts the tail
    assert len(list((tmp_path / "torn").iterdir())) == 1  # the cut bytes, kept
    report = verify_ledger(Ledger(tmp_path))
    assert report.ok and report.tree_size == 4, report.violations
    assert [h for _, h in Ledger(tmp_path).entries()][:3] == acked
