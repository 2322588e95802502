"""The index database: its tables (columns, Arrow schemas, ``CREATE TABLE`` statements),
the SQL that turns a chunk of raw entries into view rows, and small DuckDB helpers.

:data:`VIEWS` is the contract with users (documented in docs/QUERIES.md). A
:class:`Chunk` holds one Arrow table per entry kind (the entries' seq, hash, prev, time,
refs, body, and the ``seq`` of the call the rules attribute each one to: see
:class:`evidence_ledger.index.build.Deriver`); :meth:`Chunk.insert` makes every view's rows from
them
with one ``INSERT ... SELECT`` per view, in DuckDB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from evidence_ledger.format import entries

__all__ = [
    "BLOCKS_SCHEMA",
    "BODIES",
    "CALL_SEQ",
    "CHECKED_SCHEMAS",
    "MAX_TIME_NS",
    "SCHEMA",
    "VIEWS",
    "Chunk",
    "View",
    "digest_text",
    "exact_ns",
    "insert_rows",
    "one_line",
    "one_row",
    "rows_table",
    "timestamps",
]


MAX_TIME_NS = 2**63 - 1
"""Latest time the index's ``*_ns`` (BIGINT) columns hold: a later entry time (the format
allows up to 2^64-1 ns, in the year 2554) is NULL there, and its TIMESTAMP column holds
it to the microsecond."""

_ARROW = {
    "BIGINT": pa.int64(),
    "VARCHAR": pa.string(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMP": pa.timestamp("us"),
    "VARCHAR[]": pa.list_(pa.string()),
    "BLOB": pa.binary(),
    "BLOB[]": pa.list_(pa.binary()),
}


RAW = "raw"
"""The schema of the tables under the views: ``raw.<view>`` holds the view's rows with
every digest column (:attr:`View.digests`) as 32-byte BLOBs (``refs``: BLOB[])."""


def digest_sql(expr: str) -> str:
    """SQL rendering the BLOB ``expr`` as ``sha256:<lowercase hex>`` (NULL stays NULL)."""
    return f"'sha256:' || lower(hex({expr}))"


@dataclass(frozen=True)
class View:
    """One view of the index, over its table ``raw.<name>`` (:data:`RAW`).

    Attributes:
        name: view name.
        columns: ``(column, DuckDB type)`` pairs of the view, in order. A ``TIMESTAMP``
            column ``x`` (UTC, microseconds) always has a ``BIGINT`` column ``x_ns``
            (exact ns).
        time: the ``*_ns`` column ``export --since/--until`` filter on.
        order: the column(s) rows are ordered by.
        digests: the columns shown as ``sha256:<hex>`` text (``VARCHAR``, or
            ``VARCHAR[]``) and stored as 32-byte BLOBs (``BLOB``, ``BLOB[]``) in the table.
    """

    name: str
    columns: tuple[tuple[str, str], ...]
    time: str
    order: str
    digests: frozenset[str] = frozenset()

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the view (what exports hold)."""
        return pa.schema([(name, _ARROW[kind]) for name, kind in self.columns])

    @property
    def stored_schema(self) -> pa.Schema:
        """The Arrow schema of the table (digests as binary)."""
        return pa.schema([(name, _ARROW[self._stored(name, kind)])
                          for name, kind in self.columns])

    @property
    def names(self) -> list[str]:
        """Column names, in order."""
        return [name for name, _ in self.columns]

    @property
    def table(self) -> str:
        """The table under the view: ``raw.<name>``."""
        return f"{RAW}.{self.name}"

    def _stored(self, name: str, kind: str) -> str:
        return kind.replace("VARCHAR", "BLOB") if name in self.digests else kind

    def create_sql(self) -> tuple[str, str]:
        """``CREATE TABLE raw.<name>`` and ``CREATE VIEW <name>`` (digests as text)."""
        table = ", ".join(f"{n} {self._stored(n, t)}" for n, t in self.columns)
        shown = []
        for name, kind in self.columns:
            if name not in self.digests:
                shown.append(name)
            elif kind.endswith("[]"):
                shown.append(f"[{digest_sql('d')} for d in {name}] AS {name}")
            else:
                shown.append(f"{digest_sql(name)} AS {name}")
        return (f"CREATE TABLE {self.table} ({table})",
                f"CREATE VIEW {self.name} AS SELECT {', '.join(shown)} FROM {self.table}")


