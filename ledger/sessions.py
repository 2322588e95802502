"""Session doctor: find agent sessions poisoned by tool items out of order, and repair the
orphan outputs among them from the ledger's evidence.

An openai-agents 0.22.x defect persisted a ``function_call_output`` whose
``function_call`` was never written; the model provider then refuses every later turn
of that conversation (HTTP 400). This module scans session stores for that damage and
for its relatives, and rebuilds the missing ``function_call`` from the recorded call.

Scanning is pure (:func:`scan_items` over a list of items). Findings, per session
(``index`` is the 0-based position in the history the SDK's ``get_items()`` returns):

- ``orphan_output``: a ``function_call_output`` whose ``call_id`` has no
  ``function_call`` anywhere in the session;
- ``output_before_call``: a ``function_call_output`` whose ``function_call`` exists only
  later in the session;
- ``dangling_call``: a ``function_call`` with no output in the session although the
  conversation moved on past its turn: after the call, past the rest of its batch of
  calls and then past the outputs that follow that batch, another item exists. (A call
  still awaiting approval sits at the end of the history, or is followed only by calls
  and outputs of its own batch, and is not reported.)
- ``duplicate_call_id``: a second (third, ...) ``function_call``, or a second
  ``function_call_output``, with a ``call_id`` seen before in the session.

Only ``function_call`` / ``function_call_output`` items with a string ``call_id`` take
part; every other item (messages, reasoning, hosted tool calls) only counts as "an item".

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

Repair (:func:`plan_repair`, :func:`apply_store_repair`): for each orphan output, the
``call`` entries with that ``call_id`` are looked up in the ledger (several runs: the one
whose recorded ``session_item`` put this output in this session). The item inserted
before the (first) orphan output is ``{"arguments": <exact raw arguments from the
payload store>, "call_id": ..., "name": <recorded tool>, "type": "function_call"}``.
A repair is refused (:class:`Refusal`) when no call is recorded, when it is ambiguous,
or when its arguments payload is missing (redacted) or does not match its digest.

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

:func:`repair_session` does the same for any SDK ``Session`` object; having no insert,
it rewrites the whole history (``clear_session`` then ``add_items``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import urllib.parse
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import digests
from .entries import Entry
from .errors import EvidenceError, LedgerError, StorageError, UsageError
from .fsutil import fsync_path
from .log import Ledger
from .writer import EvidenceWriter, item_bytes

__all__ = [
    "DANGLING_CALL",
    "DUPLICATE_CALL_ID",
    "FINDING_KINDS",
    "ORPHAN_OUTPUT",
    "OUTPUT_BEFORE_CALL",
    "Evidence",
    "Insertion",
    "PendingRepair",
    "RecordedCall",
    "Refusal",
    "RepairPlan",
    "RepairResult",
    "ScanReport",
    "SessionFinding",
    "SessionItems",
    "SessionPlan",
    "StoreContents",
    "apply_store_repair",
    "load_evidence",
    "pending_repair_notices",
    "pending_repairs",
    "plan_repair",
    "plan_session",
    "read_store",
    "repair_session",
    "scan_items",
    "scan_store",
    "settle_pending",
    "synthesised_call",
]

FUNCTION_CALL = "function_call"
FUNCTION_CALL_OUTPUT = "function_call_output"

ORPHAN_OUTPUT = "orphan_output"
OUTPUT_BEFORE_CALL = "output_before_call"
DANGLING_CALL = "dangling_call"
DUPLICATE_CALL_ID = "duplicate_call_id"
FINDING_KINDS = (ORPHAN_OUTPUT, OUTPUT_BEFORE_CALL, DANGLING_CALL, DUPLICATE_CALL_ID)
"""Stable names of the findings a scan reports."""

SCAN_FORMAT_VERSION = 1
MARKER_FORMAT_VERSION = 1
SQLITE_MAGIC = b"SQLite format 3\x00"
MESSAGES_TABLE = "agent_messages"
REPAIRS_DIR = "repairs"
_SDK_COLUMNS = ("id", "session_id", "message_data", "created_at")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# -- scanning (pure) ---------------------------------------------------------------------


@dataclass(frozen=True)
class SessionFinding:
    """One piece of damage in one session.

    Attributes:
        kind: one of :data:`FINDING_KINDS`.
        session_id: the session.
        call_id: the ``call_id`` concerned.
        index: 0-based position of the offending item in the session's history.
        row: the SQLite ``id`` of its row, or its 1-based line in a JSON Lines dump;
            None for items that came from a ``Session`` object.
        item_type: ``function_call`` or ``function_call_output``.
        detail: one sentence.
    """

    kind: str
    session_id: str
    call_id: str
    index: int
    row: int | None
    item_type: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        """JSON form (``schemas/scan-report.schema.json``, ``findings[]``)."""
        return {
            "kind": self.kind, "session_id": self.session_id, "call_id": self.call_id,
            "index": self.index, "row": self.row, "item_type": self.item_type,
            "detail": self.detail,
        }


def scan_items(
    session_id: str, items: Sequence[Any], rows: Sequence[int] | None = None
) -> list[SessionFinding]:
    """Every finding in one session's history, ordered by index (then kind).

    Args:
        session_id: the session's id (copied into the findings).
        items: the history, oldest first, as ``Session.get_items()`` returns it (dicts;
            anything else counts as an item that is not a tool item).
        rows: per item, its SQLite row id or dump line number (same length as
            ``items``), or None.

    Runs in O(len(items)); never raises on odd items.
    """
    n = len(items)
    kinds: list[str | None] = [None] * n
    calls: dict[str, list[int]] = defaultdict(list)
    outputs: dict[str, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == FUNCTION_CALL:
            found_in = calls
        elif kind == FUNCTION_CALL_OUTPUT:
            found_in = outputs
        else:
            continue
        call_id = item.get("call_id")
        if isinstance(call_id, str):
            kinds[i] = kind
            found_in[call_id].append(i)

    found: list[SessionFinding] = []

    def add(kind: str, call_id: str, index: int, item_type: str, detail: str) -> None:
        row = rows[index] if rows is not None else None
        found.append(SessionFinding(kind, session_id, call_id, index, row, item_type, detail))

    for call_id, where in outputs.items():
        called = calls.get(call_id)
        if not called:  # one orphan per call_id; later outputs are duplicates (below)
            add(ORPHAN_OUTPUT, call_id, where[0], FUNCTION_CALL_OUTPUT,
                f"function_call_output {call_id} has no function_call in the session")
        else:
            for i in where:
                if i < called[0]:
                    add(OUTPUT_BEFORE_CALL, call_id, i, FUNCTION_CALL_OUTPUT,
                        f"function_call_output {call_id} comes before its function_call "
                        f"(item {called[0]})")
        for i in where[1:]:
            add(DUPLICATE_CALL_ID, call_id, i, FUNCTION_CALL_OUTPUT,
                f"second function_call_output {call_id} (first at item {where[0]})")
    for call_id, where in calls.items():
        for i in where[1:]:
            add(DUPLICATE_CALL_ID, call_id, i, FUNCTION_CALL,
                f"second function_call {call_id} (first at item {where[0]})")

    # past_calls[i] / past_outputs[i]: first index >= i that is not a call / not an output
    past_calls, past_outputs = [n] * (n + 1), [n] * (n + 1)
    for i in range(n - 1, -1, -1):
        past_calls[i] = past_calls[i + 1] if kinds[i] == FUNCTION_CALL else i
        past_outputs[i] = past_outputs[i + 1] if kinds[i] == FUNCTION_CALL_OUTPUT else i
    for call_id, where in calls.items():
        if call_id in outputs:
            continue
        first = where[0]
        if past_outputs[past_calls[first + 1]] < n:
            add(DANGLING_CALL, call_id, first, FUNCTION_CALL,
                f"function_call {call_id} has no output and the conversation moved on")
    found.sort(key=lambda f: (f.index, FINDING_KINDS.index(f.kind)))
    return found


# -- reading stores ----------------------------------------------------------------------


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


def _table(name: str) -> str:
    if not _IDENTIFIER.match(name):
        raise UsageError(f"not a table name: {name!r}")
    return f'"{name}"'


def _source_format(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except FileNotFoundError as exc:
        raise UsageError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise UsageError(f"{path}: is a directory, not a session store") from exc
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if not head:
        raise UsageError(f"{path}: empty file, neither a SQLite store nor a JSON Lines dump")
    return "sqlite" if head == SQLITE_MAGIC else "jsonl"


def _connect_ro(path: Path) -> sqlite3.Connection:
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    return sqlite3.connect(uri, uri=True)


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({_table(table)})")]


_SKIP = object()
_raw_decode = json.JSONDecoder().raw_decode


def _decode_row(data: Any) -> Any:
    """``message_data`` decoded as the SDK decodes it (``json.loads``), or ``_SKIP`` for
    what it refuses (the SDK skips those rows). The common case - a str holding exactly
    one JSON document - takes the faster public ``raw_decode``; anything else goes
    through ``json.loads`` itself."""
    if type(data) is str:
        try:
            value, end = _raw_decode(data)
            if end == len(data):
                return value
        except ValueError:
            pass
    try:
        return json.loads(data)
    except (ValueError, TypeError):
        return _SKIP


def _session_rows(
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
        conn = _connect_ro(path)
        try:
            columns = _columns(conn, table)
            missing = [c for c in ("id", "session_id", "message_data") if c not in columns]
            if missing:
                raise UsageError(
                    f"{path}: no table {table} with columns id, session_id, message_data: "
                    "not an openai-agents SQLiteSession store"
                )
            query = f"SELECT id, session_id, message_data FROM {_table(table)}"
            params: tuple[str, ...] = ()
            if session_id is not None:
                query += " WHERE session_id = ?"
                params = (session_id,)
            rows = conn.execute(query + " ORDER BY session_id, id", params).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise UsageError(f"{path}: unreadable SQLite database: {exc}") from exc
    contents = StoreContents(path, "sqlite", [], messages_table=table)
    contents.sessions = list(_session_rows(rows, contents))
    return contents


def _read_jsonl(path: Path, session_id: str | None) -> StoreContents:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{path}: neither a SQLite store nor a JSON Lines dump (not UTF-8 text at byte "
            f"{exc.start})"
        ) from exc
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    sessions: dict[str, SessionItems] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        record = _decode_row(line)
        if record is _SKIP:
            raise UsageError(f"{path} line {number}: not JSON")
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
            shape nor a JSON Lines dump, or ``session_id`` names no session in it.
    """
    source = Path(path)
    kind = _source_format(source)
    if kind == "sqlite":
        contents = _read_sqlite(source, session_id, messages_table)
    else:
        contents = _read_jsonl(source, session_id)
    if session_id is not None and not contents.sessions:
        raise UsageError(f"{source}: no session {session_id!r} in it")
    return contents


