"""A DuckDB index of a ledger, for audit queries in SQL. Never authoritative.

The index is derived from the log and only from it: deleting it and running again
rebuilds the same rows. It lives in the user's cache, outside the ledger
(:mod:`evidence_ledger.index.location`), with ``index.duckdb.lock`` (serialises processes)
beside it (and ``index.duckdb.build`` while a build runs, :func:`side_path`), and is
brought up to date by tree size before each query: only records past the indexed tree size
are read.

Pure core, in two stages. Stage one, :func:`evidence_ledger.index.check.check_batch`, takes each
record on its own: its CRC-32, :func:`evidence_ledger.format.entries.decode_entry`, its entry and
leaf hashes, and its row of the chunk tables. Stage two, :class:`Deriver`, runs the checked records
in order: ``seq`` and ``prev`` links, the RFC 9162 tree (:mod:`evidence_ledger.tlog.merkle`), and
the verifier's own :class:`evidence_ledger.verify.rules.RuleEngine`; ``call_chains`` rows are
:func:`evidence_ledger.verify.chains.call_chains` of the engine's call states and ``violations``
rows are its findings, so the index reads the same facts as ``verify``. The other views are made in
bulk: each chunk's tables, with the ``seq`` of the call the rules attribute each entry to, go
through one ``INSERT ... SELECT`` per view (:class:`evidence_ledger.index.db.Chunk`). A record that
fails its CRC-32, canonical decoding, ``seq`` or ``prev`` link stops the index
(:class:`EvidenceError`); ``verify`` names every break, checks payloads and refs, and stays the
verdict.

I/O around it: :func:`update_index` (each chunk of :data:`CHUNK` entries read from its byte
range of the log and checked ahead in a worker process
(:class:`evidence_ledger.index.worker.Checker`), derived here, and inserted on a thread of its
own while the next is derived, in one transaction committed once the metadata row and the
deriver's state (:mod:`evidence_ledger.index.state`) are written, or for a fresh build or
a long catch-up in a side file renamed over the index: either way an update killed midway
leaves the index as it was before it),
:func:`derive` (the same rows in an in-memory database), :func:`is_current`. Queries:
:mod:`evidence_ledger.index.query`. Tables and columns: :data:`evidence_ledger.index.db.VIEWS`
and docs/QUERIES.md; ``log_blocks`` (where every :data:`BLOCK`-th record starts in the log)
lets :mod:`evidence_ledger.index.trace` read a call's records without scanning the log.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import functools
import hashlib
import os
import queue
import shutil
import stat
import sys
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from evidence_ledger.format.entries import ZERO_HASH, Entry, decode_checked, entry_hash
from evidence_ledger.format.errors import (
    EvidenceError,
    LedgerError,
    LockTimeout,
    StorageError,
    UsageError,
)
from evidence_ledger.format.framing import Damage, Record, TornTail
from evidence_ledger.index.check import BLOCK, CheckedBatch
from evidence_ledger.index.db import (
    BLOCKS_SCHEMA,
    CALL_SEQ,
    SCHEMA,
    VIEWS,
    Chunk,
    digest_text,
    one_line,
    rows_table,
)
from evidence_ledger.index.location import INDEX_NAME, default_index_path
from evidence_ledger.index.state import (
    DeriverPlace,
    StoredStateDamaged,
    load_state,
    save_state,
    state_schema,
)
from evidence_ledger.index.worker import Checked, Checker, check_records, read_log_chunk
from evidence_ledger.storage.bulk import gc_paused
from evidence_ledger.storage.fsutil import file_lock, problem
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog import merkle
from evidence_ledger.verify import chains, rules
from evidence_ledger.verify.records import Report
from evidence_ledger.verify.spill import Spill

__all__ = [
    "BLOCK",
    "CHUNK",
    "Deriver",
    "IndexInfo",
    "Progress",
    "checked_index_path",
    "derive",
    "index_lock",
    "index_path",
    "is_current",
    "refuse_non_regular",
    "update_index",
]

INDEX_VERSION = 1
CHUNK = 10_000
"""Records decoded between two bulk inserts (each chunk in flight costs the worker and this
process some 2.5 KiB per record: the records and their rows, pickled)."""
SIDE_BYTES = 32 << 20
"""Bytes of log (some 100,000 entries) past which a catch-up is built in a side file
(:func:`side_path`) rather than in one transaction on the index."""
MEMORY_LIMIT = "64MB"
"""DuckDB's buffer pool while updating (``SET memory_limit``): blocks past it are written
out or spilled to ``<index>.tmp``, rather than cached up to DuckDB's default of 80% of RAM."""
AHEAD = 2
"""Batches of :data:`CHUNK` records given to the checker before the one being derived."""
Progress = Callable[[int, int, int], None]
"""``progress(entries_done, bytes_done, bytes_total)``, called after each chunk: the
entries and bytes of the log this update has read, of the bytes it will read."""

