"""`evidence-ledger query`: formats, exit codes, one-line errors, read-only."""

from __future__ import annotations

import csv
import io
import json

import pytest
from rich.console import Console

from evidence_ledger.cli import output
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from tests.helpers import DATA, run_cli
from tests.test_index import ODD_APPROVER, build_audit_ledger

VALID = DATA / "rules" / "valid.jsonl"


@pytest.fixture(scope="module")
def audit(tmp_path_factory) -> str:
    return str(build_audit_ledger(tmp_path_factory.mktemp("audit")).directory)


def query(ledger: str, sql: str, *extra: str):
    return run_cli("query", "--ledger", ledger, sql, *extra)


def test_table_is_the_default(audit):
    result = query(audit, "SELECT call_id, status FROM call_chains WHERE call_id IN ('c1', 'c8') "
                          "ORDER BY call_id")
    assert result.code == 0, result.err
    assert "call_id" in result.out and "approved_not_executed" in result.out
    assert "2 row(s) at tree size" in result.out


def test_csv_format_round_trips_awkward_values(audit):
    result = query(audit, "SELECT approver, scope, bound, decided_at FROM approvals "
                          "WHERE call_id = 'c7'", "--format", "csv")
    assert result.code == 0
    rows = list(csv.reader(io.StringIO(result.out, newline="")))
    assert rows[0] == ["approver", "scope", "bound", "decided_at"]
    assert rows[1][:3] == [ODD_APPROVER, "[]", "false"] and rows[1][3].endswith("Z")


def test_json_and_jsonl_formats(audit):
    sql = "SELECT call_seq, scope, executed_at, persisted FROM call_chains ORDER BY call_seq"
    as_json = json.loads(query(audit, sql, "--format", "json").out)
    as_jsonl = [json.loads(x) for x in query(audit, sql, "--format", "jsonl").out.splitlines()]
    assert as_json == as_jsonl and len(as_json) > 5
    assert as_json[0]["scope"] == [] and as_json[0]["executed_at"].endswith("Z")
    nested = [r for r in as_json if r["scope"]]
    assert nested[0]["scope"] == ["ask_expert:c12"]


def test_intervals_and_dates_are_plain_json(audit):
    result = query(audit, "SELECT max(decided_at) - min(decided_at) AS span, "
                          "CAST(min(decided_at) AS DATE) AS first_day FROM approvals",
                   "--format", "json")
    (row,) = json.loads(result.out)
    assert isinstance(row["span"], float) and row["first_day"] == "2025-03-03"


def test_queries_see_entries_appended_since(tmp_path):
    ledger = str(tmp_path)
    assert run_cli("ingest", str(VALID), "--ledger", ledger).code == 0
    count = "SELECT count(*) AS n FROM entries"
    assert json.loads(query(ledger, count, "--format", "json").out) == [{"n": 25}]
    assert run_cli("ingest", str(VALID), "--ledger", ledger, "--again").code == 0
    EvidenceWriter(Ledger(ledger)).run_end(run_id="r1", status="completed")
    assert json.loads(query(ledger, count, "--format", "json").out) == [{"n": 51}]
    chains = json.loads(query(ledger, "SELECT violations FROM call_chains WHERE call_id = 'c1' "
                                      "ORDER BY call_seq", "--format", "json").out)
    assert chains[0]["violations"] == ["exactly_once"]  # c1 re-run by the second ingest


def test_rebuild_flag_gives_the_same_rows(audit):
    sql = "SELECT * FROM call_chains ORDER BY call_seq"
    before = query(audit, sql, "--format", "jsonl").out
    assert query(audit, sql, "--format", "jsonl", "--rebuild").out == before


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO calls SELECT * FROM calls",
        "UPDATE approvals SET approver = 'mallory'",
        "DELETE FROM violations",
        "CREATE TABLE x (a INT)",
        "DROP TABLE violations",
        "ATTACH 'other.db' AS other",
        "COPY calls TO 'calls.csv'",
        "INSTALL httpfs",
        "LOAD httpfs",
        "PRAGMA database_list",
        "SET threads = 1",
        "SELECT 1; DELETE FROM violations",
    ],
)
def test_a_writing_statement_is_refused_with_exit_2(audit, sql):
    result = query(audit, sql)
    assert result.code == 2
    assert result.err.count("\n") == 1 and ("refused" in result.err or "one SQL" in result.err)
    assert json.loads(query(audit, "SELECT count(*) AS n FROM violations", "--format",
                            "json").out)[0]["n"] > 0


