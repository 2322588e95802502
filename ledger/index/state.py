"""The deriver's state between two updates, in the index's own DuckDB tables.

Schema :data:`STATE`: one table per table of
:data:`evidence_ledger.verify.rules.STATE_TABLES` (the rule engine's plain-data state,
:meth:`~evidence_ledger.verify.rules.RuleEngine.state_row_batches`), each with a leading
row number ``n`` (the order rows are read back in), and ``deriver`` (one row: where the
deriver stands in the log) and ``tree_peaks`` (the RFC 9162 compact range,
:meth:`evidence_ledger.tlog.merkle.CompactRange.peaks`). Written by :func:`save_state` in the
update's last transaction, with the rows and the metadata row: the state always stands
where the index does. Plain values only: nothing read back runs code.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from evidence_ledger.tlog import merkle
from evidence_ledger.verify import rules
from evidence_ledger.verify.spill import Spill

__all__ = ["STATE", "DeriverPlace", "StoredSpill", "StoredStateDamaged", "load_state",
           "save_state", "state_schema"]

T = TypeVar("T")

STATE = "state"
"""The schema of the state tables."""

FLUSH_ROWS = 20_000
"""State rows buffered per table before one bulk insert."""

_VALUE = ("value_int", "value_text", "value_blob")
"""``call_values.value`` (an int, text or bytes by field) stored in one of three columns."""
_INTS = frozenset({"seq", "count", "value", "persisted_order", "decision_seq",
                   "authorized_by"})
_BLOBS = frozenset({"args_digest", "expected", "got", "result_digest"})
_BOOLS = frozenset({"needs_approval", "policy_result", "always", "persisted"})


def _columns(table: str) -> list[tuple[str, pa.DataType]]:
    """The stored columns of state table ``table`` (after ``n``)."""
    columns: list[tuple[str, pa.DataType]] = []
    for name in rules.STATE_TABLES[table]:
        if table == "call_values" and name == "value":
            columns += [(_VALUE[0], pa.int64()), (_VALUE[1], pa.string()),
                        (_VALUE[2], pa.binary())]
        elif name == "time":  # ns since the epoch, up to 2^64-1
            columns.append((name, pa.uint64()))
        elif name in _INTS:
            columns.append((name, pa.int64()))
        elif name in _BLOBS:
            columns.append((name, pa.binary()))
        elif name in _BOOLS:
            columns.append((name, pa.bool_()))
        else:
            columns.append((name, pa.string()))
    return columns


_SQL_TYPES = {pa.int64(): "BIGINT", pa.uint64(): "UBIGINT", pa.string(): "VARCHAR",
              pa.binary(): "BLOB", pa.bool_(): "BOOLEAN"}


def state_schema() -> list[str]:
    """The statements that create the empty state tables."""
    statements = [
        f"CREATE SCHEMA {STATE}",
        f"CREATE TABLE {STATE}.deriver (size BIGINT, log_offset BIGINT, "
        "last_record_offset BIGINT, last_hash BLOB, findings BIGINT)",
        f"CREATE TABLE {STATE}.tree_peaks (n BIGINT, peak BLOB)",
    ]
    for table in rules.STATE_TABLES:
        columns = ", ".join(f'"{name}" {_SQL_TYPES[kind]}' for name, kind in _columns(table))
        statements.append(f'CREATE TABLE {STATE}."{table}" (n BIGINT, {columns})')
    return statements


@dataclass(frozen=True)
class DeriverPlace:
    """Where a deriver stands in the log.

    Attributes:
        size: entries fed. offset: byte just past the last record fed. last_offset: byte
        where the last record fed starts. last_hash: its entry hash (32 bytes, zeros when
        none). findings: the engine's findings already turned into rows.
    """

    size: int
    offset: int
    last_offset: int
    last_hash: bytes
    findings: int


def _stored(table: str, row: Sequence[rules.StateValue]) -> tuple[Any, ...]:
    if table != "call_values":
        return tuple(row)
    value = row[4]
    split = (value, None, None) if isinstance(value, int) else (
        (None, value, None) if isinstance(value, str) else (None, None, value))
    return (*row[:4], *split)


class _Appender:
    """Rows of state tables buffered and inserted :data:`FLUSH_ROWS` at a time."""

    def __init__(self, con: duckdb.DuckDBPyConnection, commit_each: bool) -> None:
        self._con = con
        self._commit_each = commit_each
        self._rows: dict[str, list[tuple[Any, ...]]] = {name: [] for name in rules.STATE_TABLES}
        self._count = {name: int(con.execute(
            f'SELECT coalesce(max(n) + 1, 0) FROM {STATE}."{name}"').fetchall()[0][0])
            for name in rules.STATE_TABLES}

    def add(self, table: str, rows: Iterable[Sequence[rules.StateValue]]) -> None:
        held = self._rows[table]
        for row in rows:
            held.append((self._count[table], *_stored(table, row)))
            self._count[table] += 1
        if len(held) >= FLUSH_ROWS:
            self.flush(table)

    def flush(self, table: str) -> None:
        held = self._rows[table]
        if not held:
            return
        fields = [("n", pa.int64()), *_columns(table)]
        arrow = pa.Table.from_arrays(
            [pa.array(column, kind) for column, (_, kind) in zip(zip(*held, strict=True), fields,
                                                              strict=True)],
            schema=pa.schema(fields))
        self._con.register("_state_rows", arrow)
        try:
            self._con.execute(f'INSERT INTO {STATE}."{table}" SELECT * FROM _state_rows')
        finally:
            self._con.unregister("_state_rows")
        self._rows[table] = []
        if self._commit_each:
            self._con.execute("COMMIT")
            self._con.execute("BEGIN TRANSACTION")


def save_state(con: duckdb.DuckDBPyConnection, engine: rules.RuleEngine,
               tree: merkle.CompactRange, place: DeriverPlace, commit_each: bool = False,
               ) -> None:
    """Replace the stored state with ``engine``'s, ``tree``'s and ``place``, inside the
    caller's transaction (committed, and another begun, after each bulk insert when
    ``commit_each``: in a side file, where DuckDB would otherwise keep every row inserted
    in memory until the commit). Memory: one run's rows and :data:`FLUSH_ROWS` rows a
    table.

    Raises:
        duckdb.Error: a statement that did not land.
    """
    stored = engine.spill if isinstance(engine.spill, StoredSpill) else None
    if stored is None:
        for table in rules.STATE_TABLES:
            con.execute(f'DELETE FROM {STATE}."{table}"')
    else:
        stored.forget_written(con)
    for table in ("deriver", "tree_peaks"):
        con.execute(f'DELETE FROM {STATE}."{table}"')
    con.execute(f"INSERT INTO {STATE}.deriver VALUES (?, ?, ?, ?, ?)",
                [place.size, place.offset, place.last_offset, place.last_hash, place.findings])
    con.executemany(f"INSERT INTO {STATE}.tree_peaks VALUES (?, ?)",
                    list(enumerate(tree.peaks)))
    appender = _Appender(con, commit_each)
    for table, rows in engine.state_row_batches(written_only=stored is not None):
        appender.add(table, rows)
    for table in rules.STATE_TABLES:
        appender.flush(table)


PART_CALLS = 20_000
"""Calls restored between two retirements of runs to the spill (about: runs are split
into parts by a hash of their id)."""
_RUN_TABLES = ("decisions", "call_values", "calls", "sticky", "approved", "runs", "run_states")
"""The state tables whose rows belong to the run named by their ``run_id``."""
_SESSION_TABLES = ("sessions", "session_runs")
"""The state tables whose rows belong to the session named by their ``session_id``."""


def _read(con: duckdb.DuckDBPyConnection, table: str, where: str = "",
          params: Sequence[object] = ()) -> Iterator[tuple[Any, ...]]:
    """The rows of state table ``table`` (those matching ``where``, SQL with ``params``)
    as :meth:`RuleEngine.state_rows` gives them, in the order they were stored, fetched
    in batches."""
    cursor = con.cursor()
    try:
        cursor.execute(f'SELECT * EXCLUDE (n) FROM {STATE}."{table}" {where} ORDER BY n',
                       list(params))
        while batch := cursor.fetchmany(FLUSH_ROWS):
            for row in batch:
                if table == "call_values":
                    value = next((v for v in row[4:] if v is not None), None)
                    yield (*row[:4], value)
                else:
                    yield row
    finally:
        cursor.close()


def load_state(con: duckdb.DuckDBPyConnection, lazy: bool = False,
               ) -> tuple[rules.RuleEngine, merkle.CompactRange, DeriverPlace] | None:
    """The stored state: a rule engine spilling to a new :class:`Spill`, the tree and the
    place; None when there is none, or it is not well formed (the index is then rebuilt).
    Memory: the runs of some :data:`PART_CALLS` calls at a time, and the engine's live
    state (:meth:`RuleEngine.from_state_parts`). ``lazy``: read only the tables outside
    runs and sessions; the engine spills to a :class:`StoredSpill` over ``con``, which
    reads a run or a session when an entry names it (``con`` then stays open, and is the
    one :func:`save_state` writes to).

    Raises:
        duckdb.Error: a read that failed.
    """
    rows = con.execute(f"SELECT * FROM {STATE}.deriver").fetchall()
    if len(rows) != 1:
        return None
    place = DeriverPlace(*rows[0])
    peaks = [peak for _, peak in con.execute(
        f"SELECT n, peak FROM {STATE}.tree_peaks ORDER BY n").fetchall()]
    try:
        tree = merkle.CompactRange.from_peaks(place.size, peaks)
        outside = {table: _read(con, table) for table in rules.STATE_TABLES
                   if table not in _RUN_TABLES and (not lazy or table not in _SESSION_TABLES)}
        if lazy:
            engine = rules.RuleEngine.from_state_parts([outside], StoredSpill(con))
        else:
            (calls,) = con.execute(f"SELECT count(*) FROM {STATE}.calls").fetchone() or (0,)
            count = max(1, calls // PART_CALLS)
            parts = [{table: _read(con, table, f"WHERE hash(run_id) % {count} = {part}")
                      for table in _RUN_TABLES} for part in range(count)]
            engine = rules.RuleEngine.from_state_parts([*parts, outside], Spill())
    except (ValueError, KeyError, TypeError):
        return None
    if len(place.last_hash) != 32:
        return None
    return engine, tree, place


class StoredStateDamaged(Exception):
    """The stored state of a run or a session that a :class:`StoredSpill` read is not
    well formed, or could not be read (the index is then rebuilt)."""


def _checked(read: Callable[..., T]) -> Callable[..., T]:
    """``read``, raising :class:`StoredStateDamaged` for stored rows that do not read."""

    @functools.wraps(read)
    def checked(*args: Any) -> T:
        try:
            return read(*args)
        except (duckdb.Error, ValueError, KeyError, TypeError) as exc:
            raise StoredStateDamaged(str(exc)) from exc

    return checked


class StoredSpill(Spill):
    """A :class:`Spill` that also holds, as stored, the runs and sessions of the state
    :func:`save_state` stored in ``con``: one is read from the state tables only when an
    entry names it (and is then the engine's, or written here: :meth:`written_run_ids`),
    so that an update reads and :func:`save_state` rewrites the rows of the runs and
    sessions it touched only, not the whole state. ``con`` must stay open, its state
    tables unchanged, until the state is saved.

    Attributes:
        rows_read: state rows read so far (runs, sessions and lookups across them).

    Raises:
        StoredStateDamaged: from a read of stored rows that do not read.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        super().__init__()
        self._con = con.cursor()  # its own: the update's connection streams results too
        self._taken_runs: set[str] = set()
        self._taken_sessions: set[str] = set()
        self.rows_read = 0

    @_checked
    def _rows(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        rows = self._con.execute(sql, list(params)).fetchall()
        self.rows_read += len(rows)
        return rows

    @_checked
    def _stored_run(self, run_id: str) -> tuple[bytes, list[tuple[str, str | None]]] | None:
        if run_id in self._taken_runs:
            return None
        tables = {table: list(_read(self._con, table, "WHERE run_id = ?", [run_id]))
                  for table in _RUN_TABLES}
        self.rows_read += sum(map(len, tables.values()))
        return rules.encoded_run(tables, run_id)

    def run(self, run_id: str) -> bytes | None:
        own = super().run(run_id)
        if own is not None:
            return own
        stored = self._stored_run(run_id)
        return None if stored is None else stored[0]

    def take_run(self, run_id: str) -> tuple[bytes, list[tuple[str, str | None]]] | None:
        own = super().take_run(run_id)
        if own is not None:
            return own
        stored = self._stored_run(run_id)
        if stored is not None:
            self._taken_runs.add(run_id)
        return stored

    def call_runs(self, call_id: str) -> list[tuple[int, str, str]]:
        stored = [row for row in self._rows(
            f"SELECT seq, run_id, scope FROM {STATE}.calls WHERE call_id = ?", [call_id])
            if row[1] not in self._taken_runs]
        return sorted([*super().call_runs(call_id), *stored])

    def _stored_calls(self) -> Iterator[tuple[int, str, str, str]]:
        cursor = self._con.cursor()
        try:
            cursor.execute(f"SELECT seq, run_id, scope, call_id FROM {STATE}.calls ORDER BY seq")
            while batch := cursor.fetchmany(FLUSH_ROWS):
                self.rows_read += len(batch)
                yield from (row for row in batch if row[1] not in self._taken_runs)
        finally:
            cursor.close()

    def call_seqs(self) -> Iterator[tuple[int, str, str, str]]:
        return heapq.merge(super().call_seqs(), self._stored_calls())

    def call_count(self) -> int:
        return super().call_count() + sum(1 for _ in self._stored_calls())

    def _stored_run_ids(self) -> set[str]:
        return {run_id for table in _RUN_TABLES for (run_id,) in self._rows(
            f'SELECT DISTINCT run_id FROM {STATE}."{table}"', [])} - self._taken_runs

    def run_ids(self) -> list[str]:
        return [*super().run_ids(), *sorted(self._stored_run_ids())]

    def unpersisted(self, first: int) -> tuple[int, list[tuple[int, str]]]:
        count, own = super().unpersisted(first)
        stored = [(order, run_id) for order, run_id in self._rows(
            f"SELECT persisted_order, run_id FROM {STATE}.runs WHERE NOT persisted "
            "ORDER BY persisted_order", []) if run_id not in self._taken_runs]
        return count + len(stored), sorted([*own, *stored])[:first]

    def state_parent(self, state_id: str) -> tuple[bool, str | None]:
        own = super().state_parent(state_id)
        if own[0]:
            return own
        for parent, run_id in self._rows(
                f"SELECT parent, run_id FROM {STATE}.run_states WHERE state_id = ?", [state_id]):
            if run_id not in self._taken_runs:
                return True, parent
        return False, None

    @_checked
    def _stored_session(self, session_id: str) -> bytes | None:
        if session_id in self._taken_sessions:
            return None
        items = self._rows(f"SELECT call_id, item_type, count FROM {STATE}.sessions "
                           "WHERE session_id = ? ORDER BY n", [session_id])
        writers = self._rows(f"SELECT run_id FROM {STATE}.session_runs "
                             "WHERE session_id = ? ORDER BY n", [session_id])
        if not items and not writers:
            return None
        return rules.encoded_session(items, (run_id for run_id, in writers))

    def take_session(self, session_id: str) -> bytes | None:
        own = super().take_session(session_id)
        if own is not None:
            return own
        stored = self._stored_session(session_id)
        if stored is not None:
            self._taken_sessions.add(session_id)
        return stored

    def sessions(self) -> Iterator[tuple[str, bytes]]:
        yield from super().sessions()
        stored = {session_id for table in _SESSION_TABLES for (session_id,) in self._rows(
            f'SELECT DISTINCT session_id FROM {STATE}."{table}"', [])}
        for session_id in sorted(stored - self._taken_sessions):
            state = self._stored_session(session_id)
            if state is not None:
                yield session_id, state

    def forget_written(self, con: duckdb.DuckDBPyConnection) -> None:
        """Delete, in ``con`` (the one read from), the stored rows of the runs and
        sessions taken from them, and of every table outside runs and sessions: what
        :meth:`RuleEngine.state_row_batches` with ``written_only`` writes anew."""
        for table in rules.STATE_TABLES:  # first: it ends a result ``con`` may hold
            if table not in _RUN_TABLES and table not in _SESSION_TABLES:
                con.execute(f'DELETE FROM {STATE}."{table}"')
        taken = [(self._taken_runs, "run_id", _RUN_TABLES),
                 (self._taken_sessions, "session_id", _SESSION_TABLES)]
        for ids, column, tables in taken:
            if not ids:
                continue
            con.register("_state_taken", pa.table({column: pa.array(sorted(ids), pa.string())}))
            try:
                for table in tables:
                    con.execute(f'DELETE FROM {STATE}."{table}" WHERE "{column}" IN '
                                f'(SELECT "{column}" FROM _state_taken)')
            finally:
                con.unregister("_state_taken")