def _view(name: str, spec: str, time: str, order: str) -> View:
    """A :class:`View` from ``"column:TYPE ..."`` (type VARCHAR when left out; ``DIGEST``
    and ``DIGEST[]``: a digest column, shown as VARCHAR / VARCHAR[])."""
    columns, digests = [], set()
    for item in spec.split():
        column, _, kind = item.partition(":")
        if kind.startswith("DIGEST"):
            digests.add(column)
            kind = kind.replace("DIGEST", "VARCHAR")
        columns.append((column, kind or "VARCHAR"))
    return View(name, tuple(columns), time, order, frozenset(digests))


_IDENT = "seq:BIGINT entry_hash:DIGEST run_id scope:VARCHAR[] call_id"
VIEWS: dict[str, View] = {
    view.name: view
    for view in (
        _view("entries",
              "seq:BIGINT entry_hash:DIGEST prev:DIGEST kind time:TIMESTAMP time_ns:BIGINT "
              "run_id scope:VARCHAR[] call_id refs:DIGEST[]", "time_ns", "seq"),
        _view("calls",
              f"{_IDENT} agent tool arguments_digest:DIGEST arguments_form "
              "arguments_payload:DIGEST needs_approval:BOOLEAN response_id called_at:TIMESTAMP "
              "called_at_ns:BIGINT", "called_at_ns", "seq"),
        _view("approvals",
              f"{_IDENT} agent tool decision always:BOOLEAN approver reason "
              "message_digest:DIGEST arguments_digest:DIGEST call_arguments_digest:DIGEST "
              "bound:BOOLEAN call_seq:BIGINT decided_at:TIMESTAMP decided_at_ns:BIGINT",
              "decided_at_ns", "seq"),
        _view("executions",
              f"{_IDENT} agent tool arguments_digest:DIGEST arguments_form "
              "result_digest:DIGEST error arguments_match:BOOLEAN call_seq:BIGINT "
              "executed_at:TIMESTAMP executed_at_ns:BIGINT", "executed_at_ns", "seq"),
        _view("session_items",
              f"{_IDENT} session_id op item_type item_digest:DIGEST output_digest:DIGEST "
              "arguments_digest:DIGEST call_seq:BIGINT recorded_at:TIMESTAMP "
              "recorded_at_ns:BIGINT", "recorded_at_ns", "seq"),
        _view("guardrails",
              f"{_IDENT} agent tool guardrail message_digest:DIGEST call_seq:BIGINT "
              "blocked_at:TIMESTAMP blocked_at_ns:BIGINT", "blocked_at_ns", "seq"),
        _view("guard_verdicts",
              f"{_IDENT} agent tool verdict mode code reason arguments_digest:DIGEST "
              "policy_digest:DIGEST run_state message_digest:DIGEST call_seq:BIGINT "
              "judged_at:TIMESTAMP judged_at_ns:BIGINT", "judged_at_ns", "seq"),
        _view("revocations",
              "seq:BIGINT entry_hash:DIGEST run_id call_id revoked_by reason "
              "revoked_at:TIMESTAMP revoked_at_ns:BIGINT", "revoked_at_ns", "seq"),
        _view("violations",
              "finding_no:BIGINT seq:BIGINT rule run_id scope:VARCHAR[] call_id detail "
              "call_seq:BIGINT time:TIMESTAMP time_ns:BIGINT", "time_ns", "finding_no"),
        _view("call_chains",
              "call_seq:BIGINT run_id scope:VARCHAR[] call_id agent tool "
              "arguments_digest:DIGEST needs_approval:BOOLEAN decision sticky:BOOLEAN approver "
              "called_at:TIMESTAMP called_at_ns:BIGINT decided_at:TIMESTAMP "
              "decided_at_ns:BIGINT executed_at:TIMESTAMP executed_at_ns:BIGINT "
              "executions:BIGINT persisted:BIGINT persisted_at:TIMESTAMP "
              "persisted_at_ns:BIGINT status violations:VARCHAR[]", "called_at_ns", "call_seq"),
    )
}
"""Every view of the index, in export order (columns documented in docs/QUERIES.md)."""

def digest_text(digest: bytes | None) -> str | None:
    """A 32-byte digest as ``sha256:<lowercase hex>`` (None stays None)."""
    return None if digest is None else "sha256:" + digest.hex()


