"""Compliance export of the index views, and the check that an export matches the log.

An export directory holds one file per view of :data:`evidence_ledger.index.db.VIEWS` and a
``manifest.json`` binding them to the log::

    {
      "export_format_version": 1,
      "format": "parquet" | "csv" | "jsonl",
      "tree_size": N,                     entries the export was taken at
      "root_hash": "<base64>",            RFC 9162 root over entries [0, N) (as verify --json)
      "since_ns": int | null,             rows whose time column t has since <= t < until
      "until_ns": int | null,             (ns since the epoch, UTC; see View.time)
      "files": [{"name": "calls.parquet", "view": "calls", "rows": k,
                 "sha256": "sha256:<hex>"}, ...]
    }

Formats: Parquet (the Arrow schema of each view), CSV (header row, RFC 4180 quoting: every
string quoted, null empty and unquoted; lists as JSON arrays; times as
``YYYY-MM-DD HH:MM:SS.ffffffZ``), JSON Lines (one object a row; OpenTelemetry GenAI names
for ``call_id``, ``tool``, ``agent``; times ISO 8601 with ``Z``).

:func:`verify_export` re-derives every view from the ledger's first N entries (in memory,
never from the index), checks the root hash at N, each file's SHA-256 and each file's rows:
a Parquet file is read back and compared as a table, a CSV or JSON Lines file is compared
byte for byte with the same rows written again.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from evidence_ledger.format.errors import EvidenceError, StorageError, UsageError
from evidence_ledger.index.build import Progress, derive, update_index
from evidence_ledger.index.db import MAX_TIME_NS, VIEWS, View
from evidence_ledger.index.query import connect_read_only, raise_if_damaged, rebuilt_if_damaged
from evidence_ledger.storage.files import read_input
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.log_proofs import log_root

__all__ = [
    "FORMATS",
    "MANIFEST",
    "OTEL_NAMES",
    "ExportCheck",
    "export_ledger",
    "verify_export",
]

EXPORT_FORMAT_VERSION = 1
MANIFEST = "manifest.json"
FORMATS = {"parquet": "parquet", "csv": "csv", "jsonl": "jsonl"}
"""Export format -> file extension."""
OTEL_NAMES = {
    "call_id": "gen_ai.tool.call.id",
    "tool": "gen_ai.tool.name",
    "agent": "gen_ai.agent.name",
}
"""Column -> OpenTelemetry GenAI attribute name (used as the key in JSON Lines)."""



def _select(table: pa.Table, view: View, since: int | None, until: int | None) -> pa.Table:
    """Rows with ``since <= t < until`` on the view's time column (no bound: all rows). A
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


class _HashingFile:
    """A write-only file object that writes through to ``out`` and hashes what passes."""

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


def _write(table: pa.Table, fmt: str, path: Path) -> str:
    """Write ``table`` to ``path`` in ``fmt``; return ``sha256:<hex>`` of the file.

    Raises:
        StorageError: if the file cannot be written.
    """
    try:
        if fmt == "parquet":
            pq.write_table(table, path)
            return _file_sha256(path)
        with open(path, "wb") as fh:
            sink = _HashingFile(out=fh)
            _WRITERS[fmt](table, sink)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return "sha256:" + sink.sha256.hexdigest()