@dataclass
class ScanReport:
    """The findings of a scan (see ``schemas/scan-report.schema.json``).

    Attributes:
        contents: what was read.
        findings: per session id, its findings (ordered by index).
    """

    contents: StoreContents
    findings: dict[str, list[SessionFinding]]

    @property
    def ok(self) -> bool:
        """True when no session holds a finding."""
        return not any(self.findings.values())

    @property
    def all_findings(self) -> list[SessionFinding]:
        """Every finding, session by session."""
        return [f for s in self.contents.sessions for f in self.findings[s.session_id]]

    def to_json(self) -> dict[str, Any]:
        """The ``scan-session --json`` document."""
        sessions = self.contents.sessions
        return {
            "format_version": SCAN_FORMAT_VERSION,
            "source": str(self.contents.path),
            "source_format": self.contents.format,
            "ok": self.ok,
            "totals": {
                "sessions": len(sessions),
                "items": sum(len(s.items) for s in sessions),
                "findings": len(self.all_findings),
            },
            "sessions": [
                {
                    "session_id": s.session_id, "items": len(s.items),
                    "findings": [f.to_json() for f in self.findings[s.session_id]],
                }
                for s in sessions
            ],
            "notices": list(self.contents.notices),
        }


def scan_store(
    path: str | os.PathLike[str],
    *,
    session_id: str | None = None,
    messages_table: str = MESSAGES_TABLE,
) -> ScanReport:
    """Read a store (:func:`read_store`) and scan every session in it (:func:`scan_items`).

    Raises:
        UsageError: as :func:`read_store`.
    """
    contents = read_store(path, session_id=session_id, messages_table=messages_table)
    findings = {s.session_id: scan_items(s.session_id, s.items, s.rows) for s in contents.sessions}
    return ScanReport(contents, findings)


