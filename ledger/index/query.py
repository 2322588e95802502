"""Reading the index: one read-only SQL statement, or a named audit query
(:mod:`evidence_ledger.index.named`), over an index brought up to date first
(:func:`run_query`; any reader: :func:`read_index`), read-only connections
(:func:`connect_read_only`), and what a damaged index file raises
(:func:`raise_if_damaged`, :func:`rebuilt_if_damaged`).

A query is refused unless DuckDB's own parser finds exactly one ``SELECT`` (or
``EXPLAIN``); it runs on a read-only connection with file access, extension loading and
configuration changes disabled, under a shared lock (no update runs meanwhile).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from evidence_ledger.format.errors import UsageError
from evidence_ledger.index.build import (
    Progress,
    checked_index_path,
    index_failed,
    index_lock,
    is_current,
    refuse_non_regular,
    update_index,
)
from evidence_ledger.index.db import one_line, one_row
from evidence_ledger.index.named import resolve
from evidence_ledger.storage.ledger_dir import Ledger

__all__ = [
    "DamagedIndexError",
    "QueryResult",
    "check_read_only",
    "connect_read_only",
    "raise_if_damaged",
    "read_index",
    "rebuilt_if_damaged",
    "run_query",
]

T = TypeVar("T")

_READ_ONLY = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def check_read_only(sql: str) -> None:
    """Accept exactly one ``SELECT`` (or ``EXPLAIN``) statement, by DuckDB's own parser.

    Raises:
        UsageError: if ``sql`` does not parse, holds more than one statement, or any
            statement that is not a read (INSERT, COPY, ATTACH, SET, PRAGMA, CALL, ...).
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {one_line(exc)}") from exc
    if len(statements) != 1:
        raise UsageError(f"give exactly one SQL statement, not {len(statements)}")
    kind = statements[0].type
    if kind not in _READ_ONLY:
        raise UsageError(f"refused: {kind.name} statement; queries are read-only (SELECT)")


def _open_read_only(path: Path) -> duckdb.DuckDBPyConnection:
    """Read-only connection, session time zone UTC, file access, extension loading and
    configuration changes disabled (raises duckdb.Error)."""
    con = duckdb.connect(str(path), read_only=True, config={
        "autoinstall_known_extensions": False, "autoload_known_extensions": False,
    })
    try:
        for setting in ("SET TimeZone = 'UTC'", "SET enable_external_access = false",
                        "SET lock_configuration = true"):
            con.execute(setting)
    except duckdb.Error:
        con.close()
        raise
    return con


