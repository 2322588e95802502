"""Compliance export of the index views: files that stand alone, signed with the ledger's
key and bound to a signed checkpoint of the log.

An export directory holds, for a tree size N (the entries the index stood at)::

    manifest.json        what the export holds (below), every other file with its SHA-256
    manifest.dsse.json   the signature over manifest.json (below)
    entries.bin          the log's entries [0, N): each record in a frame of its own, as
                         in log.bin (FORMAT.md "Frames"; every "more follows" bit clear)
    checkpoint.note      a c2sp.org/tlog-checkpoint at tree size N in a signed note, signed
                         by the same key (not stored in the ledger's checkpoints/)
    <view>.<ext>         one file per view of :data:`evidence_ledger.index.db.VIEWS`
                         (formats parquet, csv, jsonl), or
    traces.otlp.jsonl    (format otlp-json) the calls as OpenTelemetry traces
                         (:mod:`evidence_ledger.index.otlp`)

``manifest.json`` (JSON, indented)::

    {
      "export_format_version": 2,
      "format": "parquet" | "csv" | "jsonl" | "otlp-json",
      "tree_size": N,                     entries the export was taken at
      "root_hash": "<base64>",            RFC 9162 root over entries [0, N) (as verify --json)
      "since_ns": int | null,             rows whose time column t has since <= t < until
      "until_ns": int | null,             (ns since the epoch, UTC; see View.time)
      "files": [{"name": "entries.bin", "entries": N, "sha256": "sha256:<hex>"},
                {"name": "checkpoint.note", "sha256": "sha256:<hex>"},
                {"name": "calls.parquet", "view": "calls", "rows": k,
                 "sha256": "sha256:<hex>"}, ...]
    }

where an ``otlp-json`` export lists, instead of the views' files,
``{"name": "traces.otlp.jsonl", "traces": runs, "spans": calls, "sha256": ...}`` (its
spans are those of the calls in the time range, each with all its events).

``manifest.dsse.json`` is a DSSE envelope (:mod:`evidence_ledger.tlog.dsse`: Ed25519 over
the DSSE PAE, keyid the C2SP verifier key string, JSON indented by two spaces) of payload
type ``application/vnd.in-toto+json``, whose payload is the in-toto Statement v1, as
compact ASCII JSON (:func:`export_statement`)::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "manifest.json", "digest": {"sha256": "<hex of its bytes>"}}],
     "predicateType": "https://evidence-ledger.dev/export/v1",
     "predicate": {"tree_size": N, "root_hash": "<base64>"}}

So one key binds it all: the envelope signs the manifest's bytes, the manifest names every
file's SHA-256, and the checkpoint (signed by the same key) the root of ``entries.bin``,
from which every view's rows are derived again.

Formats: Parquet (the Arrow schema of each view), CSV (header row, RFC 4180 quoting: every
string quoted, null empty and unquoted; lists as JSON arrays; times as
``YYYY-MM-DD HH:MM:SS.ffffffZ``), JSON Lines (one object a row; OpenTelemetry GenAI names
for the columns that have one, :data:`~evidence_ledger.index.otlp.OTEL_NAMES`; times ISO
8601 with ``Z``), OTLP/JSON traces (:mod:`evidence_ledger.index.otlp`).

:mod:`evidence_ledger.index.export_check` verifies an export without the ledger.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from evidence_ledger.format.errors import EvidenceError, StorageError, UsageError
from evidence_ledger.format.framing import Record, frame
from evidence_ledger.index.build import Progress, update_index
from evidence_ledger.index.db import VIEWS, View
from evidence_ledger.index.otlp import OTEL_NAMES, TRACES, write_traces
from evidence_ledger.index.query import connect_read_only, raise_if_damaged, rebuilt_if_damaged
from evidence_ledger.record.checkpointing import sign_tree_head
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.checkpoint import Checkpoint
from evidence_ledger.tlog.dsse import PAYLOAD_TYPE, in_toto_statement, sign_envelope
from evidence_ledger.tlog.merkle import CompactRange, leaf_hash
from evidence_ledger.tlog.note import Signer

__all__ = [
    "CHECKPOINT",
    "ENTRIES",
    "EXPORT_FORMAT_VERSION",
    "FORMATS",
    "MANIFEST",
    "OTLP_JSON",
    "PREDICATE_TYPE",
    "SIGNATURE",
    "TABLE_FORMATS",
    "HashingFile",
    "data_files",
    "export_ledger",
    "export_statement",
    "file_sha256",
    "select_rows",
    "write_rows",
]

EXPORT_FORMAT_VERSION = 2
MANIFEST = "manifest.json"
SIGNATURE = "manifest.dsse.json"
ENTRIES = "entries.bin"
CHECKPOINT = "checkpoint.note"
PREDICATE_TYPE = "https://evidence-ledger.dev/export/v1"
TABLE_FORMATS = {"parquet": "parquet", "csv": "csv", "jsonl": "jsonl"}
"""Export format that writes a file per view -> the files' extension."""
OTLP_JSON = "otlp-json"
"""The export format that writes the calls as traces (:data:`TRACES`)."""
FORMATS = (*TABLE_FORMATS, OTLP_JSON)
"""Every export format."""