# -- evidence ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedCall:
    """A ``call`` entry, as a repair needs it.

    Attributes:
        run_id, scope, call_id: the call's identity.
        agent, tool: who called what.
        args_digest: 32-byte arguments digest.
        args_payload: 32-byte digest of the raw arguments payload.
        entry_hash: 32-byte hash of the ``call`` entry.
        seq: its leaf index.
    """

    run_id: str
    scope: tuple[str, ...]
    call_id: str
    agent: str
    tool: str
    args_digest: bytes
    args_payload: bytes
    entry_hash: bytes
    seq: int


@dataclass
class Evidence:
    """What a ledger says about calls and sessions, indexed for repairs (pure).

    Attributes:
        calls: call_id -> recorded calls with that id, in log order.
        output_runs: (session_id, call_id) -> run ids of recorded ``session_item`` adds
            of a ``function_call_output`` (tells apart calls of several runs).
        repair_ids: ``repair_id`` of every ``session_repair`` entry.
    """

    calls: dict[str, list[RecordedCall]] = field(default_factory=dict)
    output_runs: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    repair_ids: set[str] = field(default_factory=set)

    @classmethod
    def from_entries(cls, entries: Iterable[tuple[Entry, bytes]]) -> Evidence:
        """Index decoded ``(entry, entry_hash)`` pairs in log order."""
        evidence = cls()
        for entry, hash_ in entries:
            b = entry.body
            if entry.kind == "call":
                evidence.calls.setdefault(b["call_id"], []).append(RecordedCall(
                    b["run_id"], tuple(b["scope"]), b["call_id"], b["agent"], b["tool"],
                    b["args_digest"], b["args_payload"], hash_, entry.seq,
                ))
            elif (entry.kind == "session_item" and b["op"] == "add"
                  and b["item_type"] == FUNCTION_CALL_OUTPUT and b["call_id"] is not None):
                evidence.output_runs.setdefault((b["session_id"], b["call_id"]), set()).add(
                    b["run_id"]
                )
            elif entry.kind == "session_repair":
                evidence.repair_ids.add(b["repair_id"])
        return evidence