@contextlib.contextmanager
def connect_read_only(path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to the index at ``path``: session time zone UTC; file
    access, extension loading and configuration changes disabled. Holds a shared lock so
    no update runs meanwhile.

    Raises:
        UsageError: if the index cannot be opened where it is (StorageError: if its
            storage fails).
    """
    refuse_non_regular(path)
    with index_lock(path, exclusive=False):
        try:
            con = _open_read_only(path)
        except duckdb.Error as exc:
            raise index_failed(exc, path, "open") from exc
        try:
            yield con
        finally:
            con.close()


@dataclass(frozen=True)
class QueryResult:
    """The rows of one query.

    Attributes:
        columns: column names.
        types: DuckDB type names of the columns.
        rows: the rows, Python values (datetime for TIMESTAMP, list for arrays).
        tree_size: entries the index held when the query ran.
        root_hash: RFC 9162 root hash at that tree size (base64).
    """

    columns: list[str]
    types: list[str]
    rows: list[tuple[Any, ...]]
    tree_size: int
    root_hash: str


def run_query(
    ledger: Ledger,
    sql_or_name: str,
    path: str | os.PathLike[str] | None = None,
    *,
    params: Mapping[str, object] | None = None,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> QueryResult:
    """Run one read-only SQL statement, or the named audit query ``sql_or_name``
    (:data:`evidence_ledger.index.named.NAMED_QUERIES`), over the index, brought up to
    date first (see :func:`read_index`).

    Args:
        params: values of the named query's parameters (text, or ints for an ``INTEGER``
            one; missing ones take their defaults); for SQL, values bound to its ``$name``
            parameters as given. Bound as prepared-statement parameters, never pasted in.

    Raises:
        UsageError: for an unknown name or a bad parameter (before the index is touched),
            a statement that is not a single read, or one that fails (one-line message);
            :class:`DamagedIndexError` for a damaged index named by ``path``.
        EvidenceError: if the log fails integrity while indexing.
        TypeError: for a parameter value of another Python type than its parameter takes.
    """
    sql, values = resolve(sql_or_name, params)
    check_read_only(sql)
    return read_index(ledger, lambda con, target: _execute(con, sql, values, target), path,
                      rebuild=rebuild, progress=progress)


def read_index(
    ledger: Ledger,
    read: Callable[[duckdb.DuckDBPyConnection, Path], T],
    path: str | os.PathLike[str] | None = None,
    *,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> T:
    """``read(con, index_file)`` on a read-only connection (:func:`connect_read_only`) to
    the index of ``ledger``, brought up to date first (:func:`update_index`; not when it
    is current already). ``read`` raises :class:`DamagedIndexError` (see
    :func:`raise_if_damaged`) when DuckDB finds the file damaged: a default index is then
    rebuilt and ``read`` called once more.

    Args:
        ledger: the ledger.
        read: what to do with the index (runs under a shared lock: no update meanwhile).
        path: the index file (default: the ledger's index in the user's cache,
            :mod:`evidence_ledger.index.location`).
        rebuild: rebuild the index from the log first.
        progress: see :data:`evidence_ledger.index.build.Progress`.

    Raises:
        UsageError: if the ledger has no log or the index cannot be opened or written;
            :class:`DamagedIndexError` for a damaged index named by ``path``.
        EvidenceError: if the log fails integrity while indexing.
    """
    ledger.require_exists()
    return rebuilt_if_damaged(
        path, rebuild, lambda again: _read(ledger, read, path, again, progress))


def rebuilt_if_damaged(
    path: str | os.PathLike[str] | None, rebuild: bool, read: Callable[[bool], T]
) -> T:
    """``read(rebuild)``; when it raises :class:`DamagedIndexError` and the index is the
    default one (a cache of ours), ``read(True)`` once more.

    Raises:
        DamagedIndexError: for an index named by ``path`` (never replaced unasked), or
            when ``read`` was already rebuilding.
    """
    try:
        return read(rebuild)
    except DamagedIndexError:
        if path is not None or rebuild:
            raise
    return read(True)


def _read(
    ledger: Ledger, read: Callable[[duckdb.DuckDBPyConnection, Path], T],
    path: str | os.PathLike[str] | None, rebuild: bool, progress: Progress | None,
) -> T:
    target = checked_index_path(ledger, path)
    if not rebuild and target.is_file():
        with index_lock(target, exclusive=False):
            try:
                con = _open_read_only(target)
            except duckdb.Error:
                con = None
            if con is not None:
                try:
                    if is_current(con, ledger):
                        return read(con, target)
                finally:
                    con.close()
    info = update_index(ledger, path, rebuild=rebuild, progress=progress)
    with connect_read_only(info.path) as con:
        return read(con, info.path)


class DamagedIndexError(UsageError):
    """The index file fails DuckDB's own checks while it is read (a damaged cache):
    the default index is rebuilt; one named with ``--index`` needs ``--rebuild``."""


def raise_if_damaged(exc: duckdb.Error, path: str | os.PathLike[str] | None = None) -> None:
    """Raise :class:`DamagedIndexError` when ``exc`` is DuckDB finding its file damaged
    (a block whose checksum does not match; DuckDB gives it no class of its own)."""
    text = str(exc)
    if "Corrupt database file" in text or "does not match stored checksum" in text:
        where = f"index {path}" if path else "the index"
        raise DamagedIndexError(
            f"{where} is damaged ({one_line(exc)}); run again with --rebuild"
        ) from exc


def _execute(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object] | None, path: Path
) -> QueryResult:
    try:
        meta = one_row(con, "SELECT tree_size, root_hash FROM ledger_index")
        cursor = con.execute(sql, params)
        rows = cursor.fetchall()
    except duckdb.Error as exc:
        raise_if_damaged(exc, path)
        raise UsageError(f"SQL error: {one_line(exc)}") from exc
    assert meta is not None
    description = cursor.description or []
    return QueryResult(
        [d[0] for d in description], [str(d[1]) for d in description], rows,
        int(meta[0]), str(meta[1]),
    )