def _file_sha256(path: Path) -> str:
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
    *,
    since: int | None = None,
    until: int | None = None,
    index: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Export every view of ``ledger``'s index, brought up to date first, into ``out``.

    Args:
        ledger: the ledger.
        out: a directory that does not exist yet or is empty.
        fmt: ``parquet``, ``csv`` or ``jsonl``.
        since, until: keep rows whose time column lies in ``[since, until)`` (ns, UTC).
        index: the index file (default: the ledger's index in the user's cache,
            :mod:`evidence_ledger.index.location`).
        progress: called as ``progress(tree_size, files_written, files_total)`` after
            each file (the index update before it reports nothing; call
            :func:`evidence_ledger.index.build.update_index` first to follow it).

    Returns:
        The manifest written to ``out/manifest.json``.

    Raises:
        UsageError: on a bad format, time range or output directory, or no ledger.
        EvidenceError: if the log fails integrity while indexing, or no longer has the
            root the index was built at (checked against ``log.bin`` in one O(n) pass).
        StorageError: if a file cannot be written.
    """
    if fmt not in FORMATS:
        raise UsageError(f"export format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if since is not None and until is not None and since >= until:
        raise UsageError(f"--since ({since}) must come before --until ({until})")
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{target} exists and is not an empty directory")
    tree_size, root_hash, files = rebuilt_if_damaged(
        index, False, lambda rebuild: _export_views(
            ledger, index, rebuild, fmt, target, since, until, progress))
    manifest = {
        "export_format_version": EXPORT_FORMAT_VERSION, "format": fmt,
        "tree_size": tree_size, "root_hash": root_hash, "since_ns": since, "until_ns": until,
        "files": files,
    }
    try:
        (target / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"cannot write {target / MANIFEST}: {exc.strerror}") from exc
    return manifest


def _export_views(
    ledger: Ledger, index: str | os.PathLike[str] | None, rebuild: bool, fmt: str,
    target: Path, since: int | None, until: int | None, progress: Progress | None,
) -> tuple[int, str, list[dict[str, Any]]]:
    """Write every view to ``target`` from the index brought up to date; return the tree
    size and root hash it stands at and the manifest's file list.

    Raises:
        DamagedIndexError: if DuckDB finds the index file damaged while reading it.
    """
    info = update_index(ledger, index, rebuild=rebuild)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {target}: {exc.strerror}") from exc
    files = []
    with connect_read_only(info.path) as con:
        try:
            tree_size, root_hash = con.execute(
                "SELECT tree_size, root_hash FROM ledger_index"
            ).fetchall()[0]
            if base64.b64encode(log_root(ledger, tree_size)).decode("ascii") != root_hash:
                raise EvidenceError(
                    f"the log no longer has the root the index recorded at tree size "
                    f"{tree_size} (it changed after it was indexed); run verify"
                )
            for view in VIEWS.values():
                table = con.sql(
                    f"SELECT * FROM {view.name} ORDER BY {view.order}").to_arrow_table()
                table = _select(table.cast(view.schema), view, since, until)
                name = f"{view.name}.{FORMATS[fmt]}"
                files.append({"name": name, "view": view.name, "rows": table.num_rows,
                              "sha256": _write(table, fmt, target / name)})
                if progress:
                    progress(tree_size, len(files), len(VIEWS))
        except duckdb.Error as exc:
            raise_if_damaged(exc, index)
            raise
    return tree_size, root_hash, files


# -- verify-export ------------------------------------------------------------------------


@dataclass
class ExportCheck:
    """What :func:`verify_export` found.

    Attributes:
        tree_size: entries the export says it was taken at.
        root_hash: the manifest's root hash (base64).
        files: files the manifest lists.
        problems: one line per mismatch, each naming the file (or the root) concerned.
    """

    tree_size: int
    root_hash: str
    files: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the export matches the ledger."""
        return not self.problems


MAX_MANIFEST_BYTES = 1 << 20
"""Largest ``manifest.json`` read, in bytes (one holds a line per view: a few KiB)."""