def load_evidence(ledger: Ledger) -> Evidence:
    """Read ``ledger`` once into an :class:`Evidence` index.

    Raises:
        UsageError: if the directory holds no ledger.
        EvidenceError: if the log is damaged (run ``verify``).
    """
    ledger.require_exists()
    return Evidence.from_entries(ledger.entries())


# -- planning (pure) ---------------------------------------------------------------------


def synthesised_call(call: RecordedCall, arguments: str) -> dict[str, Any]:
    """The ``function_call`` item rebuilt from a recorded call and its raw ``arguments``.

    Fields as the Responses API takes them as input: ``arguments``, ``call_id``,
    ``name``, ``type``. No item ``id`` or ``status`` is invented (the ledger does not
    record them; both are optional in model input).
    """
    return {"arguments": arguments, "call_id": call.call_id, "name": call.tool,
            "type": FUNCTION_CALL}


@dataclass(frozen=True)
class Insertion:
    """One ``function_call`` to insert.

    Attributes:
        session_id: the session.
        call_id: the orphan output's call_id.
        before_index: index of the (first) orphan output in the history as read.
        before_row: its SQLite row id / dump line, or None.
        position: index of the inserted item in the repaired history.
        item: the synthesised ``function_call`` (:func:`synthesised_call`).
        call: the recorded call it was rebuilt from.
    """

    session_id: str
    call_id: str
    before_index: int
    before_row: int | None
    position: int
    item: dict[str, Any]
    call: RecordedCall


@dataclass(frozen=True)
class Refusal:
    """An orphan output the ledger's evidence cannot repair.

    Attributes:
        session_id, call_id: where.
        index, row: the orphan output's position (see :class:`SessionFinding`).
        reason: one sentence.
    """

    session_id: str
    call_id: str
    index: int
    row: int | None
    reason: str


@dataclass
class SessionPlan:
    """The repair of one session.

    Attributes:
        session: the history as read.
        insertions: ordered by position.
        refusals: orphan outputs left as they are, and why.
        other_findings: findings a repair does not address (dangling calls, duplicates,
            outputs before their calls).
    """

    session: SessionItems
    insertions: list[Insertion] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    other_findings: list[SessionFinding] = field(default_factory=list)

    def repaired_items(self) -> list[Any]:
        """The history after the insertions."""
        before = {ins.before_index: ins.item for ins in self.insertions}
        out: list[Any] = []
        for i, item in enumerate(self.session.items):
            if i in before:
                out.append(before[i])
            out.append(item)
        return out


@dataclass
class RepairPlan:
    """The repair of a store.

    Attributes:
        store: the store's name: absolute path of the file, or ``session:<Class>``.
        format: ``"sqlite"``, ``"jsonl"`` or ``"session"``.
        sessions: one plan per session read.
        messages_table: the SQLite table (SQLite only).
    """

    store: str
    format: str
    sessions: list[SessionPlan]
    messages_table: str = MESSAGES_TABLE

    @property
    def insertions(self) -> list[Insertion]:
        """Every insertion, session by session."""
        return [i for s in self.sessions for i in s.insertions]

    @property
    def refusals(self) -> list[Refusal]:
        """Every refusal, session by session."""
        return [r for s in self.sessions for r in s.refusals]