CallKey = tuple[str, tuple[str, ...], str]

class Deriver:
    """Checked batches of log records in, index rows out (pure: no I/O).

    Stage two of deriving the index: feed every batch of the log's records in order with
    :meth:`feed`, each with what :func:`evidence_ledger.index.check.check_batch` found in it; take
    the rows of the entries fed since the last take, and of the calls whose chain they
    changed, with :meth:`take` (a :class:`Chunk`). Its state between two updates is stored
    in the index (:meth:`save`, :meth:`restored`).

    Memory: the rule engine spills a run's state when the run ends or falls out of its
    working set (:class:`evidence_ledger.verify.rules.RuleEngine` with a
    :class:`~evidence_ledger.verify.spill.Spill`); what is kept between two takes is
    bounded by the chunk.

    Args:
        engine: the rule engine to go on with (default: a new one, spilling).
        tree: the compact range of the entries fed so far.
        place: where the entries fed so far end (default: nothing fed).
    """

    def __init__(self, engine: rules.RuleEngine | None = None,
                 tree: merkle.CompactRange | None = None,
                 place: DeriverPlace | None = None) -> None:
        self.engine = engine if engine is not None else rules.RuleEngine(Spill())
        self.tree = tree if tree is not None else merkle.CompactRange()
        place = place or DeriverPlace(0, 0, 0, ZERO_HASH, 0)
        self.size = place.size
        """Entries fed (the tree size)."""
        self.offset = place.offset
        """Byte offset just past the last record fed."""
        self.last_offset = place.last_offset
        """Byte offset of the last record fed."""
        self.last_hash = place.last_hash
        """Entry hash of the last record fed (zeros when none)."""
        self._findings = place.findings
        self._checked: list[CheckedBatch] = []
        self._call_seqs: dict[str, list[int | None]] = {}
        self._violations: list[tuple[Any, ...]] = []
        self._touched: set[CallKey] = set()
        self._persisted_at: dict[CallKey, int] = {}  # calls whose first one was since the take
        self._executed_at: dict[CallKey, int] = {}
        self._blocks: list[tuple[int, int]] = []

    @classmethod
    def restored(cls, con: duckdb.DuckDBPyConnection, lazy: bool = False) -> Deriver | None:
        """The deriver whose state :meth:`save` stored in ``con`` (None: none stored, or
        not well formed); ``lazy``: as :func:`~evidence_ledger.index.state.load_state`
        takes it (then saved to ``con``). Raises duckdb.Error."""
        state = load_state(con, lazy)
        return None if state is None else cls(*state)

    def save(self, con: duckdb.DuckDBPyConnection, commit_each: bool = False) -> None:
        """Store this deriver's state in ``con`` (:mod:`evidence_ledger.index.state`), in
        the caller's transaction (or several: see
        :func:`~evidence_ledger.index.state.save_state`), once everything fed has been
        taken. Raises duckdb.Error."""
        assert not self._checked and not self._touched, "take before saving"
        save_state(con, self.engine, self.tree, DeriverPlace(
            self.size, self.offset, self.last_offset, self.last_hash, self._findings),
            commit_each)

    def feed(self, checked: CheckedBatch) -> None:
        """Derive the rows of a checked batch of records, the first at index :attr:`size`.

        Args:
            checked: :func:`evidence_ledger.index.check.check_batch` of the batch.

        Raises:
            EvidenceError: at the first record that does not continue the log (its
                ``seq`` or ``prev``), or that ``checked`` found a problem with (its CRC-32
                or canonical decoding); run ``verify``.
            ValueError: if ``checked`` does not start at this size (a caller's bug).
        """
        hashes, leaves = checked.hashes, checked.leaves
        if checked.first != self.size:
            raise ValueError("the checked batch is not the one fed")
        self._checked.append(checked)
        self._blocks += checked.blocks
        for i, data in enumerate(checked.records):
            entry = decode_checked(data)
            seq = self.size
            if entry.seq != seq or entry.prev != self.last_hash:
                raise EvidenceError(
                    f"log damaged at seq {seq}: seq or prev does not continue the log "
                    "(run verify)"
                )
            self.tree.append(leaves[32 * i:32 * i + 32])
            self.engine.feed(entry)
            self._attribute(entry)
            self.size = seq + 1
            self.last_hash = hashes[32 * i:32 * i + 32]
        if checked.count:
            self.offset, self.last_offset = checked.end, checked.last_offset
        if checked.problem is not None:
            raise EvidenceError(checked.problem)

    def _attribute(self, entry: Entry) -> None:
        """Note the call the rules attribute ``entry`` to, and the findings it raised."""
        b, seq, kind = entry.body, entry.seq, entry.kind
        call = None
        call_id = b.get("call_id")
        if type(call_id) is str and "scope" in b:  # a call identity (fields typed by kind)
            call = self.engine.find_call(b["run_id"], tuple(b["scope"]), call_id)
        seqs = self._call_seqs.get(kind)
        if seqs is None:
            seqs = self._call_seqs[kind] = []
        seqs.append(call.seq if call else None)
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
        """The entries fed since the last call, and the chains they changed, as a
        :class:`Chunk`."""
        raw = {}
        for kind, seqs in self._call_seqs.items():
            tables = [c.tables[kind] for c in self._checked if kind in c.tables]
            table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
            raw[kind] = table.append_column(CALL_SEQ, pa.array(seqs, pa.int64()))
        chunk = Chunk(
            raw, rows_table(VIEWS["violations"], self._violations),
            pa.Table.from_pylist(
                [{"first_seq": s, "log_offset": o} for s, o in self._blocks], BLOCKS_SCHEMA),
            self._take_chains(),
        )
        self._checked, self._call_seqs, self._violations, self._blocks = [], {}, [], []
        return chunk

    def _take_chains(self) -> pa.Table:
        """``call_chains`` rows of every call whose chain changed since the last take, in
        call order (see :attr:`Chunk.chains`)."""
        calls = self.engine.calls  # keeps the spilled runs it reads back: keys run by run
        states = sorted((calls[k] for k in sorted(self._touched)), key=lambda c: c.seq)
        rows = []
        chain_rows = chains.call_chains(states, self._executed_at)
        for state, row in zip(states, chain_rows, strict=True):
            persisted = self._persisted_at.get(state.key)
            rows.append((
                state.seq, row.run_id, list(row.scope), row.call_id, row.agent, row.tool,
                row.args_digest, row.needs_approval, row.decision, row.sticky,
                row.approver,
                state.time, state.time, row.decided_at, row.decided_at, row.executed_at,
                row.executed_at, len(state.executions), row.persisted, persisted, persisted,
                row.status, list(row.violations),
            ))
        self._touched, self._persisted_at, self._executed_at = set(), {}, {}
        return rows_table(VIEWS["call_chains"], rows)

    def report(self) -> Report:
        """The verifier's :class:`~evidence_ledger.verify.records.Report` over the records fed (no
        payload
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
    with gc_paused(), contextlib.closing(duckdb.connect()) as con:
        for statement in [*SCHEMA, "BEGIN TRANSACTION"]:
            con.execute(statement)
        _load(con, deriver, _given_chunks(records, size),
              lambda: progress and progress(deriver.size))
        if size is not None and deriver.size < size:
            raise EvidenceError(f"the ledger holds {deriver.size} entries, fewer than {size}")
        tables = {
            name: con.sql(f"SELECT * FROM {name} ORDER BY {view.order}").to_arrow_table()
            .cast(view.schema)
            for name, view in VIEWS.items()
        }
    return deriver.report(), tables


def _batches(
    items: Iterable[Record | Damage | TornTail], size: int | None,
) -> Iterator[tuple[list[Record], str | None]]:
    """The records of ``items`` (up to ``size`` entries) in batches of :data:`CHUNK`, each
    with the reason the log cannot be read past it (damage), else None."""
    batch: list[Record] = []
    for item in items:
        if isinstance(item, TornTail) or (size is not None and item.index >= size):
            break
        if isinstance(item, Damage):
            yield batch, f"log damaged at seq {item.index}: {item.reason} (run verify)"
            return
        batch.append(item)
        if len(batch) == CHUNK:
            yield batch, None
            batch = []
    if batch:
        yield batch, None


def _given_chunks(
    items: Iterable[Record | Damage | TornTail], size: int | None,
) -> Generator[Checked, None, None]:
    """The records of ``items`` (up to ``size`` entries), checked a :data:`CHUNK` at a
    time: the first in line, the next :data:`AHEAD` in the worker meanwhile."""
    batches = _batches(items, size)
    first = next(batches, None)
    if first is None:
        return
    with Checker() as checker:
        queued = 0

        def top_up() -> None:
            nonlocal queued
            while queued < AHEAD and (batch := next(batches, None)) is not None:
                checker.submit(check_records, *batch)
                queued += 1

        top_up()
        yield check_records(*first)
        while queued:
            checked = checker.result()
            queued -= 1
            top_up()
            yield checked


def _log_chunks(ledger: Ledger, offset: int, index: int) -> Generator[Checked, None, None]:
    """The log from byte ``offset`` (record ``index``) on, read and checked a :data:`CHUNK`
    at a time: the first in line, each later one by the worker (from the byte where the
    chunk before ends) while the one before is derived."""
    directory = str(ledger.store.directory)
    checked = read_log_chunk(directory, offset, index, CHUNK)
    with Checker() as checker:
        while True:
            batch = checked.batch
            going_on = checked.more and batch is not None and batch.problem is None
            if going_on:
                assert batch is not None
                checker.submit(read_log_chunk, directory, batch.end, batch.first + batch.count,
                               CHUNK)
            yield checked
            if not going_on:
                return
            checked = checker.result()


def _load(
    con: duckdb.DuckDBPyConnection, deriver: Deriver, chunks: Generator[Checked, None, None],
    chunk_done: Callable[[], object], commit_each: bool = False,
) -> None:
    """Feed ``chunks`` to ``deriver`` and insert the rows of each into ``con`` on a thread
    of its own (:class:`_Inserter`; committing the open transaction after each chunk and
    beginning another when ``commit_each``).

    Raises:
        EvidenceError: at a damaged record (see :meth:`Deriver.feed`).
    """
    with _Inserter(con, commit_each) as inserter, contextlib.closing(chunks):
        for checked in chunks:
            if checked.batch is not None:
                deriver.feed(checked.batch)
                inserter.put(deriver.take())
                chunk_done()
            if checked.damage is not None:
                raise EvidenceError(checked.damage)


# -- the index file --------------------------------------------------------------------

_PURE_MODULES = frozenset({
    "evidence_ledger.verify.rules", "evidence_ledger.verify.lineage",
    "evidence_ledger.verify.findings", "evidence_ledger.tlog.merkle",
    "evidence_ledger.format.entries", "evidence_ledger.format.digests",
})
"""Modules without I/O whose code the rule engine's state and findings depend on."""