def data_files(fmt: str) -> list[str]:
    """The files an export in ``fmt`` holds besides the carried ones and the manifest."""
    if fmt == OTLP_JSON:
        return [TRACES]
    return [f"{view}.{TABLE_FORMATS[fmt]}" for view in VIEWS]


def export_statement(manifest: bytes, tree_size: int, root_hash: str) -> bytes:
    """The in-toto Statement ``manifest.dsse.json`` signs (see the module docstring).

    Args:
        manifest: the bytes of ``manifest.json``.
        tree_size: its tree size (entries).
        root_hash: its root hash (standard base64).
    """
    return in_toto_statement(
        [(MANIFEST, hashlib.sha256(manifest).digest())], PREDICATE_TYPE,
        {"tree_size": tree_size, "root_hash": root_hash},
    )


def select_rows(table: pa.Table, view: View, since: int | None, until: int | None) -> pa.Table:
    """Rows of ``table`` (a view's) with ``since <= t < until`` on the view's time column
    (ns; no bound: all rows). A
    row whose ``*_ns`` time is NULL but whose TIMESTAMP is set lies past 2^63-1 ns: after
    any ``since``, and never before an ``until``."""
    if since is None and until is None:
        return table
    column = table[view.time]
    keep = pc.is_valid(column)
    if since is not None:
        keep = pc.and_(keep, pc.greater_equal(column, pa.scalar(since, pa.int64())))
    if until is not None:
        keep = pc.and_(keep, pc.less(column, pa.scalar(until, pa.int64())))
    else:
        late = pc.and_(pc.is_null(column), pc.is_valid(table[view.time.removesuffix("_ns")]))
        keep = pc.or_(pc.fill_null(keep, False), late)
    return table.filter(pc.fill_null(keep, False))


# -- writers ------------------------------------------------------------------------------


def _json_text(values: list[Any]) -> pa.Array:
    return pa.array(
        [None if v is None else json.dumps(v, ensure_ascii=False, separators=(",", ":"))
         for v in values],
        pa.string(),
    )


def _write_csv(table: pa.Table, sink: Any) -> None:
    columns = []
    for column, kind in zip(table.columns, table.schema.types, strict=True):
        if pa.types.is_list(kind):
            columns.append(_json_text(column.to_pylist()))
        elif pa.types.is_timestamp(kind):
            columns.append(column.cast(pa.timestamp("us", "UTC")))
        else:
            columns.append(column)
    pcsv.write_csv(pa.Table.from_arrays(columns, names=table.column_names), sink)


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat(timespec="microseconds") + "Z"


def _write_jsonl(table: pa.Table, sink: Any) -> None:
    names = [OTEL_NAMES.get(name, name) for name in table.column_names]
    times = {i for i, kind in enumerate(table.schema.types) if pa.types.is_timestamp(kind)}
    for batch in table.to_batches(max_chunksize=10_000):
        columns = [
            [_iso(v) for v in column.to_pylist()] if i in times else column.to_pylist()
            for i, column in enumerate(batch.columns)
        ]
        lines = [
            json.dumps(dict(zip(names, row, strict=True)), ensure_ascii=False,
                       separators=(",", ":")) + "\n"
            for row in zip(*columns, strict=True)
        ]
        sink.write("".join(lines).encode("utf-8"))


_WRITERS: dict[str, Callable[[pa.Table, Any], None]] = {"csv": _write_csv, "jsonl": _write_jsonl}


def write_rows(table: pa.Table, fmt: str, sink: Any) -> None:
    """Write ``table`` (a view's rows) as ``fmt`` (``csv`` or ``jsonl``: the byte form of
    the export's files) to ``sink``, a binary file object."""
    _WRITERS[fmt](table, sink)