def _pick_call(
    session_id: str, call_id: str, evidence: Evidence
) -> tuple[RecordedCall | None, str]:
    candidates = evidence.calls.get(call_id, [])
    if not candidates:
        return None, f"the ledger records no call with call_id {call_id}"
    if len(candidates) > 1:
        runs = evidence.output_runs.get((session_id, call_id), set())
        narrowed = [c for c in candidates if c.run_id in runs]
        if len(narrowed) != 1:
            where = ", ".join(f"seq {c.seq} (run {c.run_id})" for c in candidates)
            return None, (
                f"{len(candidates)} recorded calls have call_id {call_id} ({where}) and the "
                f"ledger does not say which one put this output in session {session_id}"
            )
        candidates = narrowed
    return candidates[0], ""


def plan_session(
    session: SessionItems,
    evidence: Evidence,
    get_payload: Callable[[bytes], bytes | None],
) -> SessionPlan:
    """Plan the repair of one session's orphan outputs from ``evidence``.

    Args:
        session: the history (see :class:`SessionItems`).
        evidence: the ledger's index (:func:`load_evidence`).
        get_payload: maps a 32-byte payload digest to the payload bytes, or None when
            absent (e.g. ``PayloadStore.get``); the bytes are re-hashed here.

    Returns:
        A :class:`SessionPlan`; one insertion per orphan ``call_id``, before its first
        output. Never raises.
    """
    plan = SessionPlan(session)
    findings = scan_items(session.session_id, session.items, session.rows)
    shift = 0
    for finding in findings:
        if finding.kind != ORPHAN_OUTPUT:
            plan.other_findings.append(finding)
            continue
        call, reason = _pick_call(session.session_id, finding.call_id, evidence)
        arguments: str | None = None
        if call is not None:
            payload = get_payload(call.args_payload)
            if payload is None:
                reason = (f"the arguments payload of call {finding.call_id} (seq {call.seq}) "
                          "is missing from the payload store (redacted?)")
            elif digests.sha256(payload) != call.args_payload:
                reason = (f"the arguments payload of call {finding.call_id} (seq {call.seq}) "
                          "does not match its digest")
            else:
                try:
                    arguments = payload.decode("utf-8", "surrogatepass")
                except UnicodeDecodeError:
                    reason = (f"the arguments payload of call {finding.call_id} "
                              f"(seq {call.seq}) is not UTF-8 text")
        if call is None or arguments is None:
            plan.refusals.append(Refusal(
                session.session_id, finding.call_id, finding.index, finding.row, reason
            ))
            continue
        plan.insertions.append(Insertion(
            session.session_id, finding.call_id, finding.index, finding.row,
            finding.index + shift, synthesised_call(call, arguments), call,
        ))
        shift += 1
    return plan


def plan_repair(
    contents: StoreContents,
    evidence: Evidence,
    get_payload: Callable[[bytes], bytes | None],
) -> RepairPlan:
    """Plan the repair of every session read from a store (see :func:`plan_session`)."""
    return RepairPlan(
        str(contents.path.resolve()), contents.format,
        [plan_session(s, evidence, get_payload) for s in contents.sessions],
        contents.messages_table,
    )


# -- markers: a repair's durable intent ---------------------------------------------------


def _marker_path(ledger: Ledger, repair_id: str) -> Path:
    return ledger.directory / REPAIRS_DIR / f"{repair_id}.json"


def _write_marker(ledger: Ledger, repair_id: str, doc: dict[str, Any]) -> Path:
    path = _marker_path(ledger, repair_id)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_path(path.parent)
        fsync_path(ledger.directory)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write repair marker {path}: {exc}") from exc
    return path