def refuse_non_regular(target: Path) -> None:
    """Refuse an index, WAL or side-file path that holds a symlink, FIFO, socket, device or
    directory: DuckDB and the state reader would follow it or block on it for ever.

    Raises:
        UsageError: naming the path and what it is.
    """
    for path in (target, target.with_name(target.name + ".wal"), side_path(target)):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(f"cannot use index {path}: {problem(exc)}") from exc
        if stat.S_ISDIR(mode):
            raise UsageError(f"refusing to use {path} as the index: it is a directory")
        if not stat.S_ISREG(mode):
            raise UsageError(
                f"refusing to use {path} as the index: it is not a regular file (an index "
                "is derived from the log: name another file with --index)"
            )


def checked_index_path(ledger: Ledger, path: str | os.PathLike[str] | None = None) -> Path:
    """The index file (:func:`index_path`), refused before anything is made beside it
    (its lock, WAL or state) when it cannot be an index: a path :func:`refuse_non_regular`
    refuses; a file named by ``path`` that is not a DuckDB database (never replaced); a
    path inside the ledger directory other than the default index (the ledger's files and
    directories there are its own: ``torn``, ``tree/``, ``writer.lock``, ``checkpoints/``;
    ``verify`` flags any other file in its directories); a path that is not UTF-8 (DuckDB
    opens paths as UTF-8 text only).

    Raises:
        UsageError: naming the path and why.
    """
    if path is not None and Path(path).name in ("", ".", ".."):
        raise UsageError("--index names no file: give the index file's path")
    target = index_path(ledger, path)
    try:
        str(target).encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8: DuckDB cannot open the path
        raise UsageError(
            f"the index path {os.fsdecode(target)!r} is not UTF-8 text, which DuckDB cannot "
            "open; name an index file with a UTF-8 path with --index"
        ) from None
    refuse_non_regular(target)
    if path is None:
        return target
    home = ledger.directory.resolve()
    if target.parent.resolve() / target.name == home / INDEX_NAME:
        return target  # the default, named
    if target.parent.resolve().is_relative_to(home):
        raise UsageError(
            f"refusing --index {target}: it is inside the ledger directory, whose files are "
            f"the ledger's own; name a file outside {home}, or leave out --index"
        )
    _refuse_foreign(target)
    return target


