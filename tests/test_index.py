"""The DuckDB index: same facts as the verifier, incremental, rebuildable, read-only.

The canned audit queries are read from docs/QUERIES.md and run against a ledger with
violations put in on purpose; each query's rows are checked against the verifier's own
findings (``Report.violations``) or against the entries themselves.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from evidence_ledger.api.keys import SigningKey
from evidence_ledger.format.entries import BODY_FIELDS, decode_entry, entry_hash
from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.format.framing import Record, frame
from evidence_ledger.index import build as index_mod
from evidence_ledger.index import state as index_state
from evidence_ledger.index.build import Deriver, derive, update_index
from evidence_ledger.index.check import check_batch
from evidence_ledger.index.db import VIEWS
from evidence_ledger.index.query import check_read_only, connect_read_only, run_query
from evidence_ledger.index.state import state_schema
from evidence_ledger.record.ingest import ingest_file
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.log_store import FileLogStore
from evidence_ledger.verify.audit import verify_ledger
from evidence_ledger.verify.chains import call_chains
from evidence_ledger.verify.findings import (
    APPROVAL_BINDING,
    APPROVED_NOT_EXECUTED,
    OUTPUT_PROVENANCE,
    REJECTION_RESPECTED,
    TOOL_LINKAGE,
)
from evidence_ledger.verify.records import verify_records
from evidence_ledger.verify.rules import RuleEngine
from tests.helpers import DATA, run_cli

DOCS = Path(__file__).resolve().parent.parent / "docs" / "QUERIES.md"
HOUR = 3600 * 10**9
DAY = 24 * HOUR
T0 = int(dt.datetime(2025, 3, 3, tzinfo=dt.UTC).timestamp()) * 10**9
ODD_APPROVER = 'Doe, "JD"\nJane'
ODD_REASON = 'ok, "urgent"\nsee ticket, 7'
ODD_TOOL = "wire, intl"


def build_audit_ledger(directory: Path) -> Ledger:
    """A ledger with every chain shape and, on purpose, each kind of violation.

    Run ``r1`` (2025-03-03 and 03-04, UTC): c1 approved and run; c2 rejected; c3 blocked by
    a guardrail; c4 approved ``always`` and c5 run under it; c6 run without approval; c7
    approved by someone shown other arguments, then run; c8 approved, never run; an
    output for a call never recorded (``ghost``); c10's output persisted without its
    function_call; c11 run after a rejection; n1 nested. Run ``r2``: one approval a day
    ago. Run ``r3`` (2025-03-05): the guard's entries (:func:`guarded_run`).
    """
    ledger = Ledger(directory)
    w = EvidenceWriter(ledger)
    clock = iter(range(T0, T0 + DAY, HOUR // 4))  # day one, every 15 minutes

    def at() -> int:
        return next(clock)

    def call(cid: str, tool: str, args: str, gated: bool = True, run: str = "r1", **kw) -> None:
        w.call(run_id=run, call_id=cid, agent="billing", tool=tool, arguments=args,
               needs_approval=gated, time_ns=kw.pop("time_ns", None) or at(), **kw)

    def run(cid: str, args: str, result: str, run: str = "r1", **kw) -> None:
        w.execution(run_id=run, call_id=cid, arguments=args, result=result,
                    time_ns=kw.pop("time_ns", None) or at(), **kw)

    def persist(cid: str, tool: str, args: str, output: str, call_item: bool = True) -> None:
        if call_item:
            w.session_item(run_id="r1", session_id="s1", time_ns=at(), item={
                "type": "function_call", "call_id": cid, "name": tool, "arguments": args})
        w.session_item(run_id="r1", session_id="s1", time_ns=at(), item={
            "type": "function_call_output", "call_id": cid, "output": output})

    def decide(cid: str, decision: str, approver: str, **kw) -> None:
        w.decision(run_id=kw.pop("run", "r1"), call_id=cid, decision=decision,
                   approver=approver, time_ns=kw.pop("time_ns", None) or at(), **kw)

    call("c1", "charge", '{"amount": 3}')
    decide("c1", "approve", "alice@example.com")
    run("c1", '{"amount":3}', "receipt-3")
    persist("c1", "charge", '{"amount": 3}', "receipt-3")
    call("c2", "refund", '{"amount": 9}')
    decide("c2", "reject", "bob@example.com", message="refunds need a ticket")
    persist("c2", "refund", '{"amount": 9}', "refunds need a ticket")
    call("c3", "lookup", '{"email": "a@b.c"}', gated=False)
    w.guardrail(run_id="r1", call_id="c3", guardrail="no_pii", message="blocked", time_ns=at())
    persist("c3", "lookup", '{"email": "a@b.c"}', "blocked")
    call("c4", "charge", '{"amount": 5}')
    decide("c4", "approve", "alice@example.com", always=True)
    run("c4", '{"amount": 5}', "receipt-5")
    call("c5", "charge", '{"amount": 6}')
    run("c5", '{"amount": 6}', "receipt-6")
    persist("c5", "charge", '{"amount": 6}', "receipt-6")
    call("c6", ODD_TOOL, '{"to": "x"}')
    run("c6", '{"to": "x"}', "sent")
    persist("c6", ODD_TOOL, '{"to": "x"}', "sent")
    call("c7", "refund", '{"amount": 5}')
    decide("c7", "approve", ODD_APPROVER, arguments='{"amount": 500}', reason=ODD_REASON)
    run("c7", '{"amount": 5}', "refunded")
    call("c8", "refund", '{"amount": 1}')
    decide("c8", "approve", "carol@example.com")
    persist("ghost", "charge", "{}", "from nowhere", call_item=False)
    call("c10", "lookup", '{"q": 1}', gated=False)
    run("c10", '{"q": 1}', "found")
    persist("c10", "lookup", '{"q": 1}', "found", call_item=False)
    call("c11", "refund", '{"amount": 2}', time_ns=T0 + DAY + HOUR)
    decide("c11", "reject", "dave@example.com", time_ns=T0 + DAY + 2 * HOUR)
    run("c11", '{"amount": 2}', "refunded", time_ns=T0 + DAY + 3 * HOUR)
    w.call(run_id="r1", scope=["ask_expert:c12"], call_id="n1", agent="expert", tool="wire",
           arguments='{"to": "y"}', needs_approval=True, time_ns=T0 + DAY + 4 * HOUR)
    w.decision(run_id="r1", scope=["ask_expert:c12"], call_id="n1", decision="approve",
               approver="carol@example.com", time_ns=T0 + DAY + 5 * HOUR)
    w.execution(run_id="r1", scope=["ask_expert:c12"], call_id="n1", arguments='{"to":"y"}',
                result="sent", time_ns=T0 + DAY + 6 * HOUR)
    w.run_end(run_id="r1", status="completed", time_ns=T0 + DAY + 10 * HOUR)
    guarded_run(w, T0 + 2 * DAY)
    now = time.time_ns()
    call("c20", "charge", '{"amount": 8}', run="r2", time_ns=now - DAY - HOUR)
    decide("c20", "approve", "erin@example.com", run="r2", time_ns=now - DAY)
    run("c20", '{"amount": 8}', "receipt-8", run="r2", time_ns=now - DAY + HOUR)
    w.run_end(run_id="r2", status="completed", time_ns=now - DAY + 2 * HOUR)
    return ledger


GUARD_POLICY = b'version = 1\n[[tools]]\nmatch = "charge"\n'


def guarded_run(w: EvidenceWriter, start: int) -> None:
    """Run ``r3``, under :data:`GUARD_POLICY`, from ``start`` (ns) on, one entry a minute:
    g1 approved, allowed by the guard and run, its approval then revoked; g2 denied, never
    approved (honest guard entries: no violation)."""
    clock = iter(range(start, start + HOUR, HOUR // 60))
    guard = {"run_id": "r3", "scope": (), "agent": "billing", "tool": "charge",
             "mode": "enforce", "policy_digest": hashlib.sha256(GUARD_POLICY).digest(),
             "run_state": None}
    w.policy(run_id="r3", text=GUARD_POLICY, time_ns=next(clock))
    w.call(run_id="r3", call_id="g1", agent="billing", tool="charge", arguments="{}",
           needs_approval=True, time_ns=next(clock))
    w.decision(run_id="r3", call_id="g1", decision="approve", approver="alice@example.com",
               time_ns=next(clock))
    w.guard(allowed=True, call_id="g1", arguments="{}", code="approved", reason="approved",
            time_ns=next(clock), **guard)
    w.execution(run_id="r3", call_id="g1", arguments="{}", result="receipt", agent="billing",
                tool="charge", time_ns=next(clock))
    w.revocation(call_id="g1", by="bob@example.com", reason="too late", run_id="r3",
                 time_ns=next(clock))
    w.call(run_id="r3", call_id="g2", agent="billing", tool="charge", arguments="{}",
           needs_approval=True, time_ns=next(clock))
    w.guard(allowed=False, call_id="g2", arguments="{}", code="no_approval",
            reason="no approval", message="Tool execution was not approved.",
            time_ns=next(clock), **guard)
    w.run_end(run_id="r3", status="completed", time_ns=next(clock))


def canned_queries() -> dict[str, str]:
    """The canned queries of docs/QUERIES.md, by the name in their ``<!-- query: -->``."""
    text = DOCS.read_text(encoding="utf-8")
    found = re.findall(r"<!-- query: (\w+) -->\n```sql\n(.*?)```", text, re.S)
    return dict(found)


def rows(ledger: Ledger, sql: str, **params: object) -> list[dict]:
    result = run_query(ledger, sql, params=params or None)
    return [dict(zip(result.columns, row, strict=True)) for row in result.rows]


def ident(row: dict) -> tuple:
    return (row["run_id"], tuple(row["scope"]), row["call_id"])


def table(ledger: Ledger, name: str) -> pa.Table:
    view = VIEWS[name]
    with connect_read_only(index_mod.index_path(ledger)) as con:
        return con.sql(f"SELECT * FROM {name} ORDER BY {view.order}").to_arrow_table().cast(
            view.schema
        )


@pytest.fixture(scope="module")
def audit(tmp_path_factory) -> Ledger:
    return build_audit_ledger(tmp_path_factory.mktemp("audit"))


@pytest.fixture(scope="module")
def report(audit):
    return verify_ledger(audit)


def findings(report, rule: str, detail: str = "") -> list:
    return [v for v in report.violations if v.rule == rule and detail in v.detail]


# -- canned queries against the verifier ------------------------------------------------


def test_docs_hold_every_canned_query():
    assert set(canned_queries()) >= {
        "gated_without_approval", "executed_after_rejection", "approvals_not_bound",
        "approved_not_executed", "outputs_without_call", "outputs_without_function_call",
        "decisions_per_approver_per_day", "recent_approvals", "approval_wait",
        "outputs_persisted_for_run", "violations_per_rule", "denied_calls", "revoked_approvals",
    }


def test_the_audit_ledger_breaks_each_rule_on_purpose(report):
    got = Counter(v.rule for v in report.violations)
    assert got == {APPROVAL_BINDING: 2, APPROVED_NOT_EXECUTED: 1, OUTPUT_PROVENANCE: 1,
                   TOOL_LINKAGE: 2, REJECTION_RESPECTED: 1}


@pytest.mark.parametrize(
    "query, rule, detail",
    [
        ("gated_without_approval", APPROVAL_BINDING, "without approval"),
        ("executed_after_rejection", REJECTION_RESPECTED, ""),
        ("approvals_not_bound", APPROVAL_BINDING, "was shown arguments"),
        ("approved_not_executed", APPROVED_NOT_EXECUTED, ""),
    ],
)
def test_call_queries_name_the_calls_the_verifier_names(audit, report, query, rule, detail):
    got = [ident(r) for r in rows(audit, canned_queries()[query])]
    want = [(v.run_id, v.scope, v.call_id) for v in findings(report, rule, detail)]
    assert got and sorted(got) == sorted(want)


def test_an_approval_after_the_execution_does_not_count(tmp_path):
    ledger = Ledger(tmp_path)
    w = EvidenceWriter(ledger)
    w.call(run_id="r", call_id="late", agent="a", tool="t", arguments="{}", needs_approval=True)
    w.execution(run_id="r", call_id="late", arguments="{}", result="ok")
    w.decision(run_id="r", call_id="late", decision="approve", approver="alice")
    got = [ident(r) for r in rows(ledger, canned_queries()["gated_without_approval"])]
    want = [(v.run_id, v.scope, v.call_id)
            for v in findings(verify_ledger(ledger), APPROVAL_BINDING, "without approval")]
    assert got == want == [("r", (), "late")]


@pytest.mark.parametrize(
    "query, rule, detail",
    [
        ("outputs_without_call", OUTPUT_PROVENANCE, "never recorded"),
        ("outputs_without_function_call", TOOL_LINKAGE, ""),
    ],
)
def test_output_queries_name_the_entries_the_verifier_names(audit, report, query, rule, detail):
    got = [r["seq"] for r in rows(audit, canned_queries()[query])]
    assert got and got == [v.seq for v in findings(report, rule, detail)]


def test_violations_per_rule_is_the_report(audit, report):
    got = {r["rule"]: r["violations"] for r in rows(audit, canned_queries()["violations_per_rule"])}
    assert got == Counter(v.rule for v in report.violations)


def test_unbound_approval_shows_both_digests(audit):
    (row,) = rows(audit, canned_queries()["approvals_not_bound"])
    assert row["approver"] == ODD_APPROVER and row["call_id"] == "c7"
    assert row["arguments_digest"] != row["call_arguments_digest"]
    assert row["arguments_digest"].startswith("sha256:") and len(row["arguments_digest"]) == 71


def _decisions(ledger: Ledger) -> list:
    return [e for e, _ in ledger.entries() if e.kind == "decision"]


def test_decisions_per_approver_per_day_count_the_entries(audit):
    want: Counter = Counter()
    for e in _decisions(audit):
        day = dt.datetime.fromtimestamp(e.time // 10**9, dt.UTC).date()
        want[(e.body["approver"], day, e.body["decision"])] += 1
    got: Counter = Counter()
    for r in rows(audit, canned_queries()["decisions_per_approver_per_day"]):
        got[(r["approver"], r["day"], "approve")] += r["approvals"]
        got[(r["approver"], r["day"], "reject")] += r["rejections"]
    assert +got == want and len(want) >= 6


def test_recent_approvals_sees_only_approvals_of_the_last_week(audit):
    got = rows(audit, canned_queries()["recent_approvals"], days=7)
    assert [(r["approver"], r["call_id"], r["bound"]) for r in got] == [
        ("erin@example.com", "c20", True)
    ]


def test_approval_wait_is_decision_minus_call_time(audit):
    calls = {(e.body["run_id"], e.body["call_id"]): e.time
             for e, _ in audit.entries() if e.kind == "call"}
    waits: dict[str, list[int]] = {}
    for e in _decisions(audit):
        waits.setdefault(e.body["approver"], []).append(
            e.time - calls[(e.body["run_id"], e.body["call_id"])]
        )
    got = {r["approver"]: r for r in rows(audit, canned_queries()["approval_wait"])}
    assert set(got) == set(waits)
    for approver, values in waits.items():
        assert got[approver]["decisions"] == len(values)
        # microseconds (the TIMESTAMP columns, which hold every time; *_ns may be NULL)
        assert got[approver]["max_wait_s"] == pytest.approx(max(values) / 1e9, abs=1e-6)
        mean = sum(values) / len(values) / 1e9
        assert got[approver]["mean_wait_s"] == pytest.approx(mean, abs=1e-6)


def test_approval_wait_counts_a_decision_past_64_bit_ns(tmp_path):
    # before: the query read the *_ns columns, NULL for such a time: counted, not averaged
    ledger = Ledger(tmp_path)
    w = EvidenceWriter(ledger)
    for call, decided in (("c1", T0 + 2 * 10**9), ("c2", 2**63 + 10**9)):
        w.call(run_id="r", call_id=call, agent="a", tool="t", arguments="{}",
               needs_approval=True, time_ns=T0)
        w.decision(run_id="r", call_id=call, decision="approve", approver="u", time_ns=decided)
    (row,) = rows(ledger, canned_queries()["approval_wait"])
    late = (2**63 + 10**9) // 1000 - T0 // 1000
    assert row["decisions"] == 2 and row["max_wait_s"] == pytest.approx(late / 1e6)
    assert row["mean_wait_s"] == pytest.approx((late / 1e6 + 2) / 2)


def test_outputs_persisted_for_run(audit):
    got = rows(audit, canned_queries()["outputs_persisted_for_run"], run_id="r1")
    want = [e.seq for e, _ in audit.entries() if e.kind == "session_item"
            and e.body["item_type"] == "function_call_output" and e.body["run_id"] == "r1"]
    assert [r["seq"] for r in got] == want
    assert {r["call_id"]: r["tool"] for r in got}["ghost"] is None
    assert {r["call_id"]: r["tool"] for r in got}["c6"] == ODD_TOOL


# -- the index reads the verifier's facts -----------------------------------------------


def _rule_ledgers(tmp_path: Path) -> list[Ledger]:
    ledgers = []
    for path in sorted((DATA / "rules").glob("*.jsonl")):
        ledger = Ledger(tmp_path / path.stem)
        ingest_file(EvidenceWriter(ledger), path)
        ledgers.append(ledger)
    return ledgers


def test_deriver_report_is_the_verifiers(tmp_path, audit):
    for ledger in [audit, *_rule_ledgers(tmp_path)]:
        ours, _ = derive(ledger.scan())
        theirs = verify_records(ledger.scan())
        assert (ours.tree_size, ours.root_hash) == (theirs.tree_size, theirs.root_hash)
        assert ours.violations == theirs.violations, ledger.directory
        assert ours.calls == theirs.calls


def test_call_chains_rows_are_chains_call_chains(audit, report):
    times = {r.index: decode_entry(r.data).time for r in audit.scan() if isinstance(r, Record)}
    first_run = {key: times[call.executions[0]]
                 for key, call in report.calls.items() if call.executions}
    want = call_chains(report.calls.values(), first_run)
    got = rows(audit, "SELECT * FROM call_chains ORDER BY call_seq")
    assert len(got) == len(want) == len(report.calls)
    for row, chain in zip(got, want, strict=True):
        assert ident(row) == (chain.run_id, chain.scope, chain.call_id)
        assert row["arguments_digest"] == "sha256:" + chain.args_digest.hex()
        assert (row["decision"], row["sticky"], row["approver"], row["decided_at_ns"]) == (
            chain.decision, chain.sticky, chain.approver, chain.decided_at)
        assert (row["executed_at_ns"], row["persisted"], row["status"]) == (
            chain.executed_at, chain.persisted, chain.status)
        assert tuple(row["violations"]) == chain.violations
        assert row["needs_approval"] == chain.needs_approval


def test_index_root_and_size_are_verify_json(audit, report):
    (meta,) = rows(audit, "SELECT tree_size, root_hash FROM ledger_index")
    assert meta == {"tree_size": report.tree_size,
                    "root_hash": report.to_json()["root_hash"]}


def test_every_view_equals_the_in_memory_derivation(audit):
    update_index(audit)
    _, derived = derive(audit.scan())
    for name in VIEWS:
        assert table(audit, name).equals(derived[name]), name


def test_timestamp_columns_are_the_ns_columns_in_microseconds(audit):
    for name, view in VIEWS.items():
        for column, kind in view.columns:
            if kind == "TIMESTAMP":
                bad = rows(audit, f"SELECT count(*) AS n FROM {name} WHERE {column} IS DISTINCT "
                                  f"FROM make_timestamp({column}_ns // 1000)")
                assert bad == [{"n": 0}], (name, column)


# -- incremental, rebuildable ------------------------------------------------------------


def _copy_prefix(source: Ledger, target: Path, records: list[Record], n: int) -> None:
    target.mkdir(exist_ok=True)
    end = records[n - 1].end if n else 0
    with open(source.store.path, "rb") as fh:
        (target / "log.bin").write_bytes(fh.read(end))


def test_incremental_updates_equal_a_rebuild(audit, tmp_path):
    records = [r for r in audit.scan() if isinstance(r, Record)]
    grown = Ledger(tmp_path / "grown")
    for n in [1, 2, 3, 7, 8, 20, 21, 22, 40, len(records) - 3, len(records)]:
        _copy_prefix(audit, grown.directory, records, n)
        info = update_index(grown)
        assert info.tree_size == n and (info.rebuilt is (n == 1))
    update_index(audit)  # this test may run first (xdist): build the reference index
    for name in VIEWS:
        assert table(grown, name).equals(table(audit, name)), name


def test_appended_entries_appear_in_the_next_query(tmp_path):
    ledger = Ledger(tmp_path)
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    before = rows(ledger, "SELECT count(*) AS n FROM entries")[0]["n"]
    w = EvidenceWriter(ledger)
    w.call(run_id="r9", call_id="x1", agent="a", tool="t", arguments="{}", needs_approval=True)
    w.execution(run_id="r9", call_id="x1", arguments="{}", result="ok")
    assert rows(ledger, "SELECT count(*) AS n FROM entries")[0]["n"] == before + 2
    got = rows(ledger, "SELECT status, violations FROM call_chains WHERE call_id = 'x1'")
    assert got == [{"status": "executed", "violations": [APPROVAL_BINDING]}]
    assert update_index(ledger).added == 0


def test_deleting_the_index_rebuilds_identical_rows(audit, tmp_path):
    copy = Ledger(tmp_path / "copy")
    shutil.copytree(audit.directory, copy.directory)
    update_index(copy)
    before = {name: table(copy, name) for name in VIEWS}
    for path in index_mod.index_path(copy).parent.glob("index.duckdb*"):
        path.unlink()
    info = update_index(copy)
    assert info.rebuilt and info.added == info.tree_size
    for name in VIEWS:
        assert table(copy, name).equals(before[name]), name


def test_a_replaced_log_is_reindexed_from_scratch(tmp_path):
    ledger = Ledger(tmp_path / "l")
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    update_index(ledger)
    other = Ledger(tmp_path / "o")
    ingest_file(EvidenceWriter(other), DATA / "rules" / "exactly_once.jsonl")
    shutil.copy(other.store.path, ledger.store.path)
    info = update_index(ledger)
    assert info.rebuilt and info.root_hash == verify_records(other.scan()).root_hash


def test_other_code_rebuilds_the_index(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path)
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    assert update_index(ledger).rebuilt
    assert not update_index(ledger).rebuilt
    monkeypatch.setattr(index_mod, "_fingerprint", lambda: "other code")
    assert update_index(ledger).rebuilt


@pytest.mark.parametrize(
    "damage",
    [
        "DELETE FROM state.deriver",  # no place
        "UPDATE state.deriver SET last_hash = 'short'::BLOB",  # not an entry hash
        "UPDATE state.tree_peaks SET peak = 'x'::BLOB",  # not a tree at that size
        "UPDATE state.calls SET authorized_by = 999999",  # a decision not stored
        "DROP TABLE state.decisions",  # another schema
    ],
)
def test_a_damaged_stored_state_is_rebuilt_not_an_internal_error(tmp_path, damage):
    ledger = Ledger(tmp_path / "l")
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    update_index(ledger)
    with index_mod.duckdb.connect(str(index_mod.index_path(ledger))) as con:
        if "authorized_by" in damage:
            assert con.execute("SELECT count(*) FROM state.calls WHERE authorized_by IS NOT NULL"
                               ).fetchone()[0] > 0
        con.execute(damage)
    EvidenceWriter(ledger).run_end(run_id="r1", status="completed")
    info = update_index(ledger)
    assert info.rebuilt and info.tree_size == 26
    _, derived = derive(ledger.scan())
    for name in VIEWS:
        assert table(ledger, name).equals(derived[name]), name


def test_a_torn_tail_is_not_indexed_and_a_writer_meanwhile_is_harmless(tmp_path):
    ledger = Ledger(tmp_path)
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    with open(ledger.store.path, "ab") as fh:
        fh.write(frame(b"first record of a group still being appended", more=True))
    assert update_index(ledger).tree_size == 25
    EvidenceWriter(ledger).run_end(run_id="r1", status="completed")  # cuts the tail back
    assert rows(ledger, "SELECT max(seq) AS s FROM entries") == [{"s": 25}]


def test_queries_while_a_writer_appends(tmp_path):
    ledger = Ledger(tmp_path)
    writer = EvidenceWriter(ledger)
    writer.run_end(run_id="r0", status="completed")
    errors: list[BaseException] = []

    def append() -> None:
        try:
            for i in range(60):
                with writer.atomic():
                    writer.call(run_id="r", call_id=f"c{i}", agent="a", tool="t",
                                arguments="{}", needs_approval=False)
                    writer.execution(run_id="r", call_id=f"c{i}", arguments="{}", result="ok")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=append)
    thread.start()
    sizes = []
    while thread.is_alive():
        result = run_query(ledger, "SELECT count(*) FROM entries")
        assert result.rows[0][0] == result.tree_size
        assert result.tree_size % 2 == 1  # whole groups only
        sizes.append(result.tree_size)
    thread.join()
    assert not errors and sizes == sorted(sizes)
    assert run_query(ledger, "SELECT count(*) FROM calls").rows == [(60,)]
    _, derived = derive(ledger.scan())
    for name in VIEWS:
        assert table(ledger, name).equals(derived[name]), name


def test_a_damaged_log_stops_the_index(tmp_path):
    ledger = Ledger(tmp_path)
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    data = bytearray(ledger.store.path.read_bytes())
    data[200] ^= 0x01
    ledger.store.path.write_bytes(bytes(data))
    with pytest.raises(EvidenceError, match="log damaged at seq"):
        update_index(ledger)


def test_deriver_refuses_a_broken_prev_link(tmp_path):
    ledger = Ledger(tmp_path)
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    records = [r for r in ledger.scan() if isinstance(r, Record)]
    deriver = Deriver()
    deriver.feed(check_batch(records[:1]))
    skipped = [Record(1, records[2].offset, records[2].data, True)]
    with pytest.raises(EvidenceError, match="seq 1"):
        deriver.feed(check_batch(skipped))


def test_no_ledger_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        update_index(Ledger(tmp_path / "none"))
    assert not FileLogStore(tmp_path / "none").exists()


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO calls SELECT * FROM calls", "UPDATE calls SET tool = 'x'",
        "DELETE FROM calls", "CREATE TABLE x AS SELECT 1", "DROP TABLE calls",
        "ATTACH 'x.db'", "COPY calls TO 'x.csv'", "INSTALL httpfs", "LOAD httpfs",
        "PRAGMA version", "SET threads = 1", "CALL pragma_version()", "CHECKPOINT",
        "SELECT 1; DROP TABLE calls", "CREATE TEMP TABLE t AS SELECT 1", "EXPORT DATABASE 'x'",
    ],
)
def test_writing_statements_are_refused_before_they_run(tmp_path, sql):
    with pytest.raises(UsageError, match=r"refused|exactly one"):
        check_read_only(sql)


def test_reads_of_files_are_refused_by_the_connection(audit):
    with pytest.raises(UsageError, match="SQL error: Permission Error"):
        run_query(audit, "SELECT * FROM read_csv('/etc/passwd')")


def test_docs_describe_every_column_of_every_view():
    text = DOCS.read_text(encoding="utf-8")
    sections = re.split(r"^### `(\w+)`", text, flags=re.M)
    documented = {}
    for name, body in zip(sections[1::2], sections[2::2], strict=True):
        documented[name] = tuple(re.findall(r"^\| `(\w+)` \| ([A-Z\[\]]+) \|", body, re.M))
    for name, view in VIEWS.items():
        assert documented.get(name) == view.columns, name


def test_gated_without_approval_agrees_with_the_verifier_after_a_double_ingest(tmp_path):
    # the same file ingested twice: the second execution is exactly_once, not unapproved
    events = DATA / "cases" / "ingested_twice.jsonl"
    assert run_cli("ingest", str(events), "--ledger", str(tmp_path)).code == 0
    assert run_cli("ingest", str(events), "--ledger", str(tmp_path), "--again").code == 0
    verdict = json.loads(run_cli("verify", "--ledger", str(tmp_path), "--json").out)
    assert {v["rule"] for v in verdict["violations"]} == {"exactly_once"}
    rows = run_cli("query", "--ledger", str(tmp_path), "--format", "json",
                   "SELECT call_id FROM call_chains WHERE needs_approval"
                   " AND executed_at IS NOT NULL"
                   " AND (decision IS NULL OR decided_at > executed_at)")
    assert rows.code == 0 and json.loads(rows.out) == []


def test_an_update_stopped_midway_leaves_the_index_as_it_was_and_is_resumed(
    tmp_path, monkeypatch
):
    # before: each chunk was committed as it was inserted (a COMMIT per chunk), so an
    # update killed midway left rows past the indexed size and the next one rebuilt it all
    ledger = Ledger(tmp_path)
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    update_index(ledger)
    writer = EvidenceWriter(ledger)
    for i in range(7):
        writer.run_end(run_id=f"late-{i}", status="completed")
    _killed_midway(ledger, monkeypatch)  # after two chunks of three were inserted
    with connect_read_only(index_mod.index_path(ledger)) as con:
        assert con.execute("SELECT count(*), max(seq) FROM entries").fetchall() == [(25, 24)]
        assert con.execute("SELECT tree_size FROM ledger_index").fetchall() == [(25,)]
    info = update_index(ledger)
    assert (info.rebuilt, info.added, info.tree_size) == (False, 7, 32)
    _, derived = derive(ledger.scan())
    for name in VIEWS:
        assert table(ledger, name).equals(derived[name]), name


def test_an_update_holds_duckdb_to_its_memory_limit(tmp_path, monkeypatch):
    # before: DuckDB's default buffer pool (80% of RAM) cached every block the update wrote
    ledger = Ledger(tmp_path)
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    limits = []
    save = Deriver.save

    def noting_the_limit(self, con, *args):
        limits.append(con.execute("SELECT current_setting('memory_limit')").fetchone())
        return save(self, con, *args)

    monkeypatch.setattr(Deriver, "save", noting_the_limit)
    update_index(ledger)
    expected = index_mod.duckdb.connect(config={"memory_limit": index_mod.MEMORY_LIMIT})
    assert limits == [expected.execute("SELECT current_setting('memory_limit')").fetchone()]
    assert limits != [index_mod.duckdb.connect().execute(
        "SELECT current_setting('memory_limit')").fetchone()]


@pytest.mark.parametrize("part_calls", [1, 20_000])  # runs restored in many parts, or one
def test_saved_state_loads_back_to_equal_call_states(audit, monkeypatch, part_calls):
    monkeypatch.setattr(index_state, "PART_CALLS", part_calls)
    restore = RuleEngine.from_state_parts.__func__
    monkeypatch.setattr(RuleEngine, "from_state_parts", classmethod(  # runs retired between parts
        lambda cls, parts, spill=None, live_limit=0: restore(cls, parts, spill, 0)))
    deriver = Deriver()
    records = [record for record in audit.scan() if isinstance(record, Record)]
    deriver.feed(check_batch(records))
    deriver.take()
    with index_mod.duckdb.connect() as con:
        for statement in state_schema():
            con.execute(statement)
        deriver.save(con)
        loaded = Deriver.restored(con)
    assert loaded is not None
    assert loaded.engine._retired > 0  # the runs did go to the spill
    assert loaded.engine.state_rows() == deriver.engine.state_rows()
    assert (loaded.size, loaded.offset, loaded.last_hash, loaded.tree.root()) == (
        deriver.size, deriver.offset, deriver.last_hash, deriver.tree.root())
    calls = deriver.engine.calls
    assert loaded.engine.calls == calls and any(c.decisions for c in calls.values())
    assert loaded.engine.findings == deriver.engine.findings


def _killed_midway(ledger: Ledger, monkeypatch) -> None:
    """An update that dies after committing some chunks (CHUNK made tiny)."""

    def killed(self, con, *args):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(index_mod, "CHUNK", 3)
        patch.setattr(Deriver, "save", killed)
        with pytest.raises(KeyboardInterrupt):
            update_index(ledger)


def test_a_query_after_a_killed_update_and_a_cut_back_log_rebuilds(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path)
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    update_index(ledger)
    indexed = ledger.store.path.read_bytes()
    writer = EvidenceWriter(ledger)
    for i in range(7):
        writer.run_end(run_id=f"late-{i}", status="completed")
    _killed_midway(ledger, monkeypatch)
    ledger.store.path.write_bytes(indexed)  # the log as it was when last indexed
    result = run_query(ledger, "SELECT count(*), max(seq) FROM entries")
    assert result.rows == [(25, 24)] and result.tree_size == 25


def test_ctrl_c_while_waiting_for_the_insert_thread_stops_it_before_returning():
    interrupted = []

    class Connection:  # what the insert thread calls
        def execute(self, sql):
            pass

        def interrupt(self):
            interrupted.append(True)

    stored = []

    class SlowChunk:
        def insert(self, con):
            time.sleep(1.5)  # a chunk being stored when Ctrl-C comes (at 0.3 s)
            stored.append(True)

    inserter = index_mod._Inserter(Connection())
    ctrl_c = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    # Ctrl-C raises KeyboardInterrupt here even in an xdist worker, which ignores SIGINT
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctrl_c.start()
    try:
        with pytest.raises(KeyboardInterrupt), inserter:
            inserter.put(SlowChunk())
        # before: Ctrl-C came back at once, with the thread still using the connection
        assert stored and interrupted
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("late", [2**63, 2**64 - 1])
def test_an_entry_time_past_64_bit_ns_is_indexed_with_its_timestamp(tmp_path, late):
    # before: one such entry anywhere in the log (the format holds times up to 2^64-1 ns)
    # made query, export and trace refuse the whole ledger, exit 1, while verify passed
    ledger = Ledger(tmp_path)
    w = EvidenceWriter(ledger)
    w.call(run_id="r", call_id="c", agent="a", tool="t", arguments="{}", needs_approval=False,
           time_ns=T0)
    w.execution(run_id="r", call_id="c", arguments="{}", result="ok", time_ns=late)
    assert verify_ledger(ledger).ok
    rows = run_query(ledger, "SELECT time, time_ns FROM entries ORDER BY seq").rows
    epoch = dt.datetime(1970, 1, 1)
    assert rows == [(epoch + dt.timedelta(microseconds=T0 // 1000), T0),
                    (epoch + dt.timedelta(microseconds=late // 1000), None)]
    (chain,) = run_query(ledger, "SELECT executed_at, executed_at_ns FROM call_chains").rows
    assert chain == rows[1]
    _, derived = derive(ledger.scan())
    for name in VIEWS:
        assert table(ledger, name).equals(derived[name]), name
    assert run_cli("trace", "c", "--ledger", str(tmp_path)).code == 0
    key = SigningKey.generate(tmp_path.parent / f"{tmp_path.name}.key", "example.com/log")
    for bound, kept in (("--since", 1), ("--until", 1)):  # T0 lies before 2026
        out = tmp_path.parent / f"{tmp_path.name}-export{bound}"  # outside the ledger
        done = run_cli("export", "--ledger", str(tmp_path), "--format", "jsonl", "--out",
                       str(out), bound, "2026-01-01", "--json", "--key", str(key.path))
        assert done.code == 0, done.err
        assert [f["rows"] for f in json.loads(done.out)["files"]
                if f.get("view") == "entries"] == [
            kept]  # a time past 2^63-1 ns is after any --since and before no --until
        assert run_cli("verify-export", str(out), "--ledger", str(tmp_path),
                       "--verifier-key", key.verifier_key).code == 0


def test_a_finding_names_the_call_its_entry_is_attributed_to(tmp_path):
    ledger = Ledger(tmp_path)
    writer = EvidenceWriter(ledger)
    writer.call(run_id="r", scope=["ask:c0"], call_id="c1", agent="a", tool="t",
                arguments="{}", needs_approval=True)
    writer.decision(run_id="r", scope=["ask:c0"], call_id="c1", decision="approve",
                    approver="u", arguments="{}")
    writer.execution(run_id="r", call_id="c1", arguments="{}", result="ok")  # top level
    (finding,) = rows(ledger, "SELECT rule, call_seq FROM violations")
    (execution,) = rows(ledger, "SELECT call_seq FROM executions")
    assert finding == {"rule": "nested_ownership", "call_seq": 0} and execution["call_seq"] == 0


def test_a_decision_after_the_execution_does_not_make_the_chain_sticky(tmp_path):
    ledger = Ledger(tmp_path)
    writer = EvidenceWriter(ledger)
    writer.call(run_id="r", call_id="c1", agent="a", tool="t", arguments="{}",
                needs_approval=True)
    writer.decision(run_id="r", call_id="c1", decision="approve", approver="alice",
                    arguments="{}")
    writer.execution(run_id="r", call_id="c1", arguments="{}", result="ok")
    writer.decision(run_id="r", call_id="c1", decision="reject", approver="bob",
                    arguments="{}")
    (chain,) = rows(ledger, "SELECT decision, sticky, approver FROM call_chains")
    assert chain == {"decision": "approve", "sticky": False, "approver": "alice"}


def _damaged_in_a_data_block(path: Path) -> bytes:
    """The index file with one of its data blocks damaged: it still opens and its metadata
    reads, but DuckDB finds a checksum mismatch when a view is read."""
    original = path.read_bytes()
    for offset in range(4096 * 3, len(original), 16_384):
        data = bytearray(original)
        data[offset:offset + 4096] = bytes(b ^ 0x5A for b in data[offset:offset + 4096])
        path.write_bytes(bytes(data))
        try:
            with connect_read_only(path) as con:
                con.execute("SELECT * FROM ledger_index").fetchall()
        except Exception:
            continue  # the metadata itself: an index that fails to open is rebuilt anyway
        try:
            with connect_read_only(path) as con:
                for name in VIEWS:
                    con.execute(f"SELECT * FROM {name}").fetchall()
        except Exception as exc:
            if "Corrupt database file" in str(exc):
                return bytes(data)
    raise AssertionError("no offset damages a data block alone")


def test_a_damaged_default_index_is_rebuilt_by_query_and_export(tmp_path):
    ledger = Ledger(tmp_path / "l")
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    update_index(ledger)
    path = index_mod.index_path(ledger)
    damaged = _damaged_in_a_data_block(path)
    every_row = " + ".join(f"(SELECT count(DISTINCT t) FROM {name} t)" for name in VIEWS)
    total = sum(table.num_rows for table in derive(ledger.scan())[1].values())
    result = run_cli("query", "--ledger", str(ledger.directory), f"SELECT {every_row} AS n",
                     "--format", "csv")
    assert result.code == 0 and result.out.split() == ["n", str(total)], result.err
    path.write_bytes(damaged)
    out = tmp_path / "export"
    key = SigningKey.generate(tmp_path / "k.key", "example.com/log")
    result = run_cli("export", "--ledger", str(ledger.directory), "--format", "jsonl",
                     "--out", str(out), "--key", str(key.path))
    assert result.code == 0, result.err
    assert run_cli("verify-export", str(out), "--ledger", str(ledger.directory),
                   "--verifier-key", key.verifier_key).code == 0


def test_an_incremental_update_reports_progress_over_the_bytes_it_reads(tmp_path):
    # before: bytes done and total counted the log already indexed, so the bar's estimate
    # of the entries to come (entries * total / done) was too small and it started late
    ledger = Ledger(tmp_path)
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    update_index(ledger)
    indexed = ledger.store.path.stat().st_size
    writer = EvidenceWriter(ledger)
    for i in range(7):
        writer.run_end(run_id=f"late-{i}", status="completed")
    reports = []
    update_index(ledger, progress=lambda *report: reports.append(report))
    assert reports[-1] == (7, ledger.store.path.stat().st_size - indexed,
                           ledger.store.path.stat().st_size - indexed)


def test_digests_are_blobs_in_the_raw_tables_and_sha256_text_in_the_views(tmp_path):
    # before: every digest was stored as 71 characters of text (the index 5x its floor)
    ledger = Ledger(tmp_path)
    ingest_file(EvidenceWriter(ledger), DATA / "rules" / "valid.jsonl")
    info = update_index(ledger)
    types = "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = ? AND " \
        "table_name = ? ORDER BY column_index"
    hashes = [entry_hash(r.data) for r in ledger.scan() if isinstance(r, Record)]
    with connect_read_only(info.path) as con:
        for view in VIEWS.values():
            assert tuple(con.execute(types, ["main", view.name]).fetchall()) == view.columns
            stored = dict(con.execute(types, ["raw", view.name]).fetchall())
            assert {n: stored[n] for n in view.digests} == {
                n: "BLOB[]" if t.endswith("[]") else "BLOB" for n, t in view.columns
                if n in view.digests}
            assert {n: stored[n] for n, _ in view.columns if n not in view.digests} == {
                n: t for n, t in view.columns if n not in view.digests}
        assert VIEWS["calls"].digests == {"entry_hash", "arguments_digest", "arguments_payload"}
        rows = con.execute("SELECT e.entry_hash, r.entry_hash, e.refs, r.refs FROM entries e "
                           "JOIN raw.entries r USING (seq) ORDER BY seq").fetchall()
    assert [r[1] for r in rows] == hashes
    assert [r[0] for r in rows] == ["sha256:" + h.hex() for h in hashes]
    assert any(r[2] for r in rows)
    assert all(r[2] == ["sha256:" + b.hex() for b in r[3]] for r in rows)
    joined = ("SELECT count(*) FROM {0}calls c JOIN {0}executions e "
              "ON e.arguments_digest = c.arguments_digest")
    as_text, as_blobs = (run_query(ledger, joined.format(p)).rows for p in ("", "raw."))
    assert as_text == as_blobs and as_text[0][0] > 0


def _many_runs(ledger: Ledger, runs: int) -> None:
    """``runs`` runs of one executed call each, every other run left open."""
    writer = EvidenceWriter(ledger, clock=lambda: 0)
    with writer.atomic():
        for i in range(runs):
            digest = hashlib.sha256(b"%d" % i).digest()
            ident = {"run_id": f"run-{i}", "scope": [], "call_id": f"c{i}"}
            for kind, body in [
                ("call", {**ident, "agent": "a", "tool": "t", "args_digest": digest,
                          "args_form": "jcs", "args_payload": digest, "needs_approval": False}),
                ("execution", {**ident, "args_digest": digest, "args_form": "jcs",
                               "args_payload": digest, "result_digest": digest}),
            ]:
                writer.append(kind, {name: body.get(name) for name in BODY_FIELDS[kind]},
                              time_ns=i)
            if i % 2:
                writer.run_end(run_id=f"run-{i}", status="completed")


def test_an_update_reads_and_writes_the_state_of_the_runs_it_touches_only(tmp_path,
                                                                           monkeypatch):
    ledger = Ledger(tmp_path / "l")
    _many_runs(ledger, 400)
    update_index(ledger)
    read, written = [], Counter()
    restored = index_state.StoredSpill.__init__

    def spy(self, con):
        restored(self, con)
        read.append(self)

    def count(self, table, rows):
        rows = list(rows)
        written[table] += len(rows)
        add(self, table, rows)

    add = index_state._Appender.add
    monkeypatch.setattr(index_state.StoredSpill, "__init__", spy)
    monkeypatch.setattr(index_state._Appender, "add", count)
    EvidenceWriter(ledger).run_end(run_id="run-4", status="completed")  # an open run
    info = update_index(ledger)
    assert not info.rebuilt and len(read) == 1
    assert read[0].rows_read < 10, read[0].rows_read  # run-4's rows, of some 2,000 stored
    assert written["calls"] == 1 and sum(written.values()) < 20, written  # run-4's again
    monkeypatch.undo()
    for name in VIEWS:
        assert table(ledger, name).equals(derive(ledger.scan())[1][name]), name
