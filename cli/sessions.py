"""Session doctor commands: ``scan-session`` and ``repair-session``.

Thin: parse arguments, call the public API (``scan_sessions``, ``Ledger.repair_sessions``),
print. Errors are :class:`evidence_ledger.LedgerError` types, turned into one line and an
exit code by the handler in :mod:`evidence_ledger.cli.main`.

Exit codes:

- ``scan-session``: 0 no finding, 1 findings, 2 unreadable input (missing file, not a
  SQLite store of the SDK's shape nor a JSON Lines dump, unknown ``--session-id``).
- ``repair-session``: 0 the plan was printed (dry run) or carried out, or there was
  nothing to repair; 1 refused: an orphan output has no usable evidence in the ledger
  (no recorded call with its ``call_id``, an ambiguous one, or its arguments payload is
  missing or altered) - nothing is changed, for any session - or the ledger append
  failed after the store was changed (the marker says so); 2 unreadable input, no
  ledger, ``--apply`` without ``--by`` or on a JSON Lines dump.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

import evidence_ledger as el
from evidence_ledger.cli import output
from evidence_ledger.cli.options import JsonOpt, LedgerOpt, open_ledger

__all__ = ["register"]

SourceArg = Annotated[
    Path,
    typer.Argument(
        help="A SQLiteSession database file, or a JSON Lines dump with one "
        '{"session_id": ..., "item": {...}} object per line.',
        show_default=False,
    ),
]
SessionOpt = Annotated[
    str | None, typer.Option("--session-id", help="Only this session.", show_default=False)
]
MESSAGES_TABLE = "agent_messages"
"""The SDK's ``SQLiteSession`` default messages table."""
TableOpt = Annotated[
    str, typer.Option("--messages-table", help="SQLiteSession messages table.")
]


def _say(line: str) -> None:
    output.stdout.print(output.plain(line), highlight=False, markup=False)


def _print_scan(report: el.ScanReport) -> None:
    contents = report.contents
    for notice in contents.notices:
        output.stdout.print(f"[yellow]notice[/]: {escape(output.plain(notice))}", highlight=False)
    dirty = 0
    for session in contents.sessions:
        findings = report.findings[session.session_id]
        if not findings:
            continue
        dirty += 1
        _say(f"session {session.session_id}: {len(session.items)} items, "
             f"{len(findings)} finding(s)")
        for f in findings:
            where = f"item {f.index}" + (f" ({_row_name(contents.format)} {f.row})"
                                         if f.row is not None else "")
            _say(f"  {f.kind:<19} {f.call_id}  at {where}: {f.detail}")
    total = len(contents.sessions)
    if report.ok:
        output.stdout.print(f"[green]clean[/]: {total} session(s), "
                            f"{sum(len(s.items) for s in contents.sessions)} items")
    else:
        output.stdout.print(f"[red]{len(report.all_findings)} finding(s)[/] in {dirty} of "
                            f"{total} session(s)")


def _row_name(fmt: str) -> str:
    return "row" if fmt == "sqlite" else "line"


def _print_plan(plan: Any) -> None:
    row = _row_name(plan.format)
    for session in plan.sessions:
        sid = session.session.session_id
        for ins in session.insertions:
            call = ins.call
            where = f"item {ins.before_index}" + (
                f" ({row} {ins.before_row})" if ins.before_row is not None else "")
            _say(f"session {sid}: insert function_call {ins.call_id} ({call.tool}) before "
                 f"{where}, as item {ins.position}; from call seq {call.seq} "
                 f"sha256:{call.entry_hash.hex()[:16]} of run {call.run_id}")
            _say(f"    arguments {ins.item['arguments']}")
        for ref in session.refusals:
            _say(f"session {sid}: cannot repair {ref.call_id} at item {ref.index}: {ref.reason}")
        for f in session.other_findings:
            _say(f"session {sid}: left as is: {f.kind} {f.call_id} at item {f.index} "
                 "(not an orphan output)")


