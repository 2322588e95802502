"""A DuckDB index of a ledger, for audit queries in SQL. Never authoritative.

The index is derived from the log and only from it: deleting it and running again
rebuilds the same rows. It lives at ``<ledger>/index.duckdb``, with
``index.duckdb.state`` (the deriver's state at the indexed size) and
``index.duckdb.lock`` (serialises processes) beside it, and is brought up to date by tree
size before each query: only records past the indexed tree size are read.

Pure core, :class:`Deriver`: log records (bytes) in, Arrow tables out. It decodes each
record with :func:`ledger.entries.decode_entry`, hashes it into the RFC 9162 tree with
:mod:`ledger.merkle`, and feeds it to the verifier's own :class:`ledger.rules.RuleEngine`;
``call_chains`` rows are :func:`ledger.chains.call_chains` of the engine's call states
and ``violations`` rows are its findings, so the index reads the same facts as
``verify``. The other views are made in bulk: the deriver hands over each chunk of
entries as Arrow tables of their bodies, with the ``seq`` of the call the rules
attribute each entry to, and one ``INSERT ... SELECT`` per view (:class:`Chunk`) turns
them into rows. It refuses (:class:`EvidenceError`) a record that fails its CRC-32,
canonical decoding, ``seq`` or ``prev`` link; ``verify`` names every break, checks
payloads and refs, and stays the verdict.

I/O around it: :func:`update_index` (each chunk of :data:`CHUNK` entries inserted and
committed on a thread of its own while the next is derived; the metadata row and the
saved state, written last, let the next update resume where this one stopped, and an
update killed midway is rebuilt, not resumed), :func:`derive` (the same rows in an
in-memory database), :func:`connect_read_only` and :func:`run_query` (one ``SELECT`` on
a read-only connection with file access disabled). Tables and columns: ``VIEWS`` and
docs/QUERIES.md.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gc
import hashlib
import itertools
import os
import pickle
import queue
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from . import chains, encoding, entries, findings, merkle, rules  # noqa: F401 (fingerprint)
from .entries import ZERO_HASH, Entry, decode_entry, entry_hash
from .errors import EncodingError, EvidenceError, StorageError, UsageError
from .framing import Damage, Record, TornTail
from .fsutil import file_lock, open_regular, problem
from .log import Ledger
from .verify import Report

__all__ = [
    "INDEX_NAME",
    "MAX_TIME_NS",
    "VIEWS",
    "Chunk",
    "DamagedIndexError",
    "Deriver",
    "IndexInfo",
    "Progress",
    "QueryResult",
    "View",
    "check_read_only",
    "connect_read_only",
    "derive",
    "index_path",
    "raise_if_damaged",
    "rebuilt_if_damaged",
    "run_query",
    "update_index",
]

INDEX_NAME = "index.duckdb"
INDEX_VERSION = 1
CHUNK = 50_000
"""Records decoded between two bulk inserts."""
MAX_TIME_NS = 2**63 - 1
"""Latest entry time the index holds (its time columns are BIGINT ns)."""

Progress = Callable[[int, int, int], None]
"""``progress(entries_done, bytes_done, bytes_total)``, called after each chunk."""

CallKey = tuple[str, tuple[str, ...], str]
T = TypeVar("T")

_ARROW = {
    "BIGINT": pa.int64(),
    "VARCHAR": pa.string(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMP": pa.timestamp("us"),
    "VARCHAR[]": pa.list_(pa.string()),
}


@dataclass(frozen=True)
class View:
    """One table of the index.

    Attributes:
        name: table name.
        columns: ``(column, DuckDB type)`` pairs, in order. A ``TIMESTAMP`` column ``x``
            (UTC, microseconds) always has a ``BIGINT`` column ``x_ns`` (exact ns).
        time: the ``*_ns`` column ``export --since/--until`` filter on.
        order: the column(s) rows are ordered by.
    """

    name: str
    columns: tuple[tuple[str, str], ...]
    time: str
    order: str

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the view (what exports hold)."""
        return pa.schema([(name, _ARROW[kind]) for name, kind in self.columns])

    @property
    def names(self) -> list[str]:
        """Column names, in order."""
        return [name for name, _ in self.columns]


