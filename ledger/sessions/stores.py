"""Reading session stores, read-only: an SDK ``SQLiteSession`` file or a JSON Lines dump.

Sources (:func:`read_store`), told apart by their first bytes:

- a SQLite file written by the SDK's ``SQLiteSession``: table ``agent_messages``
  (``id`` INTEGER PRIMARY KEY AUTOINCREMENT, ``session_id`` TEXT, ``message_data`` TEXT
  holding ``json.dumps(item)``, ``created_at``), items ordered by ``id`` within a
  session. It is opened read-only (``file:...?mode=ro``); the database file is never
  written by a scan or a dry run (like any SQLite reader of a WAL database, the
  connection may leave empty ``-wal``/``-shm`` side files). Rows whose
  ``message_data`` is not JSON are skipped, as the SDK skips them, and named in a notice.
- a JSON Lines dump: UTF-8, one JSON object per line, exactly
  ``{"session_id": "<id>", "item": {...}}``; a session's items are its lines in file
  order; blank lines are ignored. ``row`` in findings is then the 1-based line number.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence_ledger.format.errors import UsageError
from evidence_ledger.storage.files import read_input

__all__ = ["MESSAGES_TABLE", "SessionItems", "StoreContents", "read_store"]

SQLITE_MAGIC = b"SQLite format 3\x00"
MESSAGES_TABLE = "agent_messages"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass
class SessionItems:
    """One session's history as read from a store.

    Attributes:
        session_id: the session.
        items: decoded items, oldest first (what ``get_items()`` returns).
        rows: per item, its SQLite row id or dump line number; None when not from a file.
        skipped: SQLite row ids of the session's rows that are not JSON (the SDK skips
            them too). Items, rows and skipped together tell a writer whether the session
            changed since it was read.
    """

    session_id: str
    items: list[Any]
    rows: list[int] | None = None
    skipped: list[int] = field(default_factory=list)


@dataclass
class StoreContents:
    """What :func:`read_store` read.

    Attributes:
        path: the source file.
        format: ``"sqlite"`` or ``"jsonl"``.
        sessions: per session (SQLite: ordered by session id; JSONL: by first line).
        notices: remarks that are not findings (rows the SDK would skip).
        messages_table: the SQLite table read (SQLite only).
    """

    path: Path
    format: str
    sessions: list[SessionItems]
    notices: list[str] = field(default_factory=list)
    messages_table: str = MESSAGES_TABLE


def quoted_table(name: str) -> str:
    """``name`` double-quoted for SQLite.

    Raises:
        UsageError: if ``name`` is not a plain identifier.
    """
    if not _IDENTIFIER.match(name):
        raise UsageError(f"not a table name: {name!r}")
    return f'"{name}"'


def _source_format(path: Path) -> str:
    head = read_input(path, limit=len(SQLITE_MAGIC))
    if not head:
        raise UsageError(f"{path}: empty file, neither a SQLite store nor a JSON Lines dump")
    return "sqlite" if head == SQLITE_MAGIC else "jsonl"


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only SQLite connection to ``path`` (``mode=ro`` URI)."""
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    return sqlite3.connect(uri, uri=True)


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """Column names of SQLite table ``table``, in order."""
    return [row[1] for row in conn.execute(f"PRAGMA table_info({quoted_table(table)})")]


_SKIP = object()
_raw_decode = json.JSONDecoder().raw_decode


def _decode_row(data: Any) -> Any:
    """``message_data`` decoded as the SDK decodes it (``json.loads``), or ``_SKIP`` for
    what it refuses (the SDK skips those rows) or nests beyond the recursion limit. The
    common case - a str holding exactly one JSON document - takes the faster public
    ``raw_decode``; anything else goes through ``json.loads`` itself."""
    if type(data) is str:
        try:
            value, end = _raw_decode(data)
            if end == len(data):
                return value
        except (ValueError, RecursionError):
            pass
    try:
        return json.loads(data)
    except (ValueError, TypeError, RecursionError):  # RecursionError: nested too deeply
        return _SKIP


def session_rows(
    rows: Iterable[tuple[Any, Any, Any]], contents: StoreContents | None = None
) -> Iterator[SessionItems]:
    """Group ``(id, session_id, message_data)`` rows, ordered by session then id, into
    sessions; rows that are not JSON are skipped (and named in ``contents.notices``)."""
    current: SessionItems | None = None
    key: Any = None
    items: list[Any] = []
    ids: list[int] = []
    for row_id, sid, data in rows:
        if current is None or sid != key:
            if current is not None:
                yield current
            key, items, ids = sid, [], []
            current = SessionItems(str(sid), items, ids)
        value = _decode_row(data)
        if value is _SKIP:
            current.skipped.append(row_id)
            if contents is not None:
                contents.notices.append(
                    f"session {sid}: row {row_id} is not JSON; the SDK skips it (not scanned)"
                )
            continue
        items.append(value)
        ids.append(row_id)
    if current is not None:
        yield current


