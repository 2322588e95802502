"""Session doctor, repair: plan from the ledger's evidence, dry run, --apply (backup, one
transaction, session_repair entry), refusals, crashes at each step, leftover markers,
and the Session-object API."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession
from agents.memory import SessionSettings

from evidence_ledger.format import schemas
from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.record.writer import EvidenceWriter, item_bytes
from evidence_ledger.sessions import apply_store
from evidence_ledger.sessions.apply_session import repair_session
from evidence_ledger.sessions.apply_store import apply_store_repair
from evidence_ledger.sessions.evidence import load_evidence
from evidence_ledger.sessions.markers import pending_repair_notices
from evidence_ledger.sessions.plan import plan_repair
from evidence_ledger.sessions.report import scan_store
from evidence_ledger.sessions.stores import read_store
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.log_store import FileLogStore
from tests.helpers import rewrite_payload, run_cli
from tests.test_sessions import POISONED, call, out, reply, user, write_dump, write_sdk_store

RAW_ARGS = '{"key": "k1",  "value":"v2"}'  # odd spacing: the raw string must come back exactly
HEALTHY: list[Any] = [user(), call("a"), out("a"), reply()]
REPO = Path(__file__).resolve().parent.parent


def record_run(ledger: Path, run_id: str = "r1", *, update_args: str = RAW_ARGS) -> EvidenceWriter:
    """What the recorder writes for the case: two calls and their executions."""
    writer = EvidenceWriter(ledger)
    writer.call(run_id=run_id, call_id="c-lookup", agent="records", tool="lookup",
                arguments='{"key":"k1"}')
    writer.execution(run_id=run_id, call_id="c-lookup", arguments='{"key":"k1"}',
                     agent="records", tool="lookup", result="record k1")
    writer.call(run_id=run_id, call_id="c-update", agent="records", tool="update_record",
                arguments=update_args)
    writer.execution(run_id=run_id, call_id="c-update", arguments=update_args,
                     agent="records", tool="update_record", result="updated k1=v2")
    writer.run_end(run_id=run_id, status="completed")
    return writer


@pytest.fixture
def case(tmp_path: Path) -> tuple[Path, Path]:
    store, ledger = tmp_path / "sessions.db", tmp_path / "ledger"
    write_sdk_store(store, {"poisoned": POISONED, "healthy": HEALTHY})
    record_run(ledger)
    return store, ledger


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rows(store: Path) -> list[tuple]:
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return conn.execute(
            "SELECT id, session_id, message_data, created_at FROM agent_messages ORDER BY id"
        ).fetchall()
    finally:
        conn.close()


def sdk_items(store: Path, session_id: str) -> list:
    async def read() -> list:
        session = SQLiteSession(session_id, str(store))
        try:
            return list(await session.get_items())
        finally:
            session.close()

    return asyncio.run(read())


def repaired_case_items() -> list:
    inserted = {"arguments": RAW_ARGS, "call_id": "c-update", "name": "update_record",
                "type": "function_call"}
    return [*POISONED[:3], inserted, *POISONED[3:]]


def session_repair_entries(ledger: Path) -> list:
    return [(e, h) for e, h in Ledger(ledger).entries() if e.kind == "session_repair"]


# -- dry run and --apply ----------------------------------------------------------------


def test_dry_run_prints_plan_and_leaves_the_file_byte_identical(case):
    store, ledger = case
    before = sha(store)
    result = run_cli("repair-session", str(store), "--ledger", str(ledger))
    assert result.code == 0, result.err
    assert "insert function_call c-update (update_record) before item 3" in result.out
    assert f"arguments {RAW_ARGS}" in result.out
    assert "dry run: 1 insertion(s) in 1 session(s)" in result.out
    assert sha(store) == before
    assert not list(store.parent.glob("*.bak"))
    assert session_repair_entries(ledger) == []


def test_apply_repairs_backs_up_records_and_verifies(case):
    store, ledger = case
    healthy_rows = [r for r in rows(store) if r[1] == "healthy"]
    old_rows = rows(store)
    size_before = len(list(Ledger(ledger).entries()))

    result = run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                     "--by", "alice@example.com")
    assert result.code == 0, result.err
    assert "repaired: 1 insertion(s)" in result.out

    # the store: the call sits just before its output, order kept, other session untouched
    assert sdk_items(store, "poisoned") == repaired_case_items()
    assert [r for r in rows(store) if r[1] == "healthy"] == healthy_rows
    assert run_cli("scan-session", str(store)).code == 0

    # the backup holds the store as it was
    (backup,) = store.parent.glob("sessions.db.*.bak")
    assert rows(backup) == old_rows

    # the ledger: one session_repair entry after the old ones, referring to the call
    (entry, _), = session_repair_entries(ledger)
    assert entry.seq == size_before
    body = entry.body
    assert (body["session_id"], body["call_id"], body["tool"], body["position"], body["by"]) == (
        "poisoned", "c-update", "update_record", 3, "alice@example.com")
    assert body["store"] == str(store.resolve()) and body["backup"] == str(backup.resolve())
    calls = {e.body["call_id"]: h for e, h in Ledger(ledger).entries() if e.kind == "call"}
    assert entry.refs == (calls["c-update"],)
    payloads = Ledger(ledger).payloads
    assert payloads.get(body["item_digest"]) == item_bytes(repaired_case_items()[3])
    assert payloads.get(body["history_digest"]) == item_bytes(POISONED)
    assert not list((ledger / "repairs").glob("*.json"))

    verified = run_cli("verify", "--ledger", str(ledger))
    assert verified.code == 0, verified.out

    # a second run finds nothing to do
    again = run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply", "--by", "a")
    assert again.code == 0 and "nothing to repair" in again.out
    assert len(session_repair_entries(ledger)) == 1


def test_repaired_session_feeds_the_model_calls_before_outputs(case):
    """What the SDK will send next: every output follows its call."""
    store, ledger = case
    assert run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                   "--by", "alice").code == 0
    seen: set[str] = set()
    for item in sdk_items(store, "poisoned"):
        if item.get("type") == "function_call":
            seen.add(item["call_id"])
        if item.get("type") == "function_call_output":
            assert item["call_id"] in seen


def test_several_orphans_in_one_session_keep_their_order(tmp_path: Path):
    store, ledger = tmp_path / "s.db", tmp_path / "ledger"
    items = [user(), out("c-lookup", "record k1"), user("more"), out("c-update", "updated"),
             reply()]
    write_sdk_store(store, {"s": items})
    record_run(ledger)
    assert run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                   "--by", "bob").code == 0
    got = sdk_items(store, "s")
    assert [i.get("type", "message") for i in got] == [
        "message", "function_call", "function_call_output", "message", "function_call",
        "function_call_output", "message"]
    assert [e.body["position"] for e, _ in session_repair_entries(ledger)] == [1, 4]
    assert scan_store(store).ok


def test_store_in_rollback_journal_mode(tmp_path: Path):
    """A store not in WAL mode: the backup reader still works while the write lock is held."""
    store, ledger = tmp_path / "s.db", tmp_path / "ledger"
    write_sdk_store(store, {"s": POISONED})
    conn = sqlite3.connect(store)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    record_run(ledger)
    assert run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                   "--by", "bob").code == 0
    assert scan_store(store).ok


# -- refusals and bad usage -------------------------------------------------------------


def test_refused_when_the_ledger_has_no_call_exit_1_nothing_changed(tmp_path: Path):
    store, ledger = tmp_path / "s.db", tmp_path / "ledger"
    write_sdk_store(store, {"s": POISONED})
    EvidenceWriter(ledger).call(run_id="r", call_id="c-lookup", agent="a", tool="lookup",
                                arguments="{}")
    before = sha(store)
    for extra in ((), ("--apply", "--by", "alice")):
        result = run_cli("repair-session", str(store), "--ledger", str(ledger), *extra)
        assert result.code == 1
        assert "records no call with call_id c-update" in result.out
        assert result.err.count("\n") == 1 and "refused" in result.err
        assert sha(store) == before
    assert not list(tmp_path.glob("*.bak"))
    assert session_repair_entries(ledger) == []


def test_refused_when_the_arguments_payload_is_redacted(case):
    store, ledger = case
    book = Ledger(ledger)
    (update,) = [e for e, _ in book.entries()
                 if e.kind == "call" and e.body["call_id"] == "c-update"]
    assert book.payloads.remove(update.body["args_payload"])  # gone, no redaction entry
    result = run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                     "--by", "alice")
    assert result.code == 1 and "missing from the payload store" in result.out
    assert scan_store(store, session_id="poisoned").all_findings


def test_refused_when_the_arguments_payload_was_altered(case):
    store, ledger = case
    book = Ledger(ledger)
    (update,) = [e for e, _ in book.entries()
                 if e.kind == "call" and e.body["call_id"] == "c-update"]
    rewrite_payload(ledger, update.body["args_payload"], b'{"key":"k9"}')
    result = run_cli("repair-session", str(store), "--ledger", str(ledger))
    assert result.code == 1 and "does not match its digest" in result.out


def test_ambiguous_call_id_refused_unless_the_session_items_name_the_run(tmp_path: Path):
    store, ledger = tmp_path / "s.db", tmp_path / "ledger"
    write_sdk_store(store, {"poisoned": POISONED})
    record_run(ledger, "r1", update_args='{"value":"old"}')
    writer = record_run(ledger, "r2")
    result = run_cli("repair-session", str(store), "--ledger", str(ledger))
    assert result.code == 1 and "2 recorded calls have call_id c-update" in result.out
    # the recorder's session_item entry says which run put the output in this session
    writer.session_item(run_id="r2", session_id="poisoned", item=POISONED[3])
    result = run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                     "--by", "alice")
    assert result.code == 0, result.out + result.err
    (entry, _), = session_repair_entries(ledger)
    assert entry.body["run_id"] == "r2"
    assert sdk_items(store, "poisoned")[3]["arguments"] == RAW_ARGS


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--apply",), "--apply needs --by"),
        (("--apply", "--by", " "), "--apply needs --by"),
    ],
)
def test_apply_needs_by_exit_2(case, args, message):
    store, ledger = case
    result = run_cli("repair-session", str(store), "--ledger", str(ledger), *args)
    assert result.code == 2 and message in result.err


def test_no_ledger_exit_2(case, tmp_path: Path):
    store, _ = case
    result = run_cli("repair-session", str(store), "--ledger", str(tmp_path / "none"))
    assert result.code == 2 and "no ledger" in result.err


def test_unreadable_source_exit_2(case, tmp_path: Path):
    _, ledger = case
    junk = tmp_path / "junk"
    junk.write_bytes(bytes(range(256)))
    result = run_cli("repair-session", str(junk), "--ledger", str(ledger))
    assert result.code == 2 and result.err.count("\n") == 1


def test_jsonl_dump_can_be_planned_not_applied(case, tmp_path: Path):
    _, ledger = case
    dump = tmp_path / "dump.jsonl"
    write_dump(dump, {"poisoned": POISONED})
    result = run_cli("repair-session", str(dump), "--ledger", str(ledger))
    assert result.code == 0 and "before item 3 (line 4)" in result.out
    result = run_cli("repair-session", str(dump), "--ledger", str(ledger), "--apply",
                     "--by", "a")
    assert result.code == 2 and "JSON Lines dump" in result.err


def test_backup_never_overwritten(case):
    store, ledger = case
    taken = store.with_name("taken.bak")
    taken.write_bytes(b"keep me")
    before = rows(store)
    result = run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                     "--by", "a", "--backup", str(taken))
    assert result.code == 2 and "already exists" in result.err
    assert taken.read_bytes() == b"keep me" and rows(store) == before


def test_store_changed_since_planning_changes_nothing(case):
    store, ledger = case
    book = Ledger(ledger)
    plan = plan_repair(read_store(store), load_evidence(book), book.payloads.get)
    write_sdk_store(store, {"poisoned": [user("late")]})  # another writer, after planning
    before = rows(store)
    with pytest.raises(EvidenceError, match="changed since it was read"):
        apply_store_repair(plan, EvidenceWriter(book), by="a")
    assert rows(store) == before
    assert not list(store.parent.glob("*.bak"))
    assert pending_repair_notices(book) == []


# -- crashes during --apply: the old state or the new one, never half ------------------------


def _plan(store: Path, ledger: Path):
    book = Ledger(ledger)
    return plan_repair(read_store(store), load_evidence(book), book.payloads.get)


def test_failure_after_the_inserts_before_commit_leaves_the_old_state(case, monkeypatch):
    store, ledger = case
    before_rows, ledger_size = rows(store), len(list(Ledger(ledger).entries()))
    rewrite = apply_store._rewrite_session

    def rewrite_then_crash(conn, table, plan):
        rewrite(conn, table, plan)
        # the rows are in place inside the open transaction...
        assert len(conn.execute("SELECT id FROM agent_messages").fetchall()) == len(before_rows) + 1
        raise RuntimeError("crash before commit")

    monkeypatch.setattr(apply_store, "_rewrite_session", rewrite_then_crash)
    with pytest.raises(RuntimeError, match="crash before commit"):
        apply_store_repair(_plan(store, ledger), EvidenceWriter(ledger), by="alice")
    assert rows(store) == before_rows  # ...and gone, with every trace of the attempt
    assert len(list(Ledger(ledger).entries())) == ledger_size
    assert not list(store.parent.glob("*.bak"))
    assert pending_repair_notices(Ledger(ledger)) == []


def test_failing_commit_keeps_the_marker_until_settled(case, monkeypatch):
    """A COMMIT that fails leaves the outcome to SQLite: the marker stays, and the next
    repair-session looks at the store to decide."""
    store, ledger = case
    before_rows = rows(store)

    def failing_commit(conn):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(apply_store, "_commit", failing_commit)
    result = run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                     "--by", "alice")
    assert result.code == 1 and "disk I/O error" in result.err
    monkeypatch.undo()
    assert rows(store) == before_rows
    (notice,) = pending_repair_notices(ledger)
    assert "has no session_repair entry" in notice
    result = run_cli("repair-session", str(store), "--ledger", str(ledger))
    assert "never committed to the store; will drop its marker" in result.out
    result = run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                     "--by", "alice")
    assert result.code == 0, result.err
    assert "dropped its marker" in result.out and "repaired: 1 insertion(s)" in result.out
    assert pending_repair_notices(ledger) == []
    assert len(session_repair_entries(ledger)) == 1


def test_failure_after_commit_before_the_entry_leaves_a_marker_then_settles(case, monkeypatch):
    store, ledger = case

    def crash(self, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(EvidenceWriter, "session_repair", crash)
    result = run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                     "--by", "alice")
    assert result.code == 1
    assert "was repaired but its session_repair entries were not appended" in result.err
    monkeypatch.undo()

    # the new state, whole: the store is repaired, the ledger does not say so yet
    assert sdk_items(store, "poisoned") == repaired_case_items()
    assert session_repair_entries(ledger) == []
    (marker,) = (ledger / "repairs").glob("*.json")
    (notice,) = pending_repair_notices(ledger)
    assert marker.stem in notice and "has no session_repair entry" in notice
    assert run_cli("verify", "--ledger", str(ledger)).code == 0  # the notice is not a violation

    # the next repair-session of that store records it and removes the marker
    dry = run_cli("repair-session", str(store), "--ledger", str(ledger))
    assert dry.code == 0 and "will record its 1 session_repair entries" in dry.out
    assert marker.exists()
    result = run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                     "--by", "bob")
    assert result.code == 0, result.err
    assert "recorded its 1 session_repair entries" in result.out
    (entry, _), = session_repair_entries(ledger)
    assert entry.body["repair_id"] == marker.stem and entry.body["by"] == "alice"
    assert entry.body["position"] == 3
    assert pending_repair_notices(ledger) == []
    assert run_cli("verify", "--ledger", str(ledger)).code == 0


_KILL = """
import os, sys
from evidence_ledger.sessions import apply_store
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.cli.main import main
point = sys.argv[1]
die = lambda *a, **k: os._exit(9)
if point == "before-commit":
    apply_store._commit = die