def _cols(spec: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in spec.split():
        name, _, kind = item.partition(":")
        out.append((name, kind or "VARCHAR"))
    return tuple(out)


_IDENT = "run_id scope:VARCHAR[] call_id"
VIEWS: dict[str, View] = {
    view.name: view
    for view in (
        View("entries", _cols(
            "seq:BIGINT entry_hash prev kind time:TIMESTAMP time_ns:BIGINT "
            f"{_IDENT} refs:VARCHAR[]"), "time_ns", "seq"),
        View("calls", _cols(
            f"seq:BIGINT entry_hash {_IDENT} agent tool arguments_digest arguments_form "
            "arguments_payload needs_approval:BOOLEAN response_id called_at:TIMESTAMP "
            "called_at_ns:BIGINT"), "called_at_ns", "seq"),
        View("approvals", _cols(
            f"seq:BIGINT entry_hash {_IDENT} agent tool decision always:BOOLEAN approver "
            "reason message_digest arguments_digest call_arguments_digest bound:BOOLEAN "
            "call_seq:BIGINT decided_at:TIMESTAMP decided_at_ns:BIGINT"), "decided_at_ns", "seq"),
        View("executions", _cols(
            f"seq:BIGINT entry_hash {_IDENT} agent tool arguments_digest arguments_form "
            "result_digest error arguments_match:BOOLEAN call_seq:BIGINT "
            "executed_at:TIMESTAMP executed_at_ns:BIGINT"), "executed_at_ns", "seq"),
        View("session_items", _cols(
            f"seq:BIGINT entry_hash {_IDENT} session_id op item_type item_digest "
            "output_digest arguments_digest call_seq:BIGINT recorded_at:TIMESTAMP "
            "recorded_at_ns:BIGINT"), "recorded_at_ns", "seq"),
        View("guardrails", _cols(
            f"seq:BIGINT entry_hash {_IDENT} agent tool guardrail message_digest "
            "call_seq:BIGINT blocked_at:TIMESTAMP blocked_at_ns:BIGINT"), "blocked_at_ns", "seq"),
        View("violations", _cols(
            f"finding_no:BIGINT seq:BIGINT rule {_IDENT} detail call_seq:BIGINT "
            "time:TIMESTAMP time_ns:BIGINT"), "time_ns", "finding_no"),
        View("call_chains", _cols(
            f"call_seq:BIGINT {_IDENT} agent tool arguments_digest needs_approval:BOOLEAN "
            "decision sticky:BOOLEAN approver called_at:TIMESTAMP called_at_ns:BIGINT "
            "decided_at:TIMESTAMP decided_at_ns:BIGINT executed_at:TIMESTAMP "
            "executed_at_ns:BIGINT executions:BIGINT persisted:BIGINT "
            "persisted_at:TIMESTAMP persisted_at_ns:BIGINT status violations:VARCHAR[]"),
            "called_at_ns", "call_seq"),
    )
}
"""Every table of the index, in export order (columns documented in docs/QUERIES.md)."""

def _d(digest: bytes | None) -> str | None:
    return None if digest is None else "sha256:" + digest.hex()


def _table(view: View, rows: list[tuple[Any, ...]]) -> pa.Table:
    """Rows (tuples in column order; a TIMESTAMP column holds its ns) -> Arrow table."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in view.columns]
    arrays = []
    for (_, kind), values in zip(view.columns, columns, strict=True):
        if kind == "TIMESTAMP":
            arrays.append(_timestamps(pa.array(values, pa.int64())))
        else:
            arrays.append(pa.array(values, _ARROW[kind]))
    return pa.Table.from_arrays(arrays, schema=view.schema)


def _timestamps(ns: pa.Array) -> pa.Array:
    """ns since the epoch (int64) -> TIMESTAMP (UTC, microseconds)."""
    return pc.divide(ns, 1000).cast(pa.timestamp("us"))


# -- entry rows: Arrow tables of raw bodies, made into view rows by SQL ----------------

_BODY_TYPES: dict[str, pa.DataType] = {
    **dict.fromkeys((
        "run_id", "call_id", "agent", "tool", "args_form", "response_id", "decision",
        "approver", "reason", "error", "session_id", "op", "item_type", "guardrail",
    ), pa.string()),
    "scope": pa.list_(pa.string()),
    **dict.fromkeys(("needs_approval", "always"), pa.bool_()),
    **dict.fromkeys((
        "args_digest", "args_payload", "message_digest", "result_digest", "item_digest",
        "output_digest",
    ), pa.binary()),
}
"""Arrow types of the body fields the views read (as :data:`entries.BODY_FIELDS` checks them)."""

_BODIES: dict[str, pa.StructType] = {
    kind: pa.struct([(name, _BODY_TYPES[name]) for name in fields if name in _BODY_TYPES])
    for kind, fields in entries.BODY_FIELDS.items()
}


def _raw_schema(kind: str) -> pa.Schema:
    return pa.schema([
        ("seq", pa.int64()), ("entry_hash", pa.binary()), ("prev", pa.binary()),
        ("time_ns", pa.int64()), ("time", pa.timestamp("us")), ("call_seq", pa.int64()),
        ("refs", pa.list_(pa.string())), ("body", _BODIES[kind]),
    ])


_RAW_SCHEMAS = {kind: _raw_schema(kind) for kind in _BODIES}
"""Per entry kind, the chunk table :meth:`Deriver.take` hands over (registered as
``raw_<kind>``): the entry's seq, hash, prev, time, the ``seq`` of the call the rules
attribute it to, its refs, and its body."""


def _hex(expr: str) -> str:
    return f"'sha256:' || lower(hex({expr}))"


def _field(kind: str, name: str, sql_type: str) -> str:
    """``r.body.<name>``, or a typed NULL when entries of ``kind`` have no such field."""
    return f"r.body.{name}" if name in _BODIES[kind].names else f"NULL::{sql_type}"


def _entries_select(kind: str) -> str:
    return (
        f"SELECT r.seq, r.entry_hash, r.prev, '{kind}' AS kind, r.time, r.time_ns, "
        f"{_field(kind, 'run_id', 'VARCHAR')} AS run_id, "
        f"{_field(kind, 'scope', 'VARCHAR[]')} AS scope, "
        f"{_field(kind, 'call_id', 'VARCHAR')} AS call_id, r.refs FROM raw_{kind} r"
    )


_IDENT_SQL = "r.seq, {h} AS entry_hash, r.body.run_id, r.body.scope, r.body.call_id".format(
    h=_hex("r.entry_hash"))
_WHO_SQL = ("coalesce(nullif(r.body.agent, ''), c.agent) AS agent, "
            "coalesce(nullif(r.body.tool, ''), c.tool) AS tool")
_CALL = "LEFT JOIN calls c ON c.seq = r.call_seq"
_SHOWN = f"coalesce({_hex('r.body.args_digest')}, c.arguments_digest)"
_VIEW_SQL: dict[str, tuple[str, str]] = {
    "calls": ("call", f"""
        SELECT {_IDENT_SQL}, r.body.agent, r.body.tool,
            {_hex('r.body.args_digest')} AS arguments_digest, r.body.args_form AS arguments_form,
            {_hex('r.body.args_payload')} AS arguments_payload, r.body.needs_approval,
            r.body.response_id, r.time AS called_at, r.time_ns AS called_at_ns
        FROM raw_call r"""),
    "approvals": ("decision", f"""
        SELECT {_IDENT_SQL}, {_WHO_SQL}, r.body.decision, r.body.always, r.body.approver,
            r.body.reason, {_hex('r.body.message_digest')} AS message_digest,
            {_SHOWN} AS arguments_digest, c.arguments_digest AS call_arguments_digest,
            CASE WHEN c.seq IS NULL THEN NULL ELSE {_SHOWN} = c.arguments_digest END AS bound,
            r.call_seq, r.time AS decided_at, r.time_ns AS decided_at_ns
        FROM raw_decision r {_CALL}"""),
    "executions": ("execution", f"""
        SELECT {_IDENT_SQL}, {_WHO_SQL}, {_hex('r.body.args_digest')} AS arguments_digest,
            r.body.args_form AS arguments_form, {_hex('r.body.result_digest')} AS result_digest,
            r.body.error,
            CASE WHEN c.seq IS NULL THEN NULL
                 ELSE {_hex('r.body.args_digest')} = c.arguments_digest END AS arguments_match,
            r.call_seq, r.time AS executed_at, r.time_ns AS executed_at_ns
        FROM raw_execution r {_CALL}"""),
    "session_items": ("session_item", f"""
        SELECT {_IDENT_SQL}, r.body.session_id, r.body.op, r.body.item_type,
            {_hex('r.body.item_digest')} AS item_digest,
            {_hex('r.body.output_digest')} AS output_digest,
            {_hex('r.body.args_digest')} AS arguments_digest, r.call_seq,
            r.time AS recorded_at, r.time_ns AS recorded_at_ns
        FROM raw_session_item r"""),
    "guardrails": ("guardrail", f"""
        SELECT {_IDENT_SQL}, {_WHO_SQL}, r.body.guardrail,
            {_hex('r.body.message_digest')} AS message_digest, r.call_seq,
            r.time AS blocked_at, r.time_ns AS blocked_at_ns
        FROM raw_guardrail r {_CALL}"""),
}
"""View -> (the entry kind its rows come from, the SELECT that makes them). ``c`` is the
row of the call the rules attribute the entry to (``call_seq``): agent and tool fall back
to it, and ``bound`` / ``arguments_match`` compare with its arguments digest."""


@dataclass(frozen=True)
class Chunk:
    """Entries fed since the last :meth:`Deriver.take`, ready for a bulk insert.

    Attributes:
        raw: entry kind -> its entries (schema :data:`_RAW_SCHEMAS`).
        violations: new ``violations`` rows.
    """

    raw: dict[str, pa.Table]
    violations: pa.Table

    def insert(self, con: duckdb.DuckDBPyConnection) -> None:
        """Insert the rows into every table of ``con`` (``calls`` first: the other views
        join it). Raises duckdb.Error."""
        for kind, table in self.raw.items():
            con.register(f"raw_{kind}", table)
        try:
            for name in VIEWS:
                if name == "entries" and self.raw:
                    union = " UNION ALL ".join(_entries_select(kind) for kind in self.raw)
                    select = (
                        f"SELECT seq, {_hex('entry_hash')} AS entry_hash, {_hex('prev')} AS "
                        f"prev, kind, time, time_ns, run_id, scope, call_id, refs FROM ({union})"
                    )
                elif name in _VIEW_SQL and _VIEW_SQL[name][0] in self.raw:
                    select = _VIEW_SQL[name][1]
                else:
                    continue
                columns = ", ".join(VIEWS[name].names)
                con.execute(f"INSERT INTO {name} SELECT {columns} FROM ({select}) ORDER BY seq")
        finally:
            for kind in self.raw:
                con.unregister(f"raw_{kind}")
        _insert(con, "violations", self.violations)


class Deriver:
    """Log records in, index rows out (pure: no I/O).

    Feed every :class:`~ledger.store.Record` of the log in order with :meth:`feed`; take
    the entries fed since the last take with :meth:`take` (a :class:`Chunk`) and the rows
    of the calls whose chain changed with :meth:`take_chains`. The object pickles (its
    state between two updates) once both have been taken.
    """

    def __init__(self) -> None:
        self.engine = rules.RuleEngine()
        self.tree = merkle.CompactRange()
        self.size = 0
        """Entries fed (the tree size)."""
        self.offset = 0
        """Byte offset just past the last record fed."""
        self.last_offset = 0
        """Byte offset of the last record fed."""
        self.last_hash = ZERO_HASH
        """Entry hash of the last record fed (zeros when none)."""
        self._fed: dict[str, tuple[list[tuple[Any, ...]], list[dict[str, Any]]]] = {}
        self._violations: list[tuple[Any, ...]] = []
        self._touched: set[CallKey] = set()
        self._findings = 0
        self._persisted_at: dict[CallKey, int] = {}
        self._executed_at: dict[CallKey, int] = {}

    def feed(self, record: Record) -> Entry:
        """Decode one record at index :attr:`size`, derive its rows, return its entry.

        Raises:
            EvidenceError: if the record fails its CRC-32, does not decode canonically,
                or its ``seq`` or ``prev`` do not continue the log (run ``verify``).
        """
        seq = self.size
        if record.index != seq:
            raise EvidenceError(
                f"log damaged at seq {seq}: record {record.index} read, {seq} expected"
            )
        if not record.crc_ok:
            raise EvidenceError(f"log damaged at seq {seq}: record fails its CRC-32 (run verify)")
        try:
            entry = decode_entry(record.data)
        except EncodingError as exc:
            raise EvidenceError(f"log damaged at seq {seq}: {exc} (run verify)") from exc
        if entry.seq != seq or entry.prev != self.last_hash:
            raise EvidenceError(
                f"log damaged at seq {seq}: seq or prev does not continue the log (run verify)"
            )
        if entry.time > MAX_TIME_NS:
            raise EvidenceError(
                f"cannot index seq {seq}: its time {entry.time} ns is past the index's range "
                f"({MAX_TIME_NS} ns, in the year 2262); verify reads it"
            )
        hash_ = entry_hash(record.data)
        self.tree.append(merkle.leaf_hash(record.data))
        self.engine.feed(entry)
        self._derive(entry, hash_)
        self.size, self.offset, self.last_offset = seq + 1, record.end, record.offset
        self.last_hash = hash_
        return entry

    def _derive(self, entry: Entry, hash_: bytes) -> None:
        b, seq, kind = entry.body, entry.seq, entry.kind
        call = None
        call_id = b.get("call_id")
        if type(call_id) is str and "scope" in b:  # a call identity (fields typed by kind)
            key = (b["run_id"], tuple(b["scope"]), call_id)
            call = self.engine.find_call(*key)
        fed = self._fed.get(kind)
        if fed is None:
            fed = self._fed[kind] = ([], [])
        refs = ["sha256:" + r.hex() for r in entry.refs] if entry.refs else []
        fed[0].append((seq, hash_, entry.prev, entry.time, call.seq if call else None, refs))
        fed[1].append(b)
        if call is not None:
            self._touched.add(call.key)
            if kind == "session_item" and call.persisted and call.persisted[0] == seq:
                self._persisted_at[call.key] = entry.time
            elif kind == "execution" and call.executions and call.executions[0] == seq:
                self._executed_at[call.key] = entry.time
        if len(self.engine.findings) > self._findings:
            self._take_findings(seq, entry.time)

    def _take_findings(self, seq: int, time: int) -> None:
        new = self.engine.findings[self._findings:]
        for number, finding in enumerate(new, start=self._findings):
            state = (
                self.engine.find_call(finding.run_id, finding.scope, finding.call_id)
                if finding.run_id is not None and finding.call_id is not None else None
            )
            if state is not None:
                self._touched.add(state.key)
            at = time if finding.seq == seq else None
            self._violations.append((
                number, finding.seq, finding.rule, finding.run_id, list(finding.scope),
                finding.call_id, finding.detail, state.seq if state else None, at, at,
            ))
        self._findings += len(new)

    def take(self) -> Chunk:
        """The entries fed since the last call, as a :class:`Chunk`."""
        raw = {}
        for kind, (rows, bodies) in self._fed.items():
            seqs, hashes, prevs, times, call_seqs, refs = zip(*rows, strict=True)
            ns = pa.array(times, pa.int64())
            raw[kind] = pa.Table.from_arrays([
                pa.array(seqs, pa.int64()), pa.array(hashes, pa.binary()),
                pa.array(prevs, pa.binary()), ns, _timestamps(ns),
                pa.array(call_seqs, pa.int64()), pa.array(refs, pa.list_(pa.string())),
                pa.array(bodies, _BODIES[kind]),
            ], schema=_RAW_SCHEMAS[kind])
        chunk = Chunk(raw, _table(VIEWS["violations"], self._violations))
        self._fed, self._violations = {}, []
        return chunk

    def take_chains(self) -> pa.Table:
        """``call_chains`` rows of every call whose chain changed since the last call, in
        call order (replace the rows with the same ``call_seq``)."""
        states = sorted((self.engine.calls[k] for k in self._touched), key=lambda c: c.seq)
        rows = []
        chain_rows = chains.call_chains(states, self._executed_at)
        for state, row in zip(states, chain_rows, strict=True):
            persisted = self._persisted_at.get(state.key)
            rows.append((
                state.seq, row.run_id, list(row.scope), row.call_id, row.agent, row.tool,
                _d(row.args_digest), row.needs_approval, row.decision, row.sticky, row.approver,
                state.time, state.time, row.decided_at, row.decided_at, row.executed_at,
                row.executed_at, len(state.executions), row.persisted, persisted, persisted,
                row.status, list(row.violations),
            ))
        self._touched = set()
        return _table(VIEWS["call_chains"], rows)

    def report(self) -> Report:
        """The verifier's :class:`~ledger.verify.Report` over the records fed (no payload
        checks: records that fail integrity were refused by :meth:`feed`)."""
        return Report(
            tree_size=self.size, root_hash=self.tree.root(),
            violations=sorted(self.engine.findings, key=lambda f: (f.seq is None, f.seq)),
            notices=list(self.engine.notices), calls=self.engine.calls,
        )


def derive(
    records: Iterable[Record | Damage | TornTail], size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[Report, dict[str, pa.Table]]:
    """Derive every table in memory from a log's scan items (no index file): the same
    rows an index holds, through an in-memory DuckDB database.

    Args:
        records: :meth:`Ledger.scan` items, in order.
        size: stop after this many entries (the tree size of an export); None reads all.
        progress: called with the entries done every :data:`CHUNK` entries.

    Returns:
        The verifier's report at that size and every view's rows (view name -> table).

    Raises:
        EvidenceError: if the log is damaged before ``size`` or holds fewer entries.
    """
    deriver = Deriver()
    with _gc_paused(), contextlib.closing(duckdb.connect()) as con:
        for statement in [*_SCHEMA, "BEGIN TRANSACTION"]:
            con.execute(statement)
        _load(con, deriver, iter(records), size, lambda: progress and progress(deriver.size))
        if size is not None and deriver.size < size:
            raise EvidenceError(f"the ledger holds {deriver.size} entries, fewer than {size}")
        _insert(con, "call_chains", deriver.take_chains())
        tables = {
            name: con.sql(f"SELECT * FROM {name} ORDER BY {view.order}").to_arrow_table()
            .cast(view.schema)
            for name, view in VIEWS.items()
        }
    return deriver.report(), tables


def _load(
    con: duckdb.DuckDBPyConnection, deriver: Deriver,
    items: Iterator[Record | Damage | TornTail], size: int | None,
    chunk_done: Callable[[], object],
) -> None:
    """Feed ``items`` (up to ``size`` entries) to ``deriver`` and insert its rows into
    ``con`` one :data:`CHUNK` at a time, on a thread of its own (:class:`_Inserter`).

    Raises:
        EvidenceError: at a damaged record (see :meth:`Deriver.feed`).
    """
    with _Inserter(con) as inserter:
        for item in items:
            if size is not None and deriver.size >= size:
                break
            if isinstance(item, Damage):
                raise EvidenceError(
                    f"log damaged at seq {item.index}: {item.reason} (run verify)"
                )
            if isinstance(item, TornTail):
                break
            deriver.feed(item)
            if deriver.size % CHUNK == 0:
                inserter.put(deriver.take())
                chunk_done()
        inserter.put(deriver.take())


# -- the index file --------------------------------------------------------------------

_SAFE_GLOBALS = {
    ("ledger.index", "Deriver"), ("collections", "defaultdict"), ("collections", "Counter"),
    ("collections", "OrderedDict"), ("collections", "deque"), ("builtins", "set"),
    ("builtins", "frozenset"), ("builtins", "list"), ("builtins", "dict"),
    ("builtins", "tuple"),
}
_PURE_MODULES = frozenset({
    "ledger.rules", "ledger.lineage", "ledger.findings", "ledger.merkle", "ledger.entries",
})
"""Modules without I/O whose classes the rule engine's state is made of."""