class HashingFile:
    """A write-only file object that hashes what passes, writes it through to ``out``, and
    compares it with what ``compare`` reads (:attr:`first_difference`: the offset of the
    first byte that differs, or None)."""

    def __init__(self, out: BinaryIO | None = None, compare: BinaryIO | None = None) -> None:
        self.out, self.compare = out, compare
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.first_difference: int | None = None
        self.closed = False

    def write(self, data: bytes | memoryview) -> int:
        data = bytes(data)
        if self.out is not None:
            self.out.write(data)
        if self.compare is not None and self.first_difference is None:
            theirs = self.compare.read(len(data))
            if theirs != data:
                pairs = enumerate(zip(data, theirs, strict=False))
                same = next((i for i, (a, b) in pairs if a != b), min(len(data), len(theirs)))
                self.first_difference = self.size + same
        self.sha256.update(data)
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _write(path: Path, write: Callable[[HashingFile], Any]) -> tuple[str, Any]:
    """Create ``path`` and ``write(sink)`` into it; return its ``sha256:<hex>`` and what
    ``write`` returned.

    Raises:
        StorageError: if the file cannot be written.
    """
    try:
        with open(path, "wb") as fh:
            sink = HashingFile(out=fh)
            result = write(sink)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return "sha256:" + sink.sha256.hexdigest(), result


def _write_table(table: pa.Table, fmt: str, path: Path) -> str:
    """Write ``table`` to ``path`` in ``fmt``; return ``sha256:<hex>`` of the file.

    Raises:
        StorageError: if the file cannot be written.
    """
    if fmt == "parquet":
        try:
            pq.write_table(table, path)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
        return file_sha256(path)
    return _write(path, lambda sink: write_rows(table, fmt, sink))[0]


def _view_table(con: duckdb.DuckDBPyConnection, view: View) -> pa.Table:
    """Every row of ``view`` in ``con`` (an index), in its order, with its Arrow schema.
    Raises duckdb.Error."""
    return con.sql(f"SELECT * FROM {view.name} ORDER BY {view.order}").to_arrow_table().cast(
        view.schema)


