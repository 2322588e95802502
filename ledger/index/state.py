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

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from evidence_ledger.tlog import merkle
from evidence_ledger.verify import rules
from evidence_ledger.verify.spill import Spill

__all__ = ["STATE", "DeriverPlace", "load_state", "save_state", "state_schema"]

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
        self._count = dict.fromkeys(rules.STATE_TABLES, 0)

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
    for table in ("deriver", "tree_peaks", *rules.STATE_TABLES):
        con.execute(f'DELETE FROM {STATE}."{table}"')
    con.execute(f"INSERT INTO {STATE}.deriver VALUES (?, ?, ?, ?, ?)",
                [place.size, place.offset, place.last_offset, place.last_hash, place.findings])
    con.executemany(f"INSERT INTO {STATE}.tree_peaks VALUES (?, ?)",
                    list(enumerate(tree.peaks)))
    appender = _Appender(con, commit_each)
    for table, rows in engine.state_row_batches():
        appender.add(table, rows)
    for table in rules.STATE_TABLES:
        appender.flush(table)


PART_CALLS = 20_000
"""Calls restored between two retirements of runs to the spill (about: runs are split
into parts by a hash of their id)."""
_RUN_TABLES = ("decisions", "call_values", "calls", "sticky", "approved", "runs", "run_states")
"""The state tables whose rows belong to the run named by their ``run_id``."""


def _read(con: duckdb.DuckDBPyConnection, table: str, where: str = "",
          ) -> Iterator[tuple[Any, ...]]:
    """The rows of state table ``table`` (those matching ``where``, SQL) as
    :meth:`RuleEngine.state_rows` gives them, in the order they were stored, fetched in
    batches."""
    cursor = con.cursor()
    try:
        cursor.execute(f'SELECT * EXCLUDE (n) FROM {STATE}."{table}" {where} ORDER BY n')
        while batch := cursor.fetchmany(FLUSH_ROWS):
            for row in batch:
                if table == "call_values":
                    value = next((v for v in row[4:] if v is not None), None)
                    yield (*row[:4], value)
                else:
                    yield row
    finally:
        cursor.close()


def load_state(con: duckdb.DuckDBPyConnection,
               ) -> tuple[rules.RuleEngine, merkle.CompactRange, DeriverPlace] | None:
    """The stored state: a rule engine spilling to a new :class:`Spill`, the tree and the
    place; None when there is none, or it is not well formed (the index is then rebuilt).
    Memory: the runs of some :data:`PART_CALLS` calls at a time, and the engine's live
    state (:meth:`RuleEngine.from_state_parts`).

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
        (calls,) = con.execute(f"SELECT count(*) FROM {STATE}.calls").fetchone() or (0,)
        count = max(1, calls // PART_CALLS)
        parts = [{table: _read(con, table, f"WHERE hash(run_id) % {count} = {part}")
                  for table in _RUN_TABLES} for part in range(count)]
        parts.append({table: _read(con, table) for table in rules.STATE_TABLES
                      if table not in _RUN_TABLES})
        engine = rules.RuleEngine.from_state_parts(parts, Spill())
    except (ValueError, KeyError, TypeError):
        return None
    if len(place.last_hash) != 32:
        return None
    return engine, tree, place