def _remove_marker(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
        fsync_path(path.parent)
    except OSError as exc:
        raise StorageError(f"cannot remove repair marker {path}: {exc}") from exc


def _marker_doc(
    plan: RepairPlan, repair_id: str, by: str, backup: str | None,
    history_digests: dict[str, bytes],
) -> dict[str, Any]:
    return {
        "format_version": MARKER_FORMAT_VERSION,
        "repair_id": repair_id,
        "store": plan.store,
        "format": plan.format,
        "messages_table": plan.messages_table,
        "backup": backup,
        "by": by,
        "history_digests": {k: digests.to_text(v) for k, v in history_digests.items()},
        "insertions": [
            {
                "session_id": i.session_id, "position": i.position, "item": i.item,
                "run_id": i.call.run_id, "scope": list(i.call.scope),
                "call_entry": digests.to_text(i.call.entry_hash),
            }
            for i in plan.insertions
        ],
    }


@dataclass(frozen=True)
class PendingRepair:
    """A repair whose marker is still in ``<ledger>/repairs/``.

    Attributes:
        path: the marker file.
        doc: its JSON content, or None when it cannot be read.
        recorded: True when the ledger already holds its ``session_repair`` entries (the
            crash came between the append and the marker's removal).
    """

    path: Path
    doc: dict[str, Any] | None
    recorded: bool

    @property
    def repair_id(self) -> str:
        """The repair id (the marker's file name without ``.json``)."""
        return self.path.stem


def pending_repairs(ledger: Ledger, evidence: Evidence | None = None) -> list[PendingRepair]:
    """Markers left in ``<ledger>/repairs/``, oldest name first.

    Args:
        ledger: the ledger.
        evidence: its index, if already loaded; else the log is read only when a
            marker exists (a damaged log counts as holding no repair).
    """
    folder = ledger.directory / REPAIRS_DIR
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not paths:
        return []
    if evidence is None:
        try:
            evidence = load_evidence(ledger)
        except LedgerError:
            evidence = Evidence()
    found = []
    for path in paths:
        try:
            doc = json.loads(path.read_text("utf-8"))
            doc = doc if isinstance(doc, dict) else None
        except (OSError, ValueError):
            doc = None
        found.append(PendingRepair(path, doc, path.stem in evidence.repair_ids))
    return found


def pending_repair_notices(ledger: Ledger | str | os.PathLike[str] | None) -> list[str]:
    """One-line notices for ``verify``: repairs with a marker but no ledger entry.

    A marker is written before a session store is changed and removed once the
    ``session_repair`` entries are appended, so a leftover one means a crash or failure
    in between: the store may hold items the ledger does not record. Cheap when no
    marker exists (one directory check; the log is read only otherwise).

    Returns:
        Notices (possibly none); never raises for unreadable markers.
    """
    book = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
    notices = []
    for pending in pending_repairs(book):
        name = f"{REPAIRS_DIR}/{pending.path.name}"
        if pending.doc is None:
            notices.append(f"session repair marker {name} is unreadable")
            continue
        store, rid = pending.doc.get("store"), pending.repair_id
        if pending.recorded:
            notices.append(f"session repair {rid} is recorded but its marker {name} was "
                           f"left; the next repair-session of {store} removes it")
        elif pending.doc.get("format") == "session":
            history = ", ".join(f"{sid}: {d}" for sid, d in
                                sorted((pending.doc.get("history_digests") or {}).items()))
            notices.append(
                f"session repair {rid} of a {store} object has no session_repair entry "
                f"(marker {name}): its whole-history rewrite may have stopped half-way; the "
                f"history before it is in the payload store ({history})"
            )
        else:
            notices.append(
                f"session repair {rid} of {store} has no session_repair entry (marker "
                f"{name}): the store may hold items the ledger does not record; run "
                f"`evidence-ledger repair-session {store} --ledger {book.directory} --apply "
                "--by NAME` to settle it"
            )
    return notices


def _holds_insertions(doc: dict[str, Any]) -> bool | None:
    """Whether the store named in a marker holds all its insertions (True), none (False)
    or some (None)."""
    contents = read_store(doc["store"], messages_table=doc.get("messages_table") or MESSAGES_TABLE)
    sessions = {s.session_id: s.items for s in contents.sessions}
    held = []
    for ins in doc["insertions"]:
        items, pos = sessions.get(ins["session_id"], []), ins["position"]
        held.append(0 <= pos < len(items) and items[pos] == ins["item"])
    if all(held):
        return True
    return False if not any(held) else None


def settle_pending(
    store: str | os.PathLike[str], writer: EvidenceWriter, *, apply: bool
) -> list[str]:
    """Settle leftover markers of repairs of ``store`` (a SQLite file); one line each.

    A marker whose entries are in the ledger is removed. Otherwise the store is read:
    when it holds every inserted item, the ``session_repair`` entries are appended (time:
    now; ``by`` and evidence from the marker) and the marker removed; when it holds none,
    the change was never committed and the marker is removed. With ``apply=False``
    nothing is written; the lines say what ``apply=True`` would do.

    Raises:
        UsageError: if the store cannot be read (:func:`read_store`).
        EvidenceError: if the store holds only some of a repair's items, or a marker is
            unreadable (both left for a person to look at).
        StorageError: if appending or removing fails.
    """
    target = str(Path(store).resolve())
    lines = []
    for pending in pending_repairs(writer.ledger):
        doc = pending.doc
        if doc is None:
            raise EvidenceError(f"repair marker {pending.path} is unreadable; look at it, "
                                "then move it away")
        if doc.get("store") != target:
            continue
        rid = pending.repair_id
        if pending.recorded:
            lines.append(f"repair {rid}: already recorded; {'removed' if apply else 'will remove'}"
                         " its leftover marker")
            if apply:
                _remove_marker(pending.path)
            continue
        held = _holds_insertions(doc)
        if held is None:
            raise EvidenceError(
                f"repair {rid}: the store holds only some of its inserted items (changed "
                f"since?); marker {pending.path} kept, backup {doc.get('backup')}"
            )
        if not held:
            lines.append(f"repair {rid}: never committed to the store; "
                         f"{'dropped' if apply else 'will drop'} its marker")
            if apply:
                _remove_marker(pending.path)
            continue
        lines.append(f"repair {rid}: in the store but not in the ledger; "
                     f"{'recorded' if apply else 'will record'} its "
                     f"{len(doc['insertions'])} session_repair entries")
        if apply:
            history = doc.get("history_digests") or {}
            with writer.atomic():
                for ins in doc["insertions"]:
                    hist = history.get(ins["session_id"])
                    writer.session_repair(
                        repair_id=rid, session_id=ins["session_id"], store=target,
                        item=ins["item"], position=ins["position"], run_id=ins["run_id"],
                        scope=ins["scope"], by=doc["by"], backup=doc.get("backup"),
                        history_digest=digests.from_text(hist) if hist else None,
                    )
            _remove_marker(pending.path)
    return lines


# -- applying to a SQLite store ------------------------------------------------------------


@dataclass(frozen=True)
class RepairResult:
    """What a repair did.

    Attributes:
        plan: the plan carried out.
        repair_id: the id shared by its ``session_repair`` entries.
        backup: the backup copy of the store (SQLite), else None.
        entries: entry hashes of the ``session_repair`` entries appended (32 bytes each).
    """

    plan: RepairPlan
    repair_id: str
    backup: Path | None
    entries: list[bytes]


def _unchanged(conn: sqlite3.Connection, table: str, planned: SessionItems) -> bool:
    """Whether the session reads now (under the caller's lock) as it was planned from."""
    rows = conn.execute(
        f"SELECT id, session_id, message_data FROM {_table(table)} WHERE session_id = ? "
        "ORDER BY id", (planned.session_id,),
    )
    now = next(_session_rows(rows), SessionItems(planned.session_id, [], []))
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
        source, target = _connect_ro(store), sqlite3.connect(str(path))
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
    t, sid = _table(table), plan.session.session_id
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


def _store_history(writer: EvidenceWriter, plans: Iterable[SessionPlan]) -> dict[str, bytes]:
    history = {p.session.session_id: writer.ledger.payloads.put(item_bytes(p.session.items))
               for p in plans}
    writer.ledger.payloads.sync()
    return history


def _record(
    writer: EvidenceWriter, plan: RepairPlan, repair_id: str, by: str, backup: str | None,
    history: dict[str, bytes], marker: Path,
) -> list[bytes]:
    try:
        with writer.atomic():
            hashes = [
                writer.session_repair(
                    repair_id=repair_id, session_id=ins.session_id, store=plan.store,
                    item=ins.item, position=ins.position, run_id=ins.call.run_id,
                    scope=ins.call.scope, by=by, backup=backup,
                    history_digest=history.get(ins.session_id),
                )
                for ins in plan.insertions
            ]
    except Exception as exc:
        raise StorageError(
            f"session store {plan.store} was repaired but its session_repair entries were not "
            f"appended ({type(exc).__name__}: {exc}); marker {marker} kept: run repair-session "
            "on that store again to record them"
        ) from exc
    _remove_marker(marker)
    return hashes


def _check_plan(plan: RepairPlan, by: str) -> None:
    if not by.strip():
        raise UsageError("a repair needs the name of who runs it (--by)")
    if plan.refusals:
        first = plan.refusals[0]
        raise EvidenceError(
            f"refusing to repair: {len(plan.refusals)} orphan output(s) lack usable evidence "
            f"(session {first.session_id}, {first.call_id}: {first.reason}); nothing changed"
        )


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
    _check_plan(plan, by)
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
        columns = _columns(conn, table)
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
        history = _store_history(writer, sessions)
        marker = _write_marker(
            writer.ledger, repair_id,
            _marker_doc(plan, repair_id, by, str(backup_path), history),
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
                _remove_marker(marker)
            if made_backup:
                backup_path.unlink(missing_ok=True)
        if isinstance(exc, sqlite3.Error):
            raise StorageError(f"{store}: repair failed: {exc}") from exc
        raise
    finally:
        conn.close()
    assert marker is not None
    entries = _record(writer, plan, repair_id, by, str(backup_path), history, marker)
    return RepairResult(plan, repair_id, backup_path, entries)


# -- any SDK Session object --------------------------------------------------------------


async def repair_session(
    session: Any,
    ledger: EvidenceWriter | Ledger | str | os.PathLike[str],
    *,
    by: str,
    apply: bool = False,
    repair_id: str | None = None,
) -> RepairResult:
    """Plan, and with ``apply=True`` carry out, the repair of one SDK ``Session`` object.

    The ``Session`` protocol has no insert, so applying **rewrites the whole history**:
    ``await session.clear_session()`` then ``await session.add_items(repaired)``. That
    pair is not atomic: a crash between the two leaves the session empty. Before it,
    the history is stored in the ledger's payload store (``history_digest`` of the
    entries) and a marker ``<ledger>/repairs/<repair_id>.json`` names it, so the history
    can be put back; :func:`pending_repair_notices` reports the marker until the
    ``session_repair`` entries are appended. Prefer :func:`apply_store_repair` for a
    SQLite file (one transaction). Wrap a ``RecordedSession`` to also record the
    rewrite as ``session_item`` entries (``clear`` then ``add``).

    Args:
        session: has ``session_id``, async ``get_items()``, ``clear_session()`` and
            ``add_items(items)``; must not limit ``get_items`` (``session_settings.limit``).
        ledger: the ledger holding the run's evidence (and receiving the entries).
        by: who runs the repair.
        apply: False (default) only plans.
        repair_id: default a random 32-hex-digit id.

    Returns:
        A :class:`RepairResult` (``entries`` empty when only planned or nothing to do).

    Raises:
        UsageError: if the session limits ``get_items``, or ``by`` is empty.
        EvidenceError: if an orphan output lacks usable evidence (nothing changed), or the
            session does not read back as written (marker kept).
        StorageError: if the ledger cannot be written.
    """
    writer = ledger if isinstance(ledger, EvidenceWriter) else EvidenceWriter(ledger)
    settings = getattr(session, "session_settings", None)
    limit = getattr(settings, "limit", None)
    if limit is not None:
        raise UsageError(f"the session limits get_items to {limit} items; rewriting its "
                         "history would drop the rest")
    evidence = load_evidence(writer.ledger)
    items = list(await session.get_items())
    session_id = str(session.session_id)
    kind = type(session)
    plan = RepairPlan(
        f"session:{kind.__module__}.{kind.__qualname__}", "session",
        [plan_session(SessionItems(session_id, items), evidence, writer.ledger.payloads.get)],
    )
    repair_id = repair_id or uuid.uuid4().hex
    if not apply:
        return RepairResult(plan, repair_id, None, [])
    _check_plan(plan, by)
    if not plan.insertions:
        return RepairResult(plan, repair_id, None, [])
    repaired = plan.sessions[0].repaired_items()
    history = _store_history(writer, plan.sessions)
    doc = _marker_doc(plan, repair_id, by, None, history)
    marker = _write_marker(writer.ledger, repair_id, doc)
    cleared = False
    try:
        await session.clear_session()
        cleared = True
        await session.add_items(repaired)
    except BaseException:
        if not cleared:
            _remove_marker(marker)
        raise
    if list(await session.get_items()) != repaired:
        raise EvidenceError(
            f"session {session_id} does not read back as written; marker {marker} kept "
            f"(history before the repair: payload {digests.to_text(history[session_id])})"
        )
    entries = _record(writer, plan, repair_id, by, None, history, marker)
    return RepairResult(plan, repair_id, None, entries)