class _StateUnpickler(pickle.Unpickler):
    """Unpickles the deriver's state: builtin containers and classes (never functions) of
    the pure modules the rules are built from. The state file is not trusted to run
    code: anything else fails, and the index is rebuilt."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module in _PURE_MODULES and name.isidentifier():
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in index state")


def _state_path(target: Path) -> Path:
    return target.with_name(target.name + ".state")


def _refuse_non_regular(target: Path) -> None:
    """Refuse an index, WAL or state path that holds a symlink, FIFO, socket, device or
    directory: DuckDB and the state reader would follow it or block on it for ever.

    Raises:
        UsageError: naming the path and what it is.
    """
    for path in (target, target.with_name(target.name + ".wal"), _state_path(target)):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(f"cannot use index {path}: {problem(exc)}") from exc
        if not stat.S_ISREG(mode):
            raise UsageError(
                f"refusing to use {path}: it is not a regular file (remove it; the index is "
                "derived from the log and rebuilt)"
            )


def _load_state(target: Path, size: int, last_hash: str) -> Deriver | None:
    """The deriver saved beside the index, if it stands at ``size`` / ``last_hash``."""
    try:
        with os.fdopen(open_regular(_state_path(target)), "rb") as fh:
            state = _StateUnpickler(fh).load()
    except Exception:  # missing or damaged: the index is a cache, rebuild it
        return None
    if not _well_formed(state) or state.size != size or _d(state.last_hash) != last_hash:
        return None
    return state


def _well_formed(state: object) -> bool:
    """True when ``state`` is a :class:`Deriver` whose own fields have the types the
    update reads (the unpickler admits only our classes, not their shapes)."""
    fields = getattr(state, "__dict__", {})
    types = {
        "engine": rules.RuleEngine, "tree": merkle.CompactRange, "size": int, "offset": int,
        "last_offset": int, "last_hash": bytes, "_fed": dict, "_violations": list,
        "_touched": set, "_findings": int, "_persisted_at": dict, "_executed_at": dict,
    }
    return (
        isinstance(state, Deriver) and fields.keys() == types.keys()
        and all(type(fields[name]) is kind for name, kind in types.items())
        and len(fields["last_hash"]) == 32
    )


def _save_state(target: Path, deriver: Deriver) -> None:
    path = _state_path(target)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            pickle.dump(deriver, fh, protocol=5)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror} (pass --index)") from exc


@functools.cache
def _fingerprint() -> str:
    """Digest of the code the index rows and the saved state depend on: other code, other
    index (rebuilt)."""
    digest = hashlib.sha256(f"index v{INDEX_VERSION}".encode())
    for name in sorted(_PURE_MODULES | {"ledger.encoding", "ledger.chains", __name__}):
        module = sys.modules.get(name)
        digest.update(name.encode() + b"\0")
        if module is not None and module.__file__:
            digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class IndexInfo:
    """Where an index stands.

    Attributes:
        path: the DuckDB file.
        tree_size: entries indexed.
        root_hash: RFC 9162 root hash over them (32 bytes).
        added: entries this update read (0 when it was already current).
        rebuilt: True when this update started from an empty index.
    """

    path: Path
    tree_size: int
    root_hash: bytes
    added: int = 0
    rebuilt: bool = False

    @property
    def root_b64(self) -> str:
        """The root hash in standard base64 (as ``verify --json`` prints it)."""
        return base64.b64encode(self.root_hash).decode("ascii")


def index_path(ledger: Ledger, path: str | os.PathLike[str] | None = None) -> Path:
    """The index file: ``path``, else ``<ledger>/index.duckdb``."""
    return Path(path) if path else ledger.directory / INDEX_NAME


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while bulk-deriving: millions of small acyclic containers
    would otherwise trigger collections that rescan the growing rule state."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _flock(path: Path, exclusive: bool) -> Iterator[None]:
    lock = path.with_name(path.name + ".lock")
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_lock(lock, exclusive=exclusive))
        except StorageError as exc:
            raise UsageError(f"{exc} (pass --index)") from exc
        yield


_SCHEMA = [
    f"CREATE TABLE {view.name} ({', '.join(f'{n} {t}' for n, t in view.columns)})"
    for view in VIEWS.values()
] + [
    "CREATE TABLE ledger_index (index_version INTEGER, code_fingerprint VARCHAR, "
    "tree_size BIGINT, root_hash VARCHAR, last_entry_hash VARCHAR, "
    "last_record_offset BIGINT, log_offset BIGINT)",
]


def _is_duckdb_file(path: Path) -> bool:
    """True when ``path`` holds a DuckDB database (its header carries ``DUCK`` at byte 8)."""
    with open(path, "rb") as fh:
        return fh.read(12)[8:12] == b"DUCK"


def _connect_fresh(path: Path, owned: bool) -> duckdb.DuckDBPyConnection:
    """A new, empty index at ``path``. What is there is replaced when it is a DuckDB file,
    or ``owned`` (the default ``<ledger>/index.duckdb``: a damaged cache of ours);
    another file named by ``--index`` is refused, never clobbered."""
    try:
        if path.exists() and not owned and not (path.is_file() and _is_duckdb_file(path)):
            raise UsageError(
                f"refusing to replace {path}: it is not a DuckDB index (delete it if it is "
                "a damaged index, or name another file with --index)"
            )
        for stale in (path, path.with_name(path.name + ".wal"), _state_path(path)):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        con = duckdb.connect(str(path))
    except (OSError, duckdb.Error) as exc:
        raise UsageError(f"cannot create index {path}: {_one_line(exc)} (pass --index)") from exc
    for statement in _SCHEMA:
        con.execute(statement)
    return con


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[Any, ...] | None:
    """The single row of ``sql`` (fetched to the end, as DuckDB wants), or None."""
    rows = con.execute(sql).fetchall()
    return tuple(rows[0]) if len(rows) == 1 else None


def _meta(con: duckdb.DuckDBPyConnection) -> tuple[Any, ...] | None:
    try:
        rows = con.execute(
            "SELECT index_version, code_fingerprint, tree_size, root_hash, last_entry_hash, "
            "last_record_offset, log_offset FROM ledger_index"
        ).fetchall()
    except duckdb.Error:
        return None
    row = rows[0] if len(rows) == 1 else None
    if row is None or row[0] != INDEX_VERSION or row[1] != _fingerprint():
        return None
    return tuple(row)


def _same_log(ledger: Ledger, size: int, last_hash: str, last_offset: int) -> bool:
    """True when the log still holds the last indexed record where the index left it."""
    if size == 0:
        return True
    first = next(iter(ledger.store.scan(last_offset, size - 1)), None)
    return isinstance(first, Record) and "sha256:" + entry_hash(first.data).hex() == last_hash


def _complete(con: duckdb.DuckDBPyConnection | None, size: int) -> bool:
    """True when the index holds exactly ``size`` entries: an update that stopped midway
    (killed) has committed chunks past the size its metadata records."""
    return con is not None and _one(con, "SELECT count(*) FROM entries") == (size,)


def _insert(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    if table.num_rows:
        con.register("_rows", table)
        con.execute(f"INSERT INTO {name} SELECT * FROM _rows")
        con.unregister("_rows")


def update_index(
    ledger: Ledger,
    path: str | os.PathLike[str] | None = None,
    *,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> IndexInfo:
    """Bring the index of ``ledger`` up to date with its log, by tree size.

    Reads only the records past the indexed tree size (complete groups: a writer
    appending meanwhile is seen up to its last acknowledged group). Starts over when the
    index is missing, unreadable, built by other code, or the log no longer holds the
    last record indexed (rewritten or truncated). One transaction per update.

    Args:
        ledger: the ledger to index.
        path: the index file (default ``<ledger>/index.duckdb``).
        rebuild: start over from an empty index.
        progress: see :data:`Progress`.

    Raises:
        UsageError: if the ledger has no log, or the index cannot be written.
        EvidenceError: if a record fails integrity (see :class:`Deriver`).
    """
    ledger.require_exists()
    target = index_path(ledger, path)
    _refuse_non_regular(target)
    with _flock(target, exclusive=True), _gc_paused():
        con: duckdb.DuckDBPyConnection | None = None
        try:
            with contextlib.suppress(duckdb.Error):
                con = duckdb.connect(str(target))
            meta = None if (con is None or rebuild) else _meta(con)
            if meta is not None and not (
                _same_log(ledger, meta[2], meta[4], meta[5]) and _complete(con, meta[2])
            ):
                meta = None
            deriver: Deriver | None = None
            items: Iterator[Record | Damage | TornTail] = iter(())
            if meta is not None:
                assert con is not None
                items = ledger.store.scan(meta[6], meta[2])
                first = next(items, None)
                if first is None or isinstance(first, TornTail):
                    return IndexInfo(target, meta[2], base64.b64decode(meta[3]))
                items = itertools.chain([first], items)
                deriver = _load_state(target, meta[2], meta[4])
                if deriver is None:
                    meta = None
            if deriver is None:
                if con is not None:
                    con.close()
                con = _connect_fresh(target, owned=path is None)
                deriver, items = Deriver(), ledger.store.scan()
            assert con is not None
            return _catch_up(con, ledger, deriver, items, meta is None, progress, target)
        finally:
            if con is not None:
                con.close()


class _Inserter:
    """Bulk inserts run on a thread of their own, so DuckDB (which releases the GIL)
    stores and compresses one chunk while the next one is derived.

    Use as a context manager around the loop that calls :meth:`put`, inside a
    transaction: each chunk is inserted and committed, and a new transaction begun (so
    memory holds one chunk, not the whole update). The connection must not be used by
    anyone else until the block exits. On exit the thread has stopped: it has inserted
    everything put, or stopped at its first error, re-raised here (a DuckDB error as
    :class:`UsageError`). When the block raises (Ctrl-C included), the chunk being
    inserted is interrupted and the rest dropped; a Ctrl-C while waiting for the thread
    is re-raised once it has stopped, so the connection is never closed under it.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self._queue: queue.Queue[Chunk | None] = queue.Queue(maxsize=2)
        self._error: Exception | None = None
        self._abort = False
        self._done = threading.Event()  # set as the thread ends (Python 3.11's Thread.join,
        # interrupted by Ctrl-C, marks a running thread stopped: is_alive() cannot be trusted)
        self._thread = threading.Thread(target=self._run, name="index-insert", daemon=True)

    def __enter__(self) -> _Inserter:
        self._thread.start()
        return self

    def put(self, chunk: Chunk) -> None:
        """Queue one chunk; blocks while two chunks wait."""
        self._queue.put(chunk)

    def _run(self) -> None:
        try:
            while (chunk := self._queue.get()) is not None:
                if self._error is None and not self._abort:
                    try:
                        chunk.insert(self._con)
                        self._con.execute("COMMIT")
                        self._con.execute("BEGIN TRANSACTION")
                    except Exception as exc:  # re-raised in the caller's thread on exit
                        self._error = exc
        finally:
            self._done.set()

    def _stop_early(self) -> None:
        self._abort = True
        with contextlib.suppress(Exception):
            self._con.interrupt()

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        if exc_type is not None:
            self._stop_early()
        interrupted: KeyboardInterrupt | None = None
        sent = False
        while True:  # the sentinel, then the thread's end, whatever Ctrl-C comes meanwhile
            try:
                if not sent and not self._queue.full():
                    self._queue.put_nowait(None)
                    sent = True
                if self._done.wait(timeout=0.1):
                    break
            except KeyboardInterrupt as exc:
                interrupted = exc
                self._stop_early()
        if exc_type is not None:
            return
        if interrupted is not None:
            raise interrupted
        error, self._error = self._error, None
        if isinstance(error, duckdb.Error):
            raise UsageError(f"cannot write the index: {_one_line(error)}") from error
        if error is not None:
            raise error


