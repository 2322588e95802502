"""Session doctor, scanning: the pure scanner, the SQLite and JSON Lines readers, and
``evidence-ledger scan-session`` (exit codes, output, JSON report schema)."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession

from evidence_ledger.format import schemas
from evidence_ledger.format.errors import UsageError
from evidence_ledger.sessions.report import scan_store
from evidence_ledger.sessions.scan import (
    DANGLING_CALL,
    DUPLICATE_CALL_ID,
    ORPHAN_OUTPUT,
    OUTPUT_BEFORE_CALL,
    scan_items,
)
from evidence_ledger.sessions.stores import read_store
from tests.helpers import run_cli


def user(text: str = "hi") -> Any:
    return {"role": "user", "content": text}


def call(call_id: str, name: str = "lookup", arguments: str = '{"key":"k1"}') -> Any:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def out(call_id: str, output: str = "ok") -> Any:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def reply(text: str = "done") -> Any:
    return {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


# The shape openai-agents 0.22.3 leaves behind (see /work/shared/cases): c-update's output
# persisted without its call.
POISONED: list[Any] = [user("set k1 to v2"), call("c-lookup"), out("c-lookup", "record k1"),
            out("c-update", "updated k1=v2"), reply("record updated")]


def write_sdk_store(path: Path, sessions: dict[str, list[Any]]) -> None:
    """Build a store with the installed SDK's file-backed SQLiteSession, one add per item,
    sessions interleaved so row ids of different sessions alternate."""

    async def fill() -> None:
        opened = {sid: SQLiteSession(sid, str(path)) for sid in sessions}
        try:
            longest = max(len(items) for items in sessions.values())
            for i in range(longest):
                for sid, items in sessions.items():
                    if i < len(items):
                        await opened[sid].add_items([items[i]])
        finally:
            for session in opened.values():
                session.close()

    asyncio.run(fill())


# -- the pure scanner -----------------------------------------------------------------

SCAN_CASES: dict[str, tuple[list[Any], list[tuple[str, str, int]]]] = {
    "clean": ([user(), call("a"), out("a"), reply()], []),
    "clean-parallel-batch": ([user(), call("a"), call("b"), out("a"), out("b"), reply()], []),
    "pending-approval-at-end": ([user(), call("a"), out("a"), call("b")], []),
    "pending-in-own-batch": ([user(), call("a"), call("b"), out("a")], []),
    "orphan-output": (POISONED, [(ORPHAN_OUTPUT, "c-update", 3)]),
    "orphan-output-twice": (
        [user(), out("x"), out("x"), reply()],
        [(ORPHAN_OUTPUT, "x", 1), (DUPLICATE_CALL_ID, "x", 2)],
    ),
    "output-before-call": (
        [user(), out("a"), call("a"), reply()],
        [(OUTPUT_BEFORE_CALL, "a", 1)],
    ),
    "dangling-call-then-message": (
        [user(), call("a"), reply(), user("again")], [(DANGLING_CALL, "a", 1)],
    ),
    "dangling-call-then-next-batch": (
        [user(), call("a"), call("c"), out("a"), call("b"), out("b")], [(DANGLING_CALL, "c", 2)],
    ),
    "duplicate-call": (
        [user(), call("a"), out("a"), call("a"), out("a"), reply()],
        [(DUPLICATE_CALL_ID, "a", 3), (DUPLICATE_CALL_ID, "a", 4)],
    ),
    "non-tool-items-ignored": (
        [user(), "not a dict", {"type": "function_call"}, {"type": "reasoning", "id": "r"},
         {"type": "function_call_output", "call_id": 7}], [],
    ),
    "empty": ([], []),
}


@pytest.mark.parametrize("name", sorted(SCAN_CASES))
def test_scan_items(name):
    items, want = SCAN_CASES[name]
    got = [(f.kind, f.call_id, f.index) for f in scan_items("s", items)]
    assert got == want


def test_scan_items_carries_rows_and_item_types():
    (finding,) = scan_items("s1", POISONED, rows=[10, 11, 12, 13, 14])
    assert finding.row == 13
    assert finding.item_type == "function_call_output"
    assert finding.session_id == "s1"


# -- SQLite stores written by the SDK ---------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "sessions.db"
    write_sdk_store(path, {"poisoned": POISONED, "healthy": [user(), call("a"), out("a"),
                                                            reply()]})
    return path


def test_read_sdk_store_orders_by_row_id(store: Path):
    contents = read_store(store)
    assert contents.format == "sqlite"
    by_id = {s.session_id: s for s in contents.sessions}
    assert by_id["poisoned"].items == POISONED
    rows = by_id["poisoned"].rows or []
    assert rows == sorted(rows) and rows[1] - rows[0] == 2  # interleaved with "healthy"


def test_scan_sdk_store_finds_exactly_the_orphan(store: Path):
    report = scan_store(store)
    assert not report.ok
    (finding,) = report.all_findings
    assert (finding.kind, finding.session_id, finding.call_id, finding.index) == (
        ORPHAN_OUTPUT, "poisoned", "c-update", 3)
    assert report.findings["healthy"] == []


def test_scan_cli_exit_1_and_json_report_matches_schema(store: Path):
    result = run_cli("scan-session", str(store), "--json")
    assert result.code == 1, result.err
    doc = json.loads(result.out)
    assert schemas.first_error("scan-report", doc) is None
    assert doc["ok"] is False
    assert doc["totals"] == {"sessions": 2, "items": 9, "findings": 1}
    (finding,) = [f for s in doc["sessions"] for f in s["findings"]]
    assert finding["kind"] == "orphan_output" and finding["call_id"] == "c-update"


def test_scan_cli_human_output(store: Path):
    result = run_cli("scan-session", str(store))
    assert result.code == 1
    assert "orphan_output" in result.out and "c-update" in result.out
    assert "1 finding(s) in 1 of 2 session(s)" in result.out


def test_scan_cli_clean_session_exit_0(store: Path):
    result = run_cli("scan-session", str(store), "--session-id", "healthy")
    assert result.code == 0, result.out + result.err
    assert "clean: 1 session(s), 4 items" in result.out


def test_scan_cli_unknown_session_exit_2(store: Path):
    result = run_cli("scan-session", str(store), "--session-id", "nope")
    assert result.code == 2
    assert result.err.count("\n") == 1 and "no session 'nope'" in result.err


def test_scan_is_read_only(store: Path):
    before = store.read_bytes()
    assert run_cli("scan-session", str(store)).code == 1
    assert store.read_bytes() == before


def test_rows_that_are_not_json_are_skipped_like_the_sdk_does(store: Path):
    with sqlite3.connect(store) as conn:
        conn.execute("INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
                     ("healthy", "{not json"))
    conn.close()
    report = scan_store(store, session_id="healthy")
    assert report.ok
    assert len(report.contents.sessions[0].items) == 4
    (notice,) = report.contents.notices
    assert "is not JSON" in notice


def test_custom_messages_table(tmp_path: Path):
    path = tmp_path / "custom.db"

    async def fill() -> None:
        session = SQLiteSession("s", str(path), messages_table="msgs", sessions_table="sess")
        await session.add_items(POISONED)
        session.close()

    asyncio.run(fill())
    assert run_cli("scan-session", str(path)).code == 2  # no agent_messages table
    result = run_cli("scan-session", str(path), "--messages-table", "msgs")
    assert result.code == 1 and "c-update" in result.out
    assert run_cli("scan-session", str(path), "--messages-table", "x; drop").code == 2


# -- JSON Lines dumps -------------------------------------------------------------------


def write_dump(path: Path, sessions: dict[str, list]) -> None:
    lines = [json.dumps({"session_id": sid, "item": item})
             for sid, items in sessions.items() for item in items]
    path.write_text("\n".join(lines) + "\n", "utf-8")


def test_jsonl_dump_scan(tmp_path: Path):
    dump = tmp_path / "dump.jsonl"
    write_dump(dump, {"a": POISONED, "b": [user(), out("z", "x"), call("z")]})
    report = scan_store(dump)
    assert report.contents.format == "jsonl"
    got = [(f.session_id, f.kind, f.call_id, f.row) for f in report.all_findings]
    # rows are 1-based line numbers: session a is lines 1-5, b lines 6-8
    assert got == [("a", ORPHAN_OUTPUT, "c-update", 4), ("b", OUTPUT_BEFORE_CALL, "z", 7)]
    result = run_cli("scan-session", str(dump), "--session-id", "b", "--json")
    assert result.code == 1
    doc = json.loads(result.out)
    assert schemas.first_error("scan-report", doc) is None
    assert doc["source_format"] == "jsonl" and doc["totals"]["sessions"] == 1


def test_jsonl_blank_lines_ignored_and_clean_exit_0(tmp_path: Path):
    dump = tmp_path / "dump.jsonl"
    write_dump(dump, {"a": [user(), call("a"), out("a"), reply()]})
    dump.write_text("\n" + dump.read_text() + "\n\n")
    assert run_cli("scan-session", str(dump)).code == 0


@pytest.mark.parametrize(
    "line",
    [
        '{"session_id": "a", "item": {}, "extra": 1}',
        '{"item": {}}',
        '{"session_id": 5, "item": {}}',
        "[1, 2]",
        "{truncated",
    ],
)
def test_jsonl_bad_line_exit_2_names_the_line(tmp_path: Path, line: str):
    dump = tmp_path / "dump.jsonl"
    dump.write_text(json.dumps({"session_id": "a", "item": user()}) + "\n" + line + "\n")
    result = run_cli("scan-session", str(dump))
    assert result.code == 2
    assert result.out == ""
    assert result.err.count("\n") == 1 and "line 2" in result.err
    with pytest.raises(UsageError):
        read_store(dump)


@pytest.mark.parametrize("content", [b"hello\n", b"PK\x03\x04 a zip, say\n"])
def test_a_file_that_is_neither_store_says_so(tmp_path: Path, content: bytes):
    source = tmp_path / "chat.db"
    source.write_bytes(content)
    result = run_cli("scan-session", str(source))
    assert result.code == 2
    assert "neither a SQLite store" in result.err and "line 1: not JSON" in result.err


# -- unreadable input: exit 2, one line -----------------------------------------------------


def _random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(6).randbytes(4096))


def _not_sdk_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()


def _damaged_sqlite(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(_random_bytes, id="random-bytes"),
        pytest.param(_not_sdk_sqlite, id="sqlite-without-sdk-tables"),
        pytest.param(_damaged_sqlite, id="sqlite-header-then-garbage"),
        pytest.param(lambda p: p.write_bytes(b""), id="empty-file"),
        pytest.param(lambda p: p.mkdir(), id="directory"),
        pytest.param(lambda p: None, id="missing-file"),
    ],
)
def test_unreadable_input_exit_2_one_line(tmp_path: Path, make):
    path = tmp_path / "source"
    make(path)
    result = run_cli("scan-session", str(path))
    assert result.code == 2, result.out + result.err
    assert result.out == ""
    assert result.err.count("\n") == 1 and result.err.startswith("evidence-ledger: error: ")