def _read_sqlite(path: Path, session_id: str | None, table: str) -> StoreContents:
    try:
        conn = connect_read_only(path)
        try:
            columns = table_columns(conn, table)
            missing = [c for c in ("id", "session_id", "message_data") if c not in columns]
            if missing:
                raise UsageError(
                    f"{path}: no table {table} with columns id, session_id, message_data: "
                    "not an openai-agents SQLiteSession store"
                )
            query = f"SELECT id, session_id, message_data FROM {quoted_table(table)}"
            params: tuple[str, ...] = ()
            if session_id is not None:
                query += " WHERE session_id = ?"
                params = (session_id,)
            rows = conn.execute(query + " ORDER BY session_id, id", params).fetchall()
        finally:
            conn.close()
    except (sqlite3.Error, UnicodeDecodeError) as exc:  # schema text that is not UTF-8 too
        raise UsageError(f"{path}: unreadable SQLite database: {exc}") from exc
    contents = StoreContents(path, "sqlite", [], messages_table=table)
    contents.sessions = list(session_rows(rows, contents))
    return contents


MAX_DUMP_LINE = 16 << 20
"""Longest line of a JSON Lines session dump (bytes); longer ones are refused unread."""


def _dump_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(number, text)`` of each line of the dump at ``path``, read one at a time (never
    more than :data:`MAX_DUMP_LINE` bytes of a line held).

    Raises:
        UsageError: for a line that is too long or not UTF-8, or a file that cannot be read.
    """
    try:
        with open(path, "rb") as fh:
            for number, raw in enumerate(iter(lambda: fh.readline(MAX_DUMP_LINE + 1), b""), 1):
                if len(raw) > MAX_DUMP_LINE:
                    raise UsageError(f"{path} line {number}: longer than {MAX_DUMP_LINE} "
                                     "bytes: neither a SQLite store nor a JSON Lines dump")
                try:
                    yield number, raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise UsageError(
                        f"{path}: neither a SQLite store nor a JSON Lines dump (line {number}"
                        f" is not UTF-8 text at byte {exc.start})"
                    ) from exc
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _read_jsonl(path: Path, session_id: str | None) -> StoreContents:
    sessions: dict[str, SessionItems] = {}
    first = True
    for number, line in _dump_lines(path):
        if not line.strip():
            continue
        record = _decode_row(line)
        if record is _SKIP:
            neither = "neither a SQLite store nor a JSON Lines dump: " if first else ""
            raise UsageError(f"{path}: {neither}line {number}: not JSON (or nested too deeply)")
        first = False
        if not (isinstance(record, dict) and set(record) == {"session_id", "item"}
                and isinstance(record["session_id"], str)):
            raise UsageError(
                f'{path} line {number}: expected {{"session_id": "<id>", "item": {{...}}}}'
            )
        sid = record["session_id"]
        if session_id is not None and sid != session_id:
            continue
        session = sessions.setdefault(sid, SessionItems(sid, [], []))
        session.items.append(record["item"])
        assert session.rows is not None
        session.rows.append(number)
    return StoreContents(path, "jsonl", list(sessions.values()))


def read_store(
    path: str | os.PathLike[str],
    *,
    session_id: str | None = None,
    messages_table: str = MESSAGES_TABLE,
) -> StoreContents:
    """Read a session store: a ``SQLiteSession`` file or a JSON Lines dump (see the module
    docstring), read-only.

    Args:
        path: the file.
        session_id: only this session (it must hold at least one item).
        messages_table: the SQLite messages table (``SQLiteSession(messages_table=...)``).

    Raises:
        UsageError: if the file is missing, empty, not a SQLite database of the SDK's
            shape nor a JSON Lines dump, or ``session_id`` names no session in it (or is
            not UTF-8 text).
    """
    if session_id is not None:
        try:
            session_id.encode("utf-8")
        except UnicodeEncodeError:  # bytes from the command line that are not UTF-8
            raise UsageError(f"session id {session_id!r} is not UTF-8 text: no session has "
                             "it") from None
    source = Path(path)
    kind = _source_format(source)
    if kind == "sqlite":
        contents = _read_sqlite(source, session_id, messages_table)
    else:
        contents = _read_jsonl(source, session_id)
    if session_id is not None and not contents.sessions:
        raise UsageError(f"{source}: no session {session_id!r} in it")
    return contents