def _catch_up(
    con: duckdb.DuckDBPyConnection, ledger: Ledger, deriver: Deriver,
    items: Iterator[Record | Damage | TornTail], fresh: bool, progress: Progress | None,
    target: Path,
) -> IndexInfo:
    start = deriver.size
    total = ledger.store.path.stat().st_size
    con.execute("BEGIN TRANSACTION")
    _load(con, deriver, items, None,
          lambda: progress and progress(deriver.size - start, deriver.offset, total))
    changed = deriver.take_chains()
    if not fresh and changed.num_rows:
        con.register("_changed", changed.select(["call_seq"]))
        con.execute("DELETE FROM call_chains WHERE call_seq IN (SELECT call_seq FROM _changed)")
        con.unregister("_changed")
    _insert(con, "call_chains", changed)
    root = deriver.tree.root()
    con.execute("DELETE FROM ledger_index")
    con.execute(
        "INSERT INTO ledger_index VALUES (?, ?, ?, ?, ?, ?, ?)",
        [INDEX_VERSION, _fingerprint(), deriver.size, base64.b64encode(root).decode("ascii"),
         _d(deriver.last_hash), deriver.last_offset, deriver.offset],
    )
    _save_state(target, deriver)
    con.execute("COMMIT")
    if progress:
        progress(deriver.size - start, deriver.offset, total)
    return IndexInfo(target, deriver.size, root, deriver.size - start, fresh)