def file_sha256(path: Path) -> str:
    """``sha256:<hex>`` of the file at ``path``, read 1 MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


# -- export -------------------------------------------------------------------------------


def export_ledger(
    ledger: Ledger,
    out: str | os.PathLike[str],
    fmt: str,
    signer: Signer,
    *,
    since: int | None = None,
    until: int | None = None,
    index: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Export every view of ``ledger``'s index, brought up to date first, into ``out``,
    with the log's entries up to the index's tree size, a checkpoint of that tree head
    and the manifest, all signed by ``signer`` (see the module docstring).

    Args:
        ledger: the ledger.
        out: a directory that does not exist yet or is empty.
        fmt: ``parquet``, ``csv``, ``jsonl`` (a file per view) or ``otlp-json`` (the
            calls as traces).
        signer: the ledger's checkpoint key (its name must be the origin of the stored
            checkpoints); it signs the checkpoint and the manifest.
        since, until: keep rows whose time column lies in ``[since, until)`` (ns, UTC).
        index: the index file (default: the ledger's index in the user's cache,
            :mod:`evidence_ledger.index.location`).
        progress: called as ``progress(tree_size, files_written, files_total)`` after
            each view's (or the traces') file (the index update before it reports nothing; call
            :func:`evidence_ledger.index.build.update_index` first to follow it).

    Returns:
        The manifest written to ``out/manifest.json``.

    Raises:
        UsageError: on a bad format, time range or output directory, no ledger, or a key
            named otherwise than the ledger's checkpoints' origin.
        EvidenceError: if the log fails integrity while indexing, contradicts a stored
            checkpoint, or no longer has the root the index was built at (checked
            against ``log.bin`` in one O(n) pass, and again as the entries are copied).
        StorageError: if a file cannot be written.
    """
    if fmt not in FORMATS:
        raise UsageError(f"export format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if since is not None and until is not None and since >= until:
        raise UsageError(f"--since ({since}) must come before --until ({until})")
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{target} exists and is not an empty directory")
    note, head, views = rebuilt_if_damaged(
        index, False, lambda rebuild: _export_views(
            ledger, index, rebuild, fmt, signer, target, since, until, progress))
    root, entries_sha256 = _write_entries(ledger, head.size, target / ENTRIES)
    if root != head.root:
        raise EvidenceError(f"the log changed while its entries were exported (root at tree "
                            f"size {head.size}); run verify")
    files: list[dict[str, Any]] = [
        {"name": ENTRIES, "entries": head.size, "sha256": entries_sha256},
        {"name": CHECKPOINT, "sha256": _write_file(target / CHECKPOINT, note)},
        *views,
    ]
    root_hash = base64.b64encode(head.root).decode("ascii")
    manifest = {
        "export_format_version": EXPORT_FORMAT_VERSION, "format": fmt,
        "tree_size": head.size, "root_hash": root_hash, "since_ns": since, "until_ns": until,
        "files": files,
    }
    data = (json.dumps(manifest, indent=2) + "\n").encode("utf-8")
    _write_file(target / MANIFEST, data)
    envelope = sign_envelope(export_statement(data, head.size, root_hash), signer, PAYLOAD_TYPE)
    _write_file(target / SIGNATURE, envelope)
    return manifest


def _write_file(path: Path, data: bytes) -> str:
    """Write ``data`` to the new file ``path``; return its ``sha256:<hex>``.

    Raises:
        StorageError: if it cannot be written.
    """
    try:
        with open(path, "xb") as fh:
            fh.write(data)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _write_entries(ledger: Ledger, size: int, path: Path) -> tuple[bytes, str]:
    """Copy the log's first ``size`` entries to ``path``, each in a frame of its own;
    return the RFC 9162 root over the records written and the file's ``sha256:<hex>``
    (one pass, O(log n) memory).

    Raises:
        EvidenceError: if the log is damaged or short before ``size``.
        StorageError: if the file cannot be written.
    """
    tree, digest, done = CompactRange(), hashlib.sha256(), 0
    try:
        with open(path, "xb") as fh:
            for item in ledger.scan() if size else ():
                if not isinstance(item, Record) or not item.crc_ok:
                    raise EvidenceError(
                        f"the log is damaged or short at seq {done}, before the export's "
                        f"tree size {size} (run verify)")
                framed = frame(item.data, more=False)
                fh.write(framed)
                digest.update(framed)
                tree.append(leaf_hash(item.data))
                done += 1
                if done == size:
                    break
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    if done < size:
        raise EvidenceError(f"the log holds {done} entries, fewer than the export's {size}")
    return tree.root(), "sha256:" + digest.hexdigest()


def _export_views(
    ledger: Ledger, index: str | os.PathLike[str] | None, rebuild: bool, fmt: str,
    signer: Signer, target: Path, since: int | None, until: int | None,
    progress: Progress | None,
) -> tuple[bytes, Checkpoint, list[dict[str, Any]]]:
    """Sign the tree head the index brought up to date stands at, once the log is found to
    have that root, and write every view (or the calls' traces) to ``target``; return the
    signed checkpoint, its
    tree head and the manifest's list of the views' (or the traces') files. Writing again
    (after a rebuild) replaces the files.

    Raises:
        DamagedIndexError: if DuckDB finds the index file damaged while reading it.
    """
    info = update_index(ledger, index, rebuild=rebuild)
    with connect_read_only(info.path) as con:
        try:
            tree_size, root_hash = con.execute(
                "SELECT tree_size, root_hash FROM ledger_index"
            ).fetchall()[0]
            note, head = sign_tree_head(ledger, [signer], tree_size)
            if base64.b64encode(head.root).decode("ascii") != root_hash:
                raise EvidenceError(
                    f"the log no longer has the root the index recorded at tree size "
                    f"{tree_size} (it changed after it was indexed); run verify"
                )
            try:
                target.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"cannot create {target}: {exc.strerror}") from exc
            write = _write_traces if fmt == OTLP_JSON else _write_views
            files = write(con, fmt, target, since, until,
                          lambda done, total: progress and progress(tree_size, done, total))
        except duckdb.Error as exc:
            raise_if_damaged(exc, index)
            raise
    return note, head, files


_FilesDone = Callable[[int, int], Any]
"""``done(files_written, files_total)``."""


def _write_views(
    con: duckdb.DuckDBPyConnection, fmt: str, target: Path, since: int | None,
    until: int | None, done: _FilesDone,
) -> list[dict[str, Any]]:
    """Write each view of the index ``con`` in the table format ``fmt`` to ``target``;
    return the manifest's entries of their files. Raises duckdb.Error, StorageError."""
    files = []
    for view in VIEWS.values():
        table = select_rows(_view_table(con, view), view, since, until)
        name = f"{view.name}.{TABLE_FORMATS[fmt]}"
        files.append({"name": name, "view": view.name, "rows": table.num_rows,
                      "sha256": _write_table(table, fmt, target / name)})
        done(len(files), len(VIEWS))
    return files


def _write_traces(
    con: duckdb.DuckDBPyConnection, fmt: str, target: Path, since: int | None,
    until: int | None, done: _FilesDone,
) -> list[dict[str, Any]]:
    """Write the traces of the calls of the index ``con`` in the time range to ``target``
    (``fmt``: ``otlp-json``); return the manifest's entry of the file. Raises duckdb.Error,
    StorageError."""
    calls = select_rows(_view_table(con, VIEWS["calls"]), VIEWS["calls"], since, until)
    digest, counts = _write(target / TRACES, lambda sink: write_traces(con, calls, sink))
    done(1, 1)
    return [{"name": TRACES, "traces": counts.traces, "spans": counts.spans, "sha256": digest}]
