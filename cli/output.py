"""Printing for the CLI: rich tables for people, JSON for scripts."""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ledger.chains import CallChain
from ledger.verify import Report

# Piped or redirected output keeps whole table rows instead of wrapping at 80 columns.
_WIDTH = None if sys.stdout.isatty() else 200
stdout = Console(soft_wrap=True, width=_WIDTH)
stderr = Console(stderr=True, soft_wrap=True, width=_WIDTH)


def print_json(value: Any) -> None:
    """Write ``value`` as one JSON document on stdout."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def when(ns: int | None) -> str:
    """ISO 8601 UTC time (ms) of ``ns`` nanoseconds since the epoch, or '—'."""
    if ns is None:
        return "—"
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat(timespec="milliseconds")


def short(digest: bytes) -> str:
    """``sha256:`` and the first 12 hex digits of a digest."""
    return "sha256:" + digest.hex()[:12]


def print_report(report: Report) -> None:
    """Readable verdict: tree head, notices, then violations ordered by seq."""
    stdout.print(f"tree size {report.tree_size}   root hash {report.to_json()['root_hash']}")
    for notice in report.notices:
        stdout.print(f"[yellow]notice[/]: {escape(notice)}", highlight=False)
    if report.ok:
        stdout.print(f"[green]OK[/]: {len(report.rules)} rules, no violation")
        return
    table = Table(title=f"{len(report.violations)} violation(s)", title_justify="left")
    for column in ("seq", "rule", "run", "scope", "call_id", "detail"):
        table.add_column(column, overflow="fold")
    for v in report.violations:
        table.add_row(
            "—" if v.seq is None else str(v.seq), f"[red]{escape(v.rule)}[/]",
            *(escape(text) for text in (
                v.run_id or "—", "/".join(v.scope) or "—", v.call_id or "—", v.detail
            )),
        )
    stdout.print(table)
    stdout.print("[red]FAIL[/]")


def print_chains(rows: list[CallChain]) -> None:
    """One line per call: tool, arguments digest, decision and approver, executed, persisted."""
    table = Table(title="calls", title_justify="left")
    for column in ("run", "call (scope/call_id)", "tool", "arguments", "decision", "executed",
                   "persisted", "status"):
        table.add_column(column, overflow="fold")
    for r in rows:
        if r.decision is None:
            decided = "—" if not r.needs_approval else "[yellow]none[/]"
        else:
            decided = escape(f"{r.decision}{' (always)' if r.sticky else ''} by {r.approver}")
        status = r.status if not r.violations else f"[red]{', '.join(r.violations)}[/]"
        table.add_row(
            escape(r.run_id[:12]), escape("/".join((*r.scope, r.call_id))), escape(r.tool),
            short(r.args_digest), decided, "yes" if r.status == "executed" else "no",
            str(r.persisted), status,
        )
    stdout.print(table)