# -- reading -----------------------------------------------------------------------------

_READ_ONLY = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def _one_line(exc: Exception) -> str:
    lines = []
    for line in str(exc).splitlines():
        if line.strip().startswith("LINE "):
            break
        if line.strip():
            lines.append(line.strip())
    return " ".join(lines) or type(exc).__name__


def check_read_only(sql: str) -> None:
    """Accept exactly one ``SELECT`` (or ``EXPLAIN``) statement, by DuckDB's own parser.

    Raises:
        UsageError: if ``sql`` does not parse, holds more than one statement, or any
            statement that is not a read (INSERT, COPY, ATTACH, SET, PRAGMA, CALL, ...).
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {_one_line(exc)}") from exc
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
        UsageError: if the index cannot be opened.
    """
    _refuse_non_regular(path)
    with _flock(path, exclusive=False):
        try:
            con = _open_read_only(path)
        except duckdb.Error as exc:
            raise UsageError(f"cannot open index {path}: {_one_line(exc)}") from exc
        try:
            yield con
        finally:
            con.close()


def _is_current(con: duckdb.DuckDBPyConnection, ledger: Ledger) -> bool:
    """True when the index holds every complete record of the log (cheap: no scan)."""
    meta = _meta(con)
    if meta is None:
        return False
    try:
        size = ledger.store.path.stat().st_size
    except OSError:
        return False
    return (
        size == meta[6] and _same_log(ledger, meta[2], meta[4], meta[5])
        and _complete(con, meta[2])
    )


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
    sql: str,
    path: str | os.PathLike[str] | None = None,
    *,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> QueryResult:
    """Run one read-only SQL statement over the index, brought up to date first. A
    default index that turns out damaged while read (:class:`DamagedIndexError`) is
    rebuilt and the statement run again.

    Raises:
        UsageError: if the statement is not a single read, or fails (one-line message);
            :class:`DamagedIndexError` for a damaged index named by ``path``.
        EvidenceError: if the log fails integrity while indexing.
    """
    check_read_only(sql)
    ledger.require_exists()
    return rebuilt_if_damaged(
        path, rebuild, lambda again: _query(ledger, sql, path, again, progress))


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


