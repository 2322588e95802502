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

import evidence_ledger as el
from evidence_ledger.cli import output, rows
from evidence_ledger.cli.options import IndexOpt, JsonOpt, LedgerOpt, RebuildOpt, open_ledger

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


def _params(pairs: list[str] | None) -> dict[str, str] | None:
    """``--param NAME=VALUE`` options as a mapping (None when none is given).

    Raises:
        UsageError: for one without ``=`` or a name, or a name given twice.
    """
    if not pairs:
        return None
    params: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise el.UsageError(f"--param takes NAME=VALUE, not {pair!r}")
        if name in params:
            raise el.UsageError(f"--param {name} is given twice")
        params[name] = value
    return params


def _list_named(format: QueryFormat, expanded: bool | None) -> None:
    """``query --list``: each named query's name, question, parameters and the rule it
    mirrors (in JSON and JSON Lines, its SQL too; not as CSV: its parameters are nested).

    Raises:
        UsageError: for ``--format csv``.
    """
    named = el.named_queries()
    if format is QueryFormat.csv:
        raise el.UsageError("--list has nested parameters, not rows for CSV: give --format "
                            "json (or jsonl)")
    if format is QueryFormat.json:
        output.print_json([q.to_json() for q in named])
        return
    if format is QueryFormat.jsonl:
        for q in named:
            sys.stdout.write(json.dumps(q.to_json(), ensure_ascii=False) + "\n")
        return
    rows.print_rows(
        ["name", "question", "params", "mirrors"],
        [[q.name, q.question, "; ".join(p.describe() for p in q.params), q.mirrors or ""]
         for q in named],
        f"{len(named)} named queries: query NAME [--param NAME=VALUE ...] runs one; "
        "query --list --json prints their SQL (docs/QUERIES.md)",
        expanded,
    )


def query(
    sql_or_name: Annotated[
        str | None,
        typer.Argument(metavar="SQL_OR_NAME",
                       help="One SELECT statement, or the name of an audit query (--list).",
                       show_default=False),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", metavar="NAME=VALUE", show_default=False,
                     help="A parameter of the named query (repeat for each); bound, never "
                          "pasted into the SQL."),
    ] = None,
    list_: Annotated[
        bool, typer.Option("--list", help="List the named audit queries and their parameters.")
    ] = False,
    ledger: LedgerOpt = None,
    format: Annotated[
        QueryFormat, typer.Option("--format", help="Output format.")
    ] = QueryFormat.table,
    expanded: Annotated[
        bool | None,
        typer.Option("--expanded/--no-expanded", show_default=False,
                     help="Table format: one record per block (column | value), or a table; "
                          "default: records when the table is wider than the terminal."),
    ] = None,
    rebuild: RebuildOpt = False,
    index: IndexOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Run read-only SQL, or a named audit query, over the ledger's DuckDB index (brought
    up to date first).

    Tables: entries, calls, approvals, executions, session_items, guardrails,
    guard_verdicts, revocations, violations, call_chains, ledger_index, log_blocks. A
    statement that writes is refused (exit 2). Named queries (query --list) answer the
    audit questions of docs/QUERIES.md; those that mirror a verify rule return its
    violations, one row each. The table format cuts digests to 12 hex digits; csv, json
    and jsonl print them whole. --json is --format json.
    """
    if json_:
        if format not in (QueryFormat.table, QueryFormat.json):
            raise el.UsageError(f"--json and --format {format.value}: give one")
        format = QueryFormat.json
    if list_:
        if sql_or_name is not None or param:
            raise el.UsageError("--list takes no query and no --param")
        _list_named(format, expanded)
        return
    if sql_or_name is None:
        raise el.UsageError("give one SELECT statement or a query name (query --list)")
    params = _params(param)
    with output.ProgressBar("indexing") as bar:
        result = open_ledger(ledger).query(
            sql_or_name, params=params, index=index, rebuild=rebuild, progress=bar)
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
        rows.print_rows(
            result.columns, [[_text(v) for v in row] for row in result.rows],
            f"{len(result.rows)} row(s) at tree size {result.tree_size}", expanded,
        )


def register(app: typer.Typer) -> None:
    """Add ``query`` to ``app``."""
    app.command("query")(query)