def _read_manifest(directory: Path) -> dict[str, Any]:
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory")
    path = directory / MANIFEST
    if not path.is_file():
        raise UsageError(f"{directory} holds no {MANIFEST}: not an export")
    try:
        manifest = json.loads(read_input(path, largest=MAX_MANIFEST_BYTES,
                                         what="export manifest").decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise EvidenceError(f"{MANIFEST} is not JSON (or nested too deeply): {exc}") from exc
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    ok = (
        isinstance(manifest, dict)
        and _count(manifest.get("export_format_version"))  # an int: not true, not 1.0
        and manifest["export_format_version"] == EXPORT_FORMAT_VERSION
        and isinstance(fmt, str) and fmt in FORMATS
        and _count(manifest.get("tree_size"))
        and isinstance(manifest.get("root_hash"), str)
        and all(manifest.get(k) is None or _time(manifest.get(k)) for k in _RANGE)
        and isinstance(manifest.get("files"), list)
        and all(
            isinstance(f, dict) and isinstance(f.get("view"), str) and f["view"] in VIEWS
            and f.get("name") == f"{f.get('view')}.{FORMATS[str(fmt)]}"
            and _count(f.get("rows")) and isinstance(f.get("sha256"), str)
            for f in manifest["files"]
        )
    )
    if not ok:
        raise EvidenceError(f"{MANIFEST} is not an evidence-ledger export manifest (version "
                            f"{EXPORT_FORMAT_VERSION})")
    twice = sorted(n for n, c in Counter(f["name"] for f in manifest["files"]).items() if c > 1)
    if twice:
        raise EvidenceError(f"{MANIFEST} lists {twice[0]} twice (a tampered export)")
    return manifest


_RANGE = ("since_ns", "until_ns")


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _time(value: Any) -> bool:
    return _count(value) and value <= MAX_TIME_NS


def _first_row_difference(ours: pa.Table, theirs: pa.Table) -> int:
    step = 4096
    for start in range(0, max(ours.num_rows, theirs.num_rows), step):
        a, b = ours.slice(start, step).to_pylist(), theirs.slice(start, step).to_pylist()
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return start + i
        if len(a) != len(b):
            return start + min(len(a), len(b))
    return min(ours.num_rows, theirs.num_rows)


def _compare(path: Path, fmt: str, expected: pa.Table) -> str | None:
    """None when the file at ``path`` holds exactly ``expected``, else what differs."""
    if fmt == "parquet":
        try:
            theirs = pq.read_table(path).cast(expected.schema)
        except (pa.ArrowException, ValueError, OSError) as exc:  # damaged data: OSError
            return f"not a Parquet file of this view's columns ({' '.join(str(exc).split())})"
        if theirs.equals(expected):
            return None
        row = _first_row_difference(expected, theirs)
        return f"rows differ from the ledger's, first at row {row}"
    with open(path, "rb") as fh:
        sink = _HashingFile(compare=fh)
        _WRITERS[fmt](expected, sink)
        trailing = fh.read(1)
    if sink.first_difference is None and not trailing:
        return None
    where = sink.first_difference if sink.first_difference is not None else sink.size
    return f"rows differ from the ledger's, first at byte {where}"


def verify_export(
    directory: str | os.PathLike[str],
    ledger: Ledger,
    progress: Progress | None = None,
) -> ExportCheck:
    """Check an export against the ledger it claims to come from.

    Every file's SHA-256 must match the manifest, no file may be missing or unlisted,
    the RFC 9162 root of the ledger's first ``tree_size`` entries must equal the
    manifest's, and every file must hold exactly the rows re-derived from those entries
    (the same time range applied). Never reads the index.

    Args:
        directory: the export directory.
        ledger: the ledger to check it against.
        progress: see :data:`evidence_ledger.index.build.Progress` (in entries, not bytes).

    Returns:
        An :class:`ExportCheck`; its ``problems`` name each file that does not match.

    Raises:
        UsageError: if ``directory`` holds no manifest, or there is no ledger.
        EvidenceError: if the manifest does not parse.
    """
    where = Path(directory)
    manifest = _read_manifest(where)
    fmt, files = manifest["format"], manifest["files"]
    check = ExportCheck(manifest["tree_size"], manifest["root_hash"], len(files))
    listed = {f["name"] for f in files}
    for name in VIEWS:
        if f"{name}.{FORMATS[fmt]}" not in listed:
            check.problems.append(f"{name}.{FORMATS[fmt]}: view missing from the manifest")
    for extra in sorted(set(os.listdir(where)) - listed - {MANIFEST}):
        check.problems.append(f"{extra}: not listed in the manifest")
    present = []
    for f in files:
        path = where / f["name"]
        if not path.is_file():
            check.problems.append(f"{f['name']}: missing")
            continue
        got = _file_sha256(path)
        if got != f["sha256"]:
            check.problems.append(f"{f['name']}: SHA-256 {got} differs from the manifest's "
                                  f"{f['sha256']} (file changed)")
        present.append(f)
    ledger.require_exists()
    try:
        size = check.tree_size
        report, tables = derive(
            ledger.scan(), size, (lambda done: progress(done, done, size)) if progress else None
        )
    except EvidenceError as exc:
        check.problems.append(f"ledger: {exc}")
        return check
    root = base64.b64encode(report.root_hash).decode("ascii")
    if root != check.root_hash:
        check.problems.append(
            f"root hash: the ledger's root at tree size {check.tree_size} is {root}, the "
            f"manifest says {check.root_hash} (another ledger, or a rewritten one)"
        )
        return check
    for f in present:
        view = VIEWS[f["view"]]
        expected = _select(
            tables[view.name], view, manifest.get("since_ns"), manifest.get("until_ns")
        )
        if expected.num_rows != f["rows"]:
            check.problems.append(f"{f['name']}: the manifest says {f['rows']} rows, the "
                                  f"ledger gives {expected.num_rows}")
        problem = _compare(where / f["name"], fmt, expected)
        if problem is not None:
            check.problems.append(f"{f['name']}: {problem}")
    return check