def _query(
    ledger: Ledger, sql: str, path: str | os.PathLike[str] | None, rebuild: bool,
    progress: Progress | None,
) -> QueryResult:
    target = index_path(ledger, path)
    if not rebuild and target.is_file():
        with _flock(target, exclusive=False):
            try:
                con = _open_read_only(target)
            except duckdb.Error:
                con = None
            if con is not None:
                try:
                    if _is_current(con, ledger):
                        return _execute(con, sql, target)
                finally:
                    con.close()
    info = update_index(ledger, path, rebuild=rebuild, progress=progress)
    with connect_read_only(info.path) as con:
        return _execute(con, sql, info.path)


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
            f"{where} is damaged ({_one_line(exc)}); run again with --rebuild"
        ) from exc


def _execute(con: duckdb.DuckDBPyConnection, sql: str, path: Path) -> QueryResult:
    try:
        meta = _one(con, "SELECT tree_size, root_hash FROM ledger_index")
        cursor = con.execute(sql)
        rows = cursor.fetchall()
    except duckdb.Error as exc:
        raise_if_damaged(exc, path)
        raise UsageError(f"SQL error: {_one_line(exc)}") from exc
    assert meta is not None
    description = cursor.description or []
    return QueryResult(
        [d[0] for d in description], [str(d[1]) for d in description], rows,
        int(meta[0]), str(meta[1]),
    )