else:
    EvidenceWriter.session_repair = die
main(sys.argv[2:])
"""


@pytest.mark.parametrize(("point", "repaired"), [("before-commit", False), ("after-commit", True)])
def test_process_killed_during_apply(case, point, repaired):
    """A real crash (os._exit, no cleanup): SQLite keeps the old or the new state; the
    marker survives either way, and the next repair-session settles it."""
    store, ledger = case
    env = {**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _KILL, point, "repair-session", str(store), "--ledger",
         str(ledger), "--apply", "--by", "alice"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 9, done.stderr
    want = repaired_case_items() if repaired else POISONED
    assert sdk_items(store, "poisoned") == want
    (notice,) = pending_repair_notices(ledger)
    assert "has no session_repair entry" in notice
    result = run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                     "--by", "bob")
    assert result.code == 0, result.err
    settled = "recorded its 1" if repaired else "never committed to the store; dropped"
    assert settled in result.out
    assert pending_repair_notices(ledger) == []
    assert sdk_items(store, "poisoned") == repaired_case_items()
    assert len(session_repair_entries(ledger)) == 1
    assert run_cli("verify", "--ledger", str(ledger)).code == 0


def test_unreadable_marker_is_a_notice(tmp_path: Path):
    record_run(tmp_path / "ledger")
    (tmp_path / "ledger" / "repairs").mkdir()
    (tmp_path / "ledger" / "repairs" / "x.json").write_text("{")
    assert pending_repair_notices(tmp_path / "ledger") == [
        "session repair marker repairs/x.json is unreadable"]


def test_no_marker_no_notice_and_no_log_read(tmp_path: Path, monkeypatch):
    """verify asks on every run: with no marker the log is never opened; with one, once."""
    ledger = tmp_path / "ledger"
    record_run(ledger)
    opened: list[Path] = []
    open_fd = FileLogStore.open_fd

    def counted(store: FileLogStore) -> int:  # every reader of log.bin opens it here
        opened.append(store.path)
        return open_fd(store)

    monkeypatch.setattr(FileLogStore, "open_fd", counted)
    assert pending_repair_notices(tmp_path / "nothing-here") == []
    assert pending_repair_notices(ledger) == []  # no repairs/ folder
    (ledger / "repairs").mkdir()
    (ledger / "repairs" / "notes.txt").write_text("not a marker")
    assert pending_repair_notices(ledger) == []  # a folder without a marker
    assert opened == []
    (ledger / "repairs" / "x.json").write_text("{")
    assert pending_repair_notices(ledger) == [
        "session repair marker repairs/x.json is unreadable"]
    assert opened == [Ledger(ledger).store.path]


# -- any SDK Session object (whole-history rewrite) -------------------------------------------


def test_session_object_repair(tmp_path: Path):
    ledger = tmp_path / "ledger"
    record_run(ledger)

    async def go():
        session = SQLiteSession("mem", ":memory:")
        await session.add_items(list(POISONED))
        planned = await repair_session(session, ledger, by="carol")
        assert [i.call_id for i in planned.plan.insertions] == ["c-update"]
        assert planned.entries == [] and await session.get_items() == POISONED
        done = await repair_session(session, ledger, by="carol", apply=True)
        assert len(done.entries) == 1
        return await session.get_items()

    assert asyncio.run(go()) == repaired_case_items()
    (entry, _), = session_repair_entries(ledger)
    assert entry.body["store"] == "session:agents.memory.sqlite_session.SQLiteSession"
    assert entry.body["backup"] is None
    assert run_cli("verify", "--ledger", str(ledger)).code == 0


def test_session_object_with_a_limit_refused(tmp_path: Path):
    ledger = tmp_path / "ledger"
    record_run(ledger)

    async def go():
        session = SQLiteSession("mem", ":memory:", session_settings=SessionSettings(limit=2))
        await session.add_items(list(POISONED))
        with pytest.raises(UsageError, match="limits get_items"):
            await repair_session(session, ledger, by="carol", apply=True)

    asyncio.run(go())


def test_session_object_refusal_changes_nothing(tmp_path: Path):
    ledger = tmp_path / "ledger"
    EvidenceWriter(ledger).run_end(run_id="r", status="completed")

    async def go():
        session = SQLiteSession("mem", ":memory:")
        await session.add_items(list(POISONED))
        with pytest.raises(EvidenceError, match="refusing to repair"):
            await repair_session(session, ledger, by="carol", apply=True)
        return await session.get_items()

    assert asyncio.run(go()) == POISONED


class _FailingAdd:
    """A Session whose add_items fails after clear_session succeeded."""

    session_id = "flaky"
    session_settings = None

    def __init__(self, items):
        self.items = list(items)

    async def get_items(self, limit=None):
        return list(self.items)

    async def clear_session(self):
        self.items = []

    async def add_items(self, items):
        raise OSError("connection lost")


def test_session_object_crash_between_clear_and_add_keeps_the_history(tmp_path: Path):
    ledger = tmp_path / "ledger"
    record_run(ledger)
    session = _FailingAdd(POISONED)
    with pytest.raises(OSError, match="connection lost"):
        asyncio.run(repair_session(session, ledger, by="carol", apply=True))
    assert session.items == []  # the documented hazard of a whole-history rewrite...
    (notice,) = pending_repair_notices(ledger)
    (marker,) = (ledger / "repairs").glob("*.json")
    doc = json.loads(marker.read_text())
    history = Ledger(ledger).payloads.get(bytes.fromhex(doc["history_digests"]["flaky"][7:]))
    assert history == item_bytes(POISONED)  # ...and the history to put back
    assert marker.stem in notice and "whole-history rewrite may have stopped" in notice
    assert doc["history_digests"]["flaky"] in notice


def test_apply_refuses_a_plan_with_refusals(tmp_path: Path):
    store, ledger = tmp_path / "s.db", tmp_path / "ledger"
    write_sdk_store(store, {"s": POISONED})
    EvidenceWriter(ledger).run_end(run_id="r", status="completed")
    with pytest.raises(EvidenceError):
        apply_store_repair(_plan(store, ledger), EvidenceWriter(ledger), by="a")


def test_writer_session_repair_needs_a_recorded_call(tmp_path: Path):
    writer = EvidenceWriter(tmp_path / "ledger")
    item = repaired_case_items()[3]
    with pytest.raises(UsageError, match="no recorded call"):
        writer.session_repair(repair_id="x", session_id="s", store="db", item=item,
                              position=0, run_id="r1", by="a")
    with pytest.raises(UsageError):
        writer.session_repair(repair_id="x", session_id="s", store="db", item=out("c"),
                              position=0, run_id="r1", by="a")


def test_plan_reports_findings_it_does_not_repair(case):
    store, ledger = case
    write_sdk_store(store, {"poisoned": [call("late"), reply()]})  # a dangling call
    result = run_cli("repair-session", str(store), "--ledger", str(ledger))
    assert result.code == 0
    assert "left as is: dangling_call late" in result.out


def test_json_document_for_a_dry_run_a_repair_and_a_refusal(case, tmp_path: Path):
    store, ledger = case
    dry = run_cli("repair-session", str(store), "--ledger", str(ledger), "--json")
    assert dry.code == 0, dry.err
    doc = json.loads(dry.out)
    assert schemas.first_error("repair-plan", doc) is None
    (ins,) = doc["insertions"]
    assert (ins["call_id"], ins["tool"], ins["arguments"], ins["position"]) == (
        "c-update", "update_record", RAW_ARGS, 3)
    assert (doc["dry_run"], doc["applied"], doc["repair"]) == (True, False, None)

    done = run_cli("repair-session", str(store), "--ledger", str(ledger), "--apply",
                   "--by", "alice", "--json")
    assert done.code == 0, done.err
    doc = json.loads(done.out)
    assert schemas.first_error("repair-plan", doc) is None and doc["applied"]
    recorded = ["sha256:" + h.hex() for _, h in session_repair_entries(ledger)]
    assert doc["repair"]["entries"] == recorded and Path(doc["repair"]["backup"]).is_file()

    other, unrelated = tmp_path / "other.db", tmp_path / "unrelated"
    write_sdk_store(other, {"s": POISONED})
    EvidenceWriter(unrelated).run_end(run_id="elsewhere", status="completed")
    refused = run_cli("repair-session", str(other), "--ledger", str(unrelated), "--json")
    assert refused.code == 1 and refused.err.count("\n") == 1
    doc = json.loads(refused.out)
    assert schemas.first_error("repair-plan", doc) is None
    assert [r["call_id"] for r in doc["refusals"]] == ["c-update"] and not doc["applied"]