def rows_table(view: View, rows: list[tuple[Any, ...]]) -> pa.Table:
    """Rows (tuples in column order; a TIMESTAMP column ``x`` and its ``x_ns`` column both
    hold the time in ns, up to 2^64-1; digests as 32 bytes) -> Arrow table of the view's
    table (:attr:`View.stored_schema`; see :func:`timestamps`, :func:`exact_ns`)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in view.columns]
    times = {f"{name}_ns" for name, kind in view.columns if kind == "TIMESTAMP"}
    arrays = []
    schema = view.stored_schema
    for (name, kind), values, field in zip(view.columns, columns, schema, strict=True):
        if kind == "TIMESTAMP":
            arrays.append(timestamps(pa.array(values, pa.uint64())))
        elif name in times:
            arrays.append(exact_ns(pa.array(values, pa.uint64())))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def timestamps(ns: pa.Array) -> pa.Array:
    """ns since the epoch (uint64, any entry time) -> TIMESTAMP (UTC, microseconds)."""
    us = pc.divide(ns.cast(pa.uint64()), pa.scalar(1000, pa.uint64()))
    return us.cast(pa.int64()).cast(pa.timestamp("us"))


def exact_ns(ns: pa.Array) -> pa.Array:
    """ns since the epoch (uint64) -> the ``*_ns`` BIGINT column: NULL for a time past
    :data:`MAX_TIME_NS` (its TIMESTAMP column still holds it, to the microsecond)."""
    ns = ns.cast(pa.uint64())
    return pc.if_else(pc.greater(ns, pa.scalar(MAX_TIME_NS, pa.uint64())), None, ns).cast(
        pa.int64())



# -- entry rows: Arrow tables of raw bodies, made into view rows by SQL ----------------

_BODY_TYPES: dict[str, pa.DataType] = {
    **dict.fromkeys((
        "run_id", "call_id", "agent", "tool", "args_form", "response_id", "decision",
        "approver", "reason", "error", "session_id", "op", "item_type", "guardrail",
        "mode", "code", "run_state", "by",
    ), pa.string()),
    "scope": pa.list_(pa.string()),
    **dict.fromkeys(("needs_approval", "always"), pa.bool_()),
    **dict.fromkeys((
        "args_digest", "args_payload", "message_digest", "result_digest", "item_digest",
        "output_digest", "policy_digest",
    ), pa.binary()),
}
"""Arrow types of the body fields the views read (as :data:`entries.BODY_FIELDS` checks them)."""

BODIES: dict[str, pa.StructType] = {
    kind: pa.struct([(name, _BODY_TYPES[name]) for name in fields if name in _BODY_TYPES])
    for kind, fields in entries.BODY_FIELDS.items()
}
"""Per entry kind, the Arrow struct of its body as the views read it."""


def _checked_schema(kind: str) -> pa.Schema:
    return pa.schema([
        ("seq", pa.int64()), ("entry_hash", pa.binary()), ("prev", pa.binary()),
        ("time_ns", pa.int64()), ("time", pa.timestamp("us")),
        ("refs", pa.list_(pa.binary())), ("body", BODIES[kind]),
    ])


CHECKED_SCHEMAS = {kind: _checked_schema(kind) for kind in BODIES}
"""Per entry kind, the rows :func:`evidence_ledger.index.check.check_batch` makes of its entries:
seq, entry hash, prev, time, refs and body."""

CALL_SEQ = pa.field("call_seq", pa.int64())
"""The column :class:`evidence_ledger.index.build.Deriver` adds to those rows (the chunk tables,
registered
as ``new_<kind>``): the ``seq`` of the call the rules attribute each entry to."""


def _field(kind: str, name: str, sql_type: str) -> str:
    """``r.body.<name>``, or a typed NULL when entries of ``kind`` have no such field."""
    return f"r.body.{name}" if name in BODIES[kind].names else f"NULL::{sql_type}"


def _entries_select(kind: str) -> str:
    return (
        f"SELECT r.seq, r.entry_hash, r.prev, '{kind}' AS kind, r.time, r.time_ns, "
        f"{_field(kind, 'run_id', 'VARCHAR')} AS run_id, "
        f"{_field(kind, 'scope', 'VARCHAR[]')} AS scope, "
        f"{_field(kind, 'call_id', 'VARCHAR')} AS call_id, r.refs FROM new_{kind} r"
    )


_IDENT_SQL = "r.seq, r.entry_hash, r.body.run_id, r.body.scope, r.body.call_id"
_WHO_SQL = ("coalesce(nullif(r.body.agent, ''), c.agent) AS agent, "
            "coalesce(nullif(r.body.tool, ''), c.tool) AS tool")
_CALL = f"LEFT JOIN {RAW}.calls c ON c.seq = r.call_seq"
_SHOWN = "coalesce(r.body.args_digest, c.arguments_digest)"
_VIEW_SQL: dict[str, tuple[str, str]] = {
    "calls": ("call", f"""
        SELECT {_IDENT_SQL}, r.body.agent, r.body.tool,
            r.body.args_digest AS arguments_digest, r.body.args_form AS arguments_form,
            r.body.args_payload AS arguments_payload, r.body.needs_approval,
            r.body.response_id, r.time AS called_at, r.time_ns AS called_at_ns
        FROM new_call r"""),
    "approvals": ("decision", f"""
        SELECT {_IDENT_SQL}, {_WHO_SQL}, r.body.decision, r.body.always, r.body.approver,
            r.body.reason, r.body.message_digest AS message_digest,
            {_SHOWN} AS arguments_digest, c.arguments_digest AS call_arguments_digest,
            CASE WHEN c.seq IS NULL THEN NULL ELSE {_SHOWN} = c.arguments_digest END AS bound,
            r.call_seq, r.time AS decided_at, r.time_ns AS decided_at_ns
        FROM new_decision r {_CALL}"""),
    "executions": ("execution", f"""
        SELECT {_IDENT_SQL}, {_WHO_SQL}, r.body.args_digest AS arguments_digest,
            r.body.args_form AS arguments_form, r.body.result_digest AS result_digest,
            r.body.error,
            CASE WHEN c.seq IS NULL THEN NULL
                 ELSE r.body.args_digest = c.arguments_digest END AS arguments_match,
            r.call_seq, r.time AS executed_at, r.time_ns AS executed_at_ns
        FROM new_execution r {_CALL}"""),
    "session_items": ("session_item", f"""
        SELECT {_IDENT_SQL}, r.body.session_id, r.body.op, r.body.item_type,
            r.body.item_digest AS item_digest,
            r.body.output_digest AS output_digest,
            r.body.args_digest AS arguments_digest, r.call_seq,
            r.time AS recorded_at, r.time_ns AS recorded_at_ns
        FROM new_session_item r"""),
    "guardrails": ("guardrail", f"""
        SELECT {_IDENT_SQL}, {_WHO_SQL}, r.body.guardrail,
            r.body.message_digest AS message_digest, r.call_seq,
            r.time AS blocked_at, r.time_ns AS blocked_at_ns
        FROM new_guardrail r {_CALL}"""),
    **{f"guard_verdicts/{kind}": (kind, f"""
        SELECT {_IDENT_SQL}, r.body.agent, r.body.tool, '{kind}' AS verdict, r.body.mode,
            r.body.code, r.body.reason, r.body.args_digest AS arguments_digest,
            r.body.policy_digest AS policy_digest, r.body.run_state,
            r.body.message_digest AS message_digest, r.call_seq,
            r.time AS judged_at, r.time_ns AS judged_at_ns
        FROM new_{kind} r""") for kind in ("allowed", "denied")},
    "revocations": ("revocation", """
        SELECT r.seq, r.entry_hash AS entry_hash, r.body.run_id, r.body.call_id,
            r.body.by AS revoked_by, r.body.reason, r.time AS revoked_at,
            r.time_ns AS revoked_at_ns
        FROM new_revocation r"""),
}
"""View (or ``view/kind``, for a view fed by several kinds) -> (the entry kind its rows
come from, the SELECT that makes the rows of its table (digests as BLOBs)). ``c`` is the
row of the call the rules attribute the entry to (``call_seq``): agent and tool fall back
to it, and ``bound`` / ``arguments_match`` compare with its arguments digest."""


@dataclass(frozen=True)
class Chunk:
    """Entries fed since the last :meth:`Deriver.take`, ready for a bulk insert.

    Attributes:
        raw: entry kind -> its entries (:data:`CHECKED_SCHEMAS` and :data:`CALL_SEQ`).
        violations: new ``violations`` rows.
        blocks: new ``log_blocks`` rows (:data:`BLOCKS_SCHEMA`).
        chains: ``call_chains`` rows of the calls whose chain changed, replacing the rows
            with the same ``call_seq``; a NULL ``executed_at`` or ``persisted_at`` keeps the
            replaced row's (the first execution or persisted output, read in an earlier
            chunk).
    """

    raw: dict[str, pa.Table]
    violations: pa.Table
    blocks: pa.Table
    chains: pa.Table

    def insert(self, con: duckdb.DuckDBPyConnection) -> None:
        """Insert the rows into every table of ``con`` (``raw.calls`` first: the others
        join it). Raises duckdb.Error."""
        for kind, table in self.raw.items():
            con.register(f"new_{kind}", table)
        try:
            for name in VIEWS:
                selects = [sql for key, (kind, sql) in _VIEW_SQL.items()
                           if key.split("/")[0] == name and kind in self.raw]
                if name == "entries" and self.raw:
                    union = " UNION ALL ".join(_entries_select(kind) for kind in self.raw)
                    selects = [union]
                columns = ", ".join(VIEWS[name].names)
                for select in selects:
                    con.execute(f"INSERT INTO {VIEWS[name].table} SELECT {columns} "
                                f"FROM ({select}) ORDER BY seq")
        finally:
            for kind in self.raw:
                con.unregister(f"new_{kind}")
        insert_rows(con, VIEWS["violations"].table, self.violations)
        insert_rows(con, "log_blocks", self.blocks)
        if self.chains.num_rows:
            _replace_chains(con, self.chains)


_KEPT_TIMES = ("executed_at", "executed_at_ns", "persisted_at", "persisted_at_ns")


def _replace_chains(con: duckdb.DuckDBPyConnection, chains: pa.Table) -> None:
    """Replace the ``call_chains`` rows with the ``call_seq`` of ``chains``' (see
    :attr:`Chunk.chains`). Raises duckdb.Error."""
    table = VIEWS["call_chains"].table
    kept = ", ".join(f"coalesce(n.{c}, o.{c}) AS {c}" for c in _KEPT_TIMES)
    con.register("new_chains", chains)
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE merged_chains AS SELECT n.* REPLACE ({kept}) "
                    f"FROM new_chains n LEFT JOIN {table} o USING (call_seq)")
        con.execute(f"DELETE FROM {table} WHERE call_seq IN (SELECT call_seq FROM new_chains)")
        con.execute(f"INSERT INTO {table} SELECT * FROM merged_chains ORDER BY call_seq")
        con.execute("DROP TABLE merged_chains")
    finally:
        con.unregister("new_chains")


BLOCKS_SCHEMA = pa.schema([("first_seq", pa.int64()), ("log_offset", pa.int64())])
"""Rows of ``log_blocks``: where a record starts in the log file (``first_seq``, its
byte offset), for a few records (see :data:`evidence_ledger.index.build.BLOCK`), so that a reader of
the index finds the records it names without scanning the log from its start."""

SCHEMA = [
    f"CREATE SCHEMA {RAW}",
    *(statement for view in VIEWS.values() for statement in view.create_sql()),

    "CREATE TABLE ledger_index (index_version INTEGER, code_fingerprint VARCHAR, "
    "tree_size BIGINT, root_hash VARCHAR, last_entry_hash VARCHAR, "
    "last_record_offset BIGINT, log_offset BIGINT)",
    "CREATE TABLE log_blocks (first_seq BIGINT, log_offset BIGINT)",
]
"""The statements that create an empty index: every view and its table (:data:`RAW`),
the one-row metadata table
``ledger_index`` (where the index stands in the log) and ``log_blocks``
(:data:`BLOCKS_SCHEMA`)."""


def one_row(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[Any, ...] | None:
    """The single row of ``sql`` (fetched to the end, as DuckDB wants), or None."""
    rows = con.execute(sql).fetchall()
    return tuple(rows[0]) if len(rows) == 1 else None


def insert_rows(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    """Bulk-insert ``table`` (the columns of table ``name``, in order) into ``name``.
    Raises duckdb.Error."""
    if table.num_rows:
        con.register("_rows", table)
        con.execute(f"INSERT INTO {name} SELECT * FROM _rows")
        con.unregister("_rows")


def one_line(exc: Exception) -> str:
    """A DuckDB error message on one line, without the query excerpt DuckDB appends."""
    lines = []
    for line in str(exc).splitlines():
        if line.strip().startswith("LINE "):
            break
        if line.strip():
            lines.append(line.strip())
    return " ".join(lines) or type(exc).__name__