@pytest.mark.parametrize(
    "sql, message",
    [
        ("SELECT * FROM no_such_table", "SQL error: Catalog Error"),
        ("SELEC 1", "SQL error: Parser Error"),
        ("SELECT * FROM read_csv('/etc/passwd')", "Permission Error"),
        ("SELECT 1/0::INT AS x, 'a'::INT", "SQL error"),
    ],
)
def test_sql_errors_are_one_line_with_exit_2(audit, sql, message):
    result = query(audit, sql)
    assert result.code == 2 and message in result.err
    assert result.err.count("\n") == 1 and result.out == ""


def test_unknown_format_and_missing_ledger_are_usage_errors(audit, tmp_path):
    assert query(audit, "SELECT 1", "--format", "xml").code == 2
    assert query(str(tmp_path / "none"), "SELECT 1").code == 2


def test_a_damaged_log_is_exit_1(tmp_path):
    ledger = str(tmp_path)
    assert run_cli("ingest", str(VALID), "--ledger", ledger).code == 0
    log = tmp_path / "log.bin"
    data = bytearray(log.read_bytes())
    data[100] ^= 0xFF
    log.write_bytes(bytes(data))
    result = query(ledger, "SELECT 1")
    assert result.code == 1 and "log damaged" in result.err and "verify" in result.err


def test_help_lists_the_audit_commands():
    out = run_cli("--help").out
    assert all(name in out for name in ("query", "export", "verify-export"))


def test_index_option_puts_the_index_elsewhere(tmp_path):
    ledger, index = tmp_path / "ledger", tmp_path / "cache" / "ledger.duckdb"
    index.parent.mkdir()
    assert run_cli("ingest", str(VALID), "--ledger", str(ledger)).code == 0
    result = query(str(ledger), "SELECT count(*) AS n FROM calls", "--format", "json",
                   "--index", str(index))
    assert json.loads(result.out) == [{"n": 6}]
    assert index.is_file() and not (ledger / "index.duckdb").exists()


def test_a_damaged_default_index_is_rebuilt_but_a_foreign_file_is_never_replaced(tmp_path):
    ledger = tmp_path / "l"
    assert run_cli("ingest", str(DATA / "rules" / "valid.jsonl"), "--ledger", str(ledger)).code == 0
    for junk in (b"", b"not a database at all"):
        (ledger / "index.duckdb").write_bytes(junk)
        result = run_cli("query", "--ledger", str(ledger), "SELECT count(*) AS n FROM entries")
        assert result.code == 0, result.err
    foreign = tmp_path / "notes.txt"
    foreign.write_bytes(b"my notes")
    result = run_cli("query", "--ledger", str(ledger), "--index", str(foreign), "SELECT 1 AS x")
    assert result.code == 2 and foreign.read_bytes() == b"my notes"


class TerminalBar:
    """What the progress bar draws on a terminal (rich, forced to think it is one)."""

    def __init__(self, monkeypatch) -> None:
        self.text = io.StringIO()
        monkeypatch.setattr(output, "stderr", Console(
            file=self.text, force_terminal=True, width=100, color_system=None))
        self.bar = output.ProgressBar("indexing")


def test_the_bar_starts_at_the_first_report_of_a_job_past_the_threshold(monkeypatch):
    # before: a 150,000-entry build showed nothing until 100,000 entries were done
    big = TerminalBar(monkeypatch)
    with big.bar:
        big.bar(50_000, 40, 100)  # 125,000 expected: shown
    small = TerminalBar(monkeypatch)
    with small.bar:
        small.bar(50_000, 60, 100)  # 83,333 expected: not shown
    assert "indexing" in big.text.getvalue() and small.text.getvalue() == ""


def test_the_bar_says_finishing_once_all_is_read(monkeypatch):
    # before: it sat at 100% for seconds while rows and the checkpoint were written
    shown = TerminalBar(monkeypatch)
    with shown.bar:
        shown.bar(100_000, 50, 100)
        shown.bar(200_000, 100, 100)
        assert shown.bar.progress is not None
        assert shown.bar.progress.tasks[0].description == "indexing (finishing)"
