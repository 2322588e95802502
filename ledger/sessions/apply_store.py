"""Carrying out a repair plan on a SQLite session store, in one transaction.

Crash safety of :func:`apply_store_repair` (SQLite):

1. ``BEGIN IMMEDIATE`` on the store (no other writer until the end); the session rows
   are re-read and must equal what was planned from (else nothing happens);
2. a backup copy of the whole database is written (SQLite backup API, consistent even
   with a WAL) and fsynced, next to the store, never over an existing file;
3. the history before the repair is stored as a payload, and a marker
   ``<ledger>/repairs/<repair_id>.json`` (what will be inserted, from which call) is
   written and fsynced: the repair's intent is durable before the store changes;
4. the session's rows from the first orphan output on are deleted and inserted again,
   each synthesised item just before its output (new ids, same ``created_at``), and the
   transaction is committed (``synchronous=FULL``): all rows or none;
5. one ``session_repair`` entry per inserted item is appended (one atomic group),
   then the marker is removed.

A failure before the commit is issued rolls the store back and removes the marker and
the backup: the old state. A failure in or after the commit (or a crash anywhere from
step 3 on) leaves the marker; SQLite itself keeps the old or the new state, never half.
:func:`pending_repair_notices` reports the marker (for ``verify``), and the next
``repair-session`` of that store settles it (:func:`settle_pending`): it appends the
missing entries when the store holds the inserted items, else drops the marker.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import uuid
from pathlib import Path

from evidence_ledger.format.errors import EvidenceError, StorageError, UsageError
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.sessions.markers import marker_doc, remove_marker, write_marker
from evidence_ledger.sessions.plan import RepairPlan, SessionPlan
from evidence_ledger.sessions.record import RepairResult, check_plan, record_repair, store_history
from evidence_ledger.sessions.stores import (
    SessionItems,
    connect_read_only,
    quoted_table,
    session_rows,
    table_columns,
)
from evidence_ledger.storage.fsutil import fsync_path

__all__ = ["apply_store_repair"]

_SDK_COLUMNS = ("id", "session_id", "message_data", "created_at")


def _unchanged(conn: sqlite3.Connection, table: str, planned: SessionItems) -> bool:
    """Whether the session reads now (under the caller's lock) as it was planned from."""
    rows = conn.execute(
        f"SELECT id, session_id, message_data FROM {quoted_table(table)} WHERE session_id = ? "
        "ORDER BY id", (planned.session_id,),
    )
    now = next(session_rows(rows), SessionItems(planned.session_id, [], []))
    return (now.items, now.rows, now.skipped) == (planned.items, planned.rows, planned.skipped)


def _backup(store: Path, path: Path) -> None:
    """Copy ``store`` to a new file ``path`` with the SQLite backup API, fsynced.

    Called while the caller holds the write lock (``BEGIN IMMEDIATE``, nothing written
    yet): a second, read-only connection copies the last committed state. (A backup from
    the connection holding the lock would wait for that lock forever.)
    """
    try:
        with open(path, "xb"):
            pass
    except FileExistsError as exc:
        raise UsageError(f"backup {path} already exists; not overwriting it") from exc
    try:
        source, target = connect_read_only(store), sqlite3.connect(str(path))
        try:
            source.backup(target)
        finally:
            target.close()
            source.close()
        fsync_path(path)
        fsync_path(path.parent)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _rewrite_session(conn: sqlite3.Connection, table: str, plan: SessionPlan) -> None:
    """Delete the session's rows from the first orphan output on and insert them again,
    each synthesised item just before its output (same ``created_at``)."""
    t, sid = quoted_table(table), plan.session.session_id
    before = {ins.before_row: ins.item for ins in plan.insertions}
    first = min(r for r in before if r is not None)
    tail = conn.execute(
        f"SELECT id, message_data, created_at FROM {t} WHERE session_id = ? AND id >= ? "
        "ORDER BY id", (sid, first),
    ).fetchall()
    conn.execute(f"DELETE FROM {t} WHERE session_id = ? AND id >= ?", (sid, first))
    insert = f"INSERT INTO {t} (session_id, message_data, created_at) VALUES (?, ?, ?)"
    for row_id, data, created_at in tail:
        if row_id in before:
            conn.execute(insert, (sid, json.dumps(before[row_id]), created_at))
        conn.execute(insert, (sid, data, created_at))


def _commit(conn: sqlite3.Connection) -> None:
    conn.execute("COMMIT")


def apply_store_repair(
    plan: RepairPlan,
    writer: EvidenceWriter,
    *,
    by: str,
    backup: str | os.PathLike[str] | None = None,
    repair_id: str | None = None,
) -> RepairResult:
    """Carry out ``plan`` on its SQLite store and record it (steps: module docstring).

    Args:
        plan: from :func:`plan_repair` over a SQLite store (no refusals).
        writer: writes to the ledger the plan's evidence came from.
        by: who runs the repair (recorded).
        backup: path of the backup copy (default ``<store>.<repair_id>.bak``); never
            overwritten.
        repair_id: default a random 32-hex-digit id.

    Returns:
        A :class:`RepairResult` (no backup and no entries when nothing was to insert).

    Raises:
        UsageError: if the plan is not over a SQLite store, ``by`` is empty, the backup
            path exists, or the table lacks the SDK's columns.
        EvidenceError: if the plan has refusals, or a session changed since it was read
            (nothing changed).
        StorageError: if the ledger append failed after the store was committed (the
            marker is kept; see :func:`settle_pending`), or a marker write failed.
    """
    if plan.format != "sqlite":
        raise UsageError(f"only a SQLite session store can be repaired in place, not a "
                         f"{plan.format} source")
    check_plan(plan, by)
    repair_id = repair_id or uuid.uuid4().hex
    sessions = [s for s in plan.sessions if s.insertions]
    if not sessions:
        return RepairResult(plan, repair_id, None, [])
    store = Path(plan.store)
    backup_path = Path(backup) if backup else store.with_name(f"{store.name}.{repair_id}.bak")
    backup_path = backup_path.resolve()
    table = plan.messages_table
    marker: Path | None = None
    made_backup = committing = False
    try:
        conn = sqlite3.connect(str(store), isolation_level=None, timeout=30.0)
    except sqlite3.Error as exc:
        raise UsageError(f"{store}: cannot open for writing: {exc}") from exc
    try:
        columns = table_columns(conn, table)
        if any(c not in columns for c in _SDK_COLUMNS):
            raise UsageError(f"{store}: table {table} lacks the SDK's columns {_SDK_COLUMNS}")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("BEGIN IMMEDIATE")
        for s in sessions:
            if not _unchanged(conn, table, s.session):
                raise EvidenceError(
                    f"session {s.session.session_id} changed since it was read (another "
                    "writer?); nothing changed, run repair-session again"
                )
        _backup(store, backup_path)
        made_backup = True
        history = store_history(writer, sessions)
        marker = write_marker(
            writer.ledger, repair_id,
            marker_doc(plan, repair_id, by, str(backup_path), history),
        )
        for s in sessions:
            _rewrite_session(conn, table, s)
        committing = True
        _commit(conn)
    except BaseException as exc:
        if not committing:  # the store is as it was: leave no trace of the attempt
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if marker is not None:
                remove_marker(marker)
            if made_backup:
                backup_path.unlink(missing_ok=True)
        if isinstance(exc, sqlite3.Error):
            raise StorageError(f"{store}: repair failed: {exc}") from exc
        raise
    finally:
        conn.close()
    assert marker is not None
    entries = record_repair(writer, plan, repair_id, by, str(backup_path), history, marker)
    return RepairResult(plan, repair_id, backup_path, entries)
