"""``trace``: one call's evidence, found through the index and read back from the log."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from evidence_ledger.format.entries import entry_json
from evidence_ledger.format.framing import Record
from evidence_ledger.index import build as index_mod
from evidence_ledger.index import check as index_check
from evidence_ledger.index.build import update_index
from evidence_ledger.index.query import connect_read_only
from evidence_ledger.index.trace import trace_call
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger
from evidence_ledger.verify.lineage import run_state_forest
from tests.helpers import forge_entry, run_cli
from tests.test_index import build_audit_ledger

RUNS = 40


def full_pass_trace(ledger: Ledger, call_id: str, run_id: str | None = None) -> dict:
    """What ``trace --json`` printed before it read the index: one full ``verify`` and
    two scans of the whole log (the oracle the index's answer must equal)."""
    report = verify_ledger(ledger)
    mine = [
        (entry, hash_) for entry, hash_ in ledger.entries()
        if entry.body.get("call_id") == call_id
        and (run_id is None or entry.body.get("run_id") == run_id)
    ]
    runs = {entry.body["run_id"] for entry, _ in mine}
    forest = run_state_forest(e for e, _ in ledger.entries() if e.body.get("run_id") in runs)
    return {
        "call_id": call_id,
        "entries": [entry_json(entry, hash_) for entry, hash_ in mine],
        "violations": [
            v.to_json() for v in report.violations
            if v.call_id == call_id and (run_id is None or v.run_id == run_id)
        ],
        "lineage": [
            {"run_id": run, "states": [root.to_json() for root in roots]}
            for run, roots in forest.items()
        ],
    }


def many_runs(directory: Path) -> Ledger:
    """:data:`RUNS` runs of one approved, executed call each (4 entries per run)."""
    ledger = Ledger(directory)
    w = EvidenceWriter(ledger)
    for i in range(RUNS):
        run, call = f"r{i}", f"c{i}"
        w.call(run_id=run, call_id=call, agent="agent-a", tool="t", arguments="{}",
               needs_approval=True)
        w.decision(run_id=run, call_id=call, decision="approve", approver="alice")
        w.execution(run_id=run, call_id=call, arguments="{}", result="ok")
        w.run_end(run_id=run, status="completed")
    return ledger


def records(ledger: Ledger) -> list[Record]:
    return [r for r in ledger.scan() if isinstance(r, Record)]


@pytest.fixture(scope="module")
def audit(tmp_path_factory) -> Ledger:
    return build_audit_ledger(tmp_path_factory.mktemp("audit"))


def test_trace_is_what_a_full_verify_and_scan_find_for_every_call(audit):
    calls = {(e.body["call_id"], e.body["run_id"]) for e, _ in audit.entries() if e.kind == "call"}
    assert len(calls) > 5 and any(verify_ledger(audit).violations)
    for call_id, run_id in sorted(calls):
        for run in (None, run_id):
            args = ("--run-id", run) if run else ()
            result = run_cli("trace", call_id, "--ledger", str(audit.directory), "--json", *args)
            assert result.code == 0, result.err
            assert json.loads(result.out) == full_pass_trace(audit, call_id, run), call_id


def test_trace_reads_only_the_log_blocks_that_hold_the_call(tmp_path, monkeypatch):
    # before: trace verified the whole ledger and scanned it twice (11.7 s for one call
    # of a 150,000-entry ledger)
    monkeypatch.setattr(index_check, "BLOCK", 4)
    ledger = many_runs(tmp_path)
    update_index(ledger)
    scanned = []
    scan = ledger.store.scan

    def counted(*args):
        for item in scan(*args):
            scanned.append(item)
            yield item

    monkeypatch.setattr(ledger.store, "scan", counted)
    found = trace_call(ledger, "c20")
    assert [e.kind for e, _ in found.entries] == ["call", "decision", "execution"]
    # the ledger's identity (its first record), the freshness check's record, one block
    assert len(scanned) <= 1 + 1 + 4
    assert found.tree_size == 4 * RUNS and found.violations == []


def test_log_blocks_name_every_block_start_and_each_update_start(tmp_path, monkeypatch):
    monkeypatch.setattr(index_check, "BLOCK", 4)
    ledger = many_runs(tmp_path)
    update_index(ledger)
    w = EvidenceWriter(ledger)
    for i in range(3):  # two small updates: from 160 (a block start) and from 161
        w.run_end(run_id=f"late-{i}", status="completed")
        if i != 1:
            update_index(ledger)
    with connect_read_only(index_mod.index_path(ledger)) as con:
        rows = con.execute("SELECT first_seq, log_offset FROM log_blocks ORDER BY 1").fetchall()
    offsets = [r.offset for r in records(ledger)]
    assert [seq for seq, _ in rows] == [*range(0, 4 * RUNS + 1, 4), 161]
    assert all(offset == offsets[seq] for seq, offset in rows)


def test_a_record_damaged_after_indexing_is_evidence_that_fails(tmp_path):
    ledger = many_runs(tmp_path)
    update_index(ledger)
    target = records(ledger)[41]  # c10's decision
    log = ledger.store.path
    data = bytearray(log.read_bytes())
    data[target.offset + 20] ^= 0xFF
    log.write_bytes(bytes(data))
    result = run_cli("trace", "c10", "--ledger", str(tmp_path))
    assert result.code == 1
    assert result.err.startswith("evidence-ledger: error: log damaged at seq 41: record fails")


def test_a_record_rewritten_after_indexing_is_evidence_that_fails(tmp_path):
    ledger = many_runs(tmp_path)
    update_index(ledger)
    forge_entry(tmp_path, 40, lambda data: data.replace(b"agent-a", b"agent-b"))
    result = run_cli("trace", "c10", "--ledger", str(tmp_path))
    # the index no longer matches the log: rebuilt, which finds the broken link
    assert result.code == 1
    assert "log damaged at seq 41: seq or prev does not continue the log" in result.err


EDITS = {
    "call_id of another call's entries":
        "UPDATE raw.entries SET call_id = 'c10' WHERE seq IN (0, 1)",
    "a run moved": "UPDATE raw.entries SET run_id = 'r10' WHERE seq = 4",
    "a block offset mid-record": "UPDATE log_blocks SET log_offset = 5 WHERE first_seq = 40",
    "a block offset past the log": "UPDATE log_blocks SET log_offset = 9223372036854775807",
    "a negative block offset": "UPDATE log_blocks SET log_offset = -100",
    "no blocks": "DELETE FROM log_blocks",
    "a hash": "UPDATE raw.entries SET entry_hash = from_hex(repeat('0', 64)) WHERE seq = 41",
}


@pytest.mark.parametrize("edit", EDITS)
def test_an_index_that_does_not_match_the_log_is_rebuilt_never_shown(tmp_path, edit):
    # before: rows or offsets edited in the index showed other entries as the call's
    # (exit 0), or failed as if the log were damaged (exit 1, an OSError for bad offsets)
    ledger = many_runs(tmp_path)
    want = full_pass_trace(ledger, "c10")
    with duckdb.connect(str(update_index(ledger).path)) as con:
        con.execute(EDITS[edit])
    result = run_cli("trace", "c10", "--ledger", str(tmp_path), "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == want


def test_a_named_index_that_does_not_match_the_log_needs_rebuild(tmp_path):
    ledger = many_runs(tmp_path / "l")
    named = tmp_path / "named.duckdb"
    update_index(ledger, named)
    with duckdb.connect(str(named)) as con:
        con.execute(EDITS["call_id of another call's entries"])
    args = ("trace", "c10", "--ledger", str(ledger.directory), "--index", str(named))
    result = run_cli(*args)
    assert result.code == 2 and "does not match the log" in result.err
    assert "run again with --rebuild" in result.err and result.err.count("\n") == 1
    assert run_cli(*args, "--rebuild").code == 0


@pytest.mark.parametrize("call_id", ["\udcff", "c\udc80"])
def test_a_call_id_that_is_not_utf8_names_no_entry(tmp_path, call_id):
    # before: "cannot read index ...: Python Conversion Failure" (blaming the index)
    many_runs(tmp_path)
    result = run_cli("trace", call_id, "--ledger", str(tmp_path))
    assert result.code == 2 and "no entry names call_id" in result.err


def test_trace_takes_another_index_and_rebuilds_it_when_asked(tmp_path):
    ledger = many_runs(tmp_path / "l")
    other = tmp_path / "other.duckdb"
    first = run_cli("trace", "c3", "--ledger", str(ledger.directory), "--index", str(other))
    assert first.code == 0 and "approve by alice" in first.out and other.is_file()
    assert not (ledger.directory / "index.duckdb").exists()
    again = run_cli("trace", "c3", "--ledger", str(ledger.directory), "--index", str(other),
                    "--rebuild", "--json")
    assert again.code == 0 and json.loads(again.out) == full_pass_trace(ledger, "c3")


def test_a_call_in_no_run_given_is_bad_usage(tmp_path):
    many_runs(tmp_path)
    result = run_cli("trace", "c3", "--ledger", str(tmp_path), "--run-id", "r4")
    assert result.code == 2 and "no entry names call_id 'c3' in run 'r4'" in result.err


def test_trace_prints_times_as_query_does_with_z(tmp_path):
    # before: 2026-...T...+00:00 here, ...Z in query output and exports
    many_runs(tmp_path)
    line = run_cli("trace", "c3", "--ledger", str(tmp_path)).out.splitlines()[0]
    assert re.fullmatch(r"\s+12  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z  call .*", line), line


def test_trace_says_when_the_call_broke_no_rule(tmp_path):
    # before: the text ended after the timeline, saying nothing of violations
    many_runs(tmp_path)
    text = run_cli("trace", "c3", "--ledger", str(tmp_path)).out
    assert text.splitlines()[-1] == "no rule broken by this call (payloads and checkpoints: verify)"
