"""Audit command ``query``: read-only SQL over the DuckDB index (``export`` and
``verify-export`` are in :mod:`evidence_ledger.cli.exports`).

Thin: parse arguments, call the public API (``Ledger.query``), print. Errors are
:class:`evidence_ledger.LedgerError` types, turned into one line and an exit code by the
handler in :mod:`evidence_ledger.cli.main`. Tables and columns: docs/QUERIES.md.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import math
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.table import Table

from evidence_ledger.cli import output
from evidence_ledger.cli.options import IndexOpt, LedgerOpt, RebuildOpt, open_ledger

__all__ = ["register"]

class QueryFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"


def _json_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        text = value.isoformat(timespec="microseconds")
        return text + "Z" if value.tzinfo is None else text
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _text(value: Any) -> str:
    """One cell for a person or a CSV file: '' for NULL, JSON for lists and maps."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    plain = _json_value(value)
    if isinstance(plain, list | dict):
        return json.dumps(plain, ensure_ascii=False, separators=(",", ":"))
    return str(plain)


def query(
    sql: Annotated[str, typer.Argument(help="One SELECT statement (see docs/QUERIES.md).")],
    ledger: LedgerOpt = None,
    format: Annotated[
        QueryFormat, typer.Option("--format", help="Output format.")
    ] = QueryFormat.table,
    rebuild: RebuildOpt = False,
    index: IndexOpt = None,
) -> None:
    """Run read-only SQL over the ledger's DuckDB index (brought up to date first).

    Tables: entries, calls, approvals, executions, session_items, guardrails,
    guard_verdicts, revocations, violations, call_chains, ledger_index, log_blocks. A
    statement that writes is refused (exit 2).
    """
    with output.ProgressBar("indexing") as bar:
        result = open_ledger(ledger).query(sql, index=index, rebuild=rebuild, progress=bar)
    if format is QueryFormat.json:
        output.print_json([
            {c: _json_value(v) for c, v in zip(result.columns, row, strict=True)}
            for row in result.rows
        ])
    elif format is QueryFormat.jsonl:
        for row in result.rows:
            sys.stdout.write(json.dumps(
                {c: _json_value(v) for c, v in zip(result.columns, row, strict=True)},
                ensure_ascii=False,
            ) + "\n")
    elif format is QueryFormat.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([_text(v) for v in row] for row in result.rows)
    else:
        table = Table(
            caption=f"{len(result.rows)} row(s) at tree size {result.tree_size}",
            caption_justify="left",
        )
        for column in result.columns:
            table.add_column(column, overflow="fold")
        for row in result.rows:
            table.add_row(*(_text(v) for v in row))
        output.stdout.print(table, markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``query`` to ``app``."""
    app.command("query")(query)