def _refuse_foreign(target: Path) -> None:
    """Refuse to replace an existing file at ``target`` that is not a DuckDB database."""
    try:
        foreign = target.exists() and not _is_duckdb_file(target)
    except OSError as exc:
        raise UsageError(f"cannot use index {target}: {problem(exc)}") from exc
    if foreign:
        raise UsageError(
            f"refusing to replace {target}: it is not a DuckDB index (delete it if it is a "
            "damaged index, or name another file with --index)"
        )


@functools.cache
def _fingerprint() -> str:
    """Digest of the code the index rows and the saved state depend on: other code, other
    index (rebuilt)."""
    digest = hashlib.sha256(f"index v{INDEX_VERSION}".encode())
    code = _PURE_MODULES | {
        "evidence_ledger.format.encoding", "evidence_ledger.verify.chains",
        "evidence_ledger.index.check", "evidence_ledger.index.columns", "evidence_ledger.index.db",
        "evidence_ledger.index.state", "evidence_ledger.verify.spill", __name__,
    }
    for name in sorted(code):
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
    """The index file: ``path``, else the ledger's index in the user's cache
    (:func:`evidence_ledger.index.location.default_index_path`).

    Raises:
        UsageError: if there is no cache folder to default to.
    """
    return Path(path) if path else default_index_path(ledger)