def scan_session(
    source: SourceArg,
    session_id: SessionOpt = None,
    messages_table: TableOpt = MESSAGES_TABLE,
    json: JsonOpt = False,
) -> None:
    """Scan a session store, read-only, for tool items out of order.

    Finds orphan outputs, outputs before their calls, dangling calls and duplicated
    call ids (schemas/scan-report.schema.json). Exit 0 clean, 1 findings, 2 unreadable.
    """
    report = el.scan_sessions(source, session_id=session_id, messages_table=messages_table)
    if json:
        output.print_json(report.to_json())
    else:
        _print_scan(report)
    raise typer.Exit(0 if report.ok else 1)


def repair_session(
    source: SourceArg,
    ledger: LedgerOpt = None,
    session_id: SessionOpt = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Write the repair (default: print the plan).")
    ] = False,
    by: Annotated[
        str | None, typer.Option("--by", help="Who repairs (recorded); needed with --apply.")
    ] = None,
    backup: Annotated[
        Path | None,
        typer.Option("--backup", show_default=False,
                     help="Backup copy to write (default: SOURCE.REPAIR_ID.bak beside it)."),
    ] = None,
    messages_table: TableOpt = MESSAGES_TABLE,
    json: JsonOpt = False,
) -> None:
    """Insert each orphan output's missing function_call, rebuilt from the ledger.

    The call's identity and exact raw arguments come from the ledger (call entry and
    payload store); refused (exit 1, nothing changed) when the ledger lacks them. Dry
    run by default; --apply backs the store up, changes it in one SQLite transaction,
    and records a session_repair entry per inserted item.
    """
    book = open_ledger(ledger)
    if apply and not (by and by.strip()):
        raise el.UsageError("--apply needs --by NAME (who repairs; it is recorded)")
    repair = book.repair_sessions(source, session_id=session_id,
                                  messages_table=messages_table, settle=apply)
    plan, settled = repair.plan, repair.settled
    if not json:  # the plan first: an apply that fails leaves it on screen
        for line in settled:
            _say(line)
        _print_plan(plan)
    result = None
    if apply and plan.insertions and not plan.refusals:
        assert by is not None
        result = repair.apply(by, backup)
    if json:
        output.print_json(_repair_json(plan, settled, apply, result))
    if plan.refusals:
        raise el.EvidenceError(
            f"refused: {len(plan.refusals)} orphan output(s) lack usable evidence in "
            f"{book.directory}; nothing changed"
        )
    if not json:
        _print_outcome(plan, result)


def _repair_json(plan: Any, settled: list[str], apply: bool, result: Any) -> dict[str, Any]:
    """The ``repair-session --json`` document (schemas/repair-plan.schema.json)."""
    return {
        "format_version": 1, **plan.to_json(), "settled": settled,
        "applied": result is not None, "dry_run": not apply,
        "repair": None if result is None else {
            "repair_id": result.repair_id,
            "backup": None if result.backup is None else str(result.backup),
            "entries": ["sha256:" + h.hex() for h in result.entries],
        },
    }


def _print_outcome(plan: Any, result: Any) -> None:
    count = len(plan.insertions)
    if not count:
        _say(f"no orphan output in {len(plan.sessions)} session(s); nothing to repair")
        return
    sessions = sum(1 for s in plan.sessions if s.insertions)
    if result is None:
        _say(f"dry run: {count} insertion(s) in {sessions} session(s); "
             "rerun with --apply --by NAME to write them")
        return
    _say(f"repaired: {count} insertion(s) in {sessions} session(s); backup {result.backup}; "
         f"repair {result.repair_id} recorded as {len(result.entries)} session_repair "
         "entr" + ("y" if len(result.entries) == 1 else "ies"))


def register(app: typer.Typer) -> None:
    """Add ``scan-session`` and ``repair-session`` to ``app``."""
    app.command("scan-session")(scan_session)
    app.command("repair-session")(repair_session)