_PLACE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT,
                           errno.ENOTDIR, errno.EISDIR})
_PLACE_TEXTS = ("Permission denied", "Read-only file system", "No such file or directory")


def index_failed(exc: Exception, path: Path | None, doing: str = "write") -> LedgerError:
    """The error for an index that cannot be written (or opened, ``doing``): where the
    place refuses it (no permission, a read-only file system, no such folder) a
    :class:`UsageError` that says to pass ``--index`` (exit 2); where the storage fails
    (EIO, ENOSPC, a commit that did not land) a :class:`StorageError` (exit 1)."""
    text = one_line(exc)
    where = f" {path}" if path is not None else ""
    if getattr(exc, "errno", None) in _PLACE_ERRNOS or any(t in text for t in _PLACE_TEXTS):
        return UsageError(f"cannot {doing} the index{where}: {text} (pass --index)")
    return StorageError(f"cannot {doing} the index{where}: {text}")


@contextlib.contextmanager
def index_lock(path: Path, exclusive: bool) -> Iterator[None]:
    """Hold ``<index>.lock``: exclusive while updating, shared while reading.

    Raises:
        UsageError: if the lock cannot be taken (time-out, or an unwritable directory).
        StorageError: if the storage fails opening the lock file (EIO).
    """
    lock = path.with_name(path.name + ".lock")
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_lock(lock, exclusive=exclusive))
        except StorageError as exc:  # EIO opening it: the storage's (exit 1)
            cause = exc.__cause__
            if isinstance(cause, OSError) and not isinstance(exc, LockTimeout):
                raise index_failed(cause, lock, "lock") from exc
            raise UsageError(f"{exc} (pass --index)") from exc
        yield


def _is_duckdb_file(path: Path) -> bool:
    """True when ``path`` holds a DuckDB database (its header carries ``DUCK`` at byte 8)."""
    with open(path, "rb") as fh:
        return fh.read(12)[8:12] == b"DUCK"


def _connect(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection to the index at ``path`` for an update: DuckDB's buffer pool held to
    :data:`MEMORY_LIMIT`. Raises duckdb.Error."""
    con = duckdb.connect(str(path))
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    return con


def side_path(target: Path) -> Path:
    """``<index>.build``: where a fresh build, or a long catch-up, writes before it is
    renamed over the index."""
    return target.with_name(target.name + ".build")


def _remove_db(path: Path) -> None:
    """Delete a DuckDB file and its WAL, if there. Raises OSError."""
    for stale in (path, path.with_name(path.name + ".wal")):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def _connect_side(target: Path, copy: bool) -> duckdb.DuckDBPyConnection:
    """A connection to the side file of ``target`` (:func:`side_path`): a new, empty
    index, or a copy of ``target`` (closed, checkpointed) when ``copy``. What a killed
    build left there is replaced.

    Raises:
        UsageError, StorageError: see :func:`index_failed`.
    """
    side = side_path(target)
    try:
        _remove_db(side)
        if copy:
            shutil.copyfile(target, side)
        con = _connect(side)
        if not copy:
            for statement in [*SCHEMA, *state_schema()]:
                con.execute(statement)
    except (OSError, duckdb.Error) as exc:
        raise index_failed(exc, side) from exc
    return con


def _put_in_place(target: Path) -> None:
    """Rename the closed side file over ``target`` once it is on disk (fsync of the file,
    then of the folder): a crash leaves the old index, or the new one.

    Raises:
        UsageError, StorageError: see :func:`index_failed`.
    """
    side = side_path(target)
    try:
        with open(side, "rb+") as fh:
            os.fsync(fh.fileno())
        with contextlib.suppress(FileNotFoundError):  # the old index's; never replay it
            target.with_name(target.name + ".wal").unlink()
        os.replace(side, target)
        folder = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError as exc:
        raise index_failed(exc, target) from exc


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
    last record indexed (rewritten or truncated).

    Crash safety: an update that reads up to :data:`SIDE_BYTES` of log is one transaction
    on the index, committed once the metadata row (how far the index holds) and the
    deriver's state are written. A fresh build, or a longer catch-up, writes to
    ``<index>.build`` instead (:func:`side_path`: empty, or a copy of the index),
    committing each chunk there (DuckDB keeps an open transaction's inserted bytes in
    memory), and renames it over the index at the end, after an fsync. Killed midway,
    either leaves the index as it was (or none); the next update starts over from there,
    deleting a side file left behind.

    Args:
        ledger: the ledger to index.
        path: the index file (default: the ledger's index in the user's cache,
            :mod:`evidence_ledger.index.location`).
        rebuild: start over from an empty index.
        progress: see :data:`Progress`.

    Raises:
        UsageError: if the ledger has no log, or the index cannot be written.
        EvidenceError: if a record fails integrity (see :class:`Deriver`).
    """
    try:
        return _update_index(ledger, path, rebuild, progress)
    except StoredStateDamaged:  # read only when an entry named it: start over
        return _update_index(ledger, path, True, progress)


def _update_index(ledger: Ledger, path: str | os.PathLike[str] | None, rebuild: bool,
                  progress: Progress | None) -> IndexInfo:
    """:func:`update_index`; raises StoredStateDamaged too."""
    ledger.require_exists()
    target = checked_index_path(ledger, path)
    if path is None:
        _make_cache_folder(target.parent)
    with index_lock(target, exclusive=True), gc_paused():
        con: duckdb.DuckDBPyConnection | None = None
        try:
            with contextlib.suppress(duckdb.Error):
                con = _connect(target) if target.exists() else None
            meta = None if (con is None or rebuild) else _meta(con)
            if meta is not None and not _same_log(ledger, meta[2], meta[4], meta[5]):
                meta = None
            deriver: Deriver | None = None
            log_bytes = 0
            if meta is not None:
                assert con is not None
                first = next(iter(ledger.store.scan(meta[6], meta[2])), None)
                if first is None or isinstance(first, TornTail):
                    return IndexInfo(target, meta[2], base64.b64decode(meta[3]))
                log_bytes = ledger.store.path.stat().st_size
                with contextlib.suppress(duckdb.Error):
                    deriver = Deriver.restored(con, lazy=log_bytes - meta[6] <= SIDE_BYTES)
                if deriver is None or deriver.size != meta[2] or deriver.offset != meta[6] \
                        or digest_text(deriver.last_hash) != meta[4]:
                    deriver = meta = None
            fresh = deriver is None
            if fresh and path is not None:
                _refuse_foreign(target)
            side = meta is None or log_bytes - meta[6] > SIDE_BYTES
            if side:
                if con is not None:
                    con.close()
                con = _connect_side(target, copy=not fresh)
            if deriver is None:
                deriver = Deriver()
            assert con is not None
            chunks = _log_chunks(ledger, deriver.offset, deriver.size)
            info = _catch_up(con, ledger, deriver, chunks, fresh, side, progress, target)
            if side:
                con.execute("CHECKPOINT")
                con.close()
                con = None
                _put_in_place(target)
            return info
        except duckdb.Error as exc:  # a statement or commit that did not land
            raise index_failed(exc, target) from exc
        finally:
            if con is not None:
                with contextlib.suppress(duckdb.Error):
                    con.close()


def _make_cache_folder(folder: Path) -> None:
    """Create the default index's folder (and those above it) with mode 0700: an index
    tells what the ledger holds.

    Raises:
        UsageError: where the place refuses it; StorageError: where the storage fails.
    """
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise index_failed(exc, folder, "create the folder of") from exc


class _Inserter:
    """Bulk inserts run on a thread of their own, so DuckDB (which releases the GIL)
    stores and compresses one chunk while the next one is derived.

    Use as a context manager around the loop that calls :meth:`put`, inside the
    update's transaction (committed by the caller once the metadata row is written, or
    after each chunk when ``commit_each``, in a side file:
    a killed update leaves the index as it was; DuckDB writes full row groups of the
    transaction to the file as it goes, but keeps some 260 bytes per row inserted until
    the commit, measured at 10^6 entries). The connection must not be used by
    anyone else until the block exits. On exit the thread has stopped: it has inserted
    everything put, or stopped at its first error, re-raised here (a DuckDB error as
    :class:`UsageError`). When the block raises (Ctrl-C included), the chunk being
    inserted is interrupted and the rest dropped; a Ctrl-C while waiting for the thread
    is re-raised once it has stopped, so the connection is never closed under it.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, commit_each: bool = False) -> None:
        self._con = con
        self._commit_each = commit_each
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
                        if self._commit_each:
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
            raise index_failed(error, None) from error
        if error is not None:
            raise error


def _catch_up(
    con: duckdb.DuckDBPyConnection, ledger: Ledger, deriver: Deriver,
    chunks: Generator[Checked, None, None], fresh: bool, commit_each: bool,
    progress: Progress | None, target: Path,
) -> IndexInfo:
    """Read ``chunks`` into ``con`` in one transaction (one per chunk, and one for the
    rest, when ``commit_each``), ending with the metadata row and the deriver's state."""
    start, first_byte = deriver.size, deriver.offset
    total = ledger.store.path.stat().st_size - first_byte

    def report() -> None:
        if progress:
            progress(deriver.size - start, deriver.offset - first_byte, total)

    con.execute("BEGIN TRANSACTION")
    _load(con, deriver, chunks, report, commit_each)
    root = deriver.tree.root()
    con.execute("DELETE FROM ledger_index")
    con.execute(
        "INSERT INTO ledger_index VALUES (?, ?, ?, ?, ?, ?, ?)",
        [INDEX_VERSION, _fingerprint(), deriver.size, base64.b64encode(root).decode("ascii"),
         digest_text(deriver.last_hash), deriver.last_offset, deriver.offset],
    )
    deriver.save(con, commit_each)
    con.execute("COMMIT")
    report()
    return IndexInfo(target, deriver.size, root, deriver.size - start, fresh)


def is_current(con: duckdb.DuckDBPyConnection, ledger: Ledger) -> bool:
    """True when the index holds every complete record of the log (cheap: no scan)."""
    meta = _meta(con)
    if meta is None:
        return False
    try:
        size = ledger.store.path.stat().st_size
    except OSError:
        return False
    return size == meta[6] and _same_log(ledger, meta[2], meta[4], meta[5])
