"""Verify an export on its own (``evidence-ledger verify-export``): no ledger needed.

The export's format is :mod:`evidence_ledger.index.export`'s. :func:`verify_export` checks,
and names each mismatch on a line of its own, starting with the file (or the root)
concerned:

1. ``manifest.json`` is an export manifest (else :class:`EvidenceError`: nothing in the
   directory can be checked against it);
2. ``manifest.dsse.json`` is a DSSE envelope, byte for byte as the ledger writes it,
   signed by a given verifier key, over exactly the statement
   :func:`~evidence_ledger.index.export.export_statement` gives for the manifest's bytes,
   tree size and root;
3. ``checkpoint.note`` is a checkpoint signed by that same key, at the manifest's tree
   size and root;
4. every listed file is present with the manifest's SHA-256, every view and the carried
   files are listed, and no file is unlisted;
5. ``entries.bin`` holds exactly the manifest's N entries, and their RFC 9162 root is the
   manifest's (read 1 MiB at a time: memory does not grow with the file);
6. with a ledger: the ledger's root at N is the manifest's (it is the log the export
   came from, or one that grew from it);
7. each view's file holds exactly the rows derived again from those entries (in memory,
   never from an index; the same time range applied): a Parquet file is read back and
   compared as a table, a CSV or JSON Lines file byte for byte with the rows written again;
   an ``otlp-json`` export's traces file byte for byte with the traces written again from
   those rows.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.format.framing import Damage, Record, TornTail, scan_stream
from evidence_ledger.index.build import Progress, derive
from evidence_ledger.index.db import MAX_TIME_NS, VIEWS
from evidence_ledger.index.export import (
    CHECKPOINT,
    ENTRIES,
    EXPORT_FORMAT_VERSION,
    FORMATS,
    MANIFEST,
    OTLP_JSON,
    SIGNATURE,
    TABLE_FORMATS,
    HashingFile,
    data_files,
    export_statement,
    file_sha256,
    select_rows,
    write_rows,
)
from evidence_ledger.index.otlp import TRACES, TraceCounts, write_traces
from evidence_ledger.storage.files import open_input, read_input
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.storage.log_proofs import log_root
from evidence_ledger.tlog.checkpoint import verify_checkpoint
from evidence_ledger.tlog.dsse import PAYLOAD_TYPE, check_envelope, read_envelope
from evidence_ledger.tlog.note import MAX_NOTE_BYTES, Verifier

__all__ = ["MAX_MANIFEST_BYTES", "MAX_SIGNATURE_BYTES", "ExportCheck", "verify_export"]

MAX_MANIFEST_BYTES = 1 << 20
"""Largest ``manifest.json`` read, in bytes (one holds a line per file: a few KiB)."""
MAX_SIGNATURE_BYTES = 1 << 16
"""Largest ``manifest.dsse.json`` read, in bytes (one signature over a short statement)."""
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")
_RANGE = ("since_ns", "until_ns")


@dataclass
class ExportCheck:
    """What :func:`verify_export` found.

    Attributes:
        tree_size: entries the export says it was taken at.
        root_hash: the manifest's root hash (standard base64).
        manifest_sha256: ``sha256:<hex>`` of ``manifest.json``.
        files: ``{"name", "sha256"}`` of each file the manifest lists, in its order.
        signed_by: the verifier key whose signatures over the manifest and the checkpoint
            verified (None when they did not).
        ledger: the ledger directory the export was also checked against, or None.
        problems: one line per mismatch, each naming the file (or the root) concerned.
    """

    tree_size: int
    root_hash: str
    manifest_sha256: str
    files: list[dict[str, str]]
    signed_by: str | None = None
    ledger: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """The ``verify-export --json`` output."""
        return {
            "ok": self.ok, "tree_size": self.tree_size, "root_hash": self.root_hash,
            "manifest_sha256": self.manifest_sha256, "signed_by": self.signed_by,
            "ledger": self.ledger, "files": self.files, "problems": self.problems,
        }


# -- the manifest -------------------------------------------------------------------------


def _read_manifest(directory: Path) -> tuple[bytes, dict[str, Any]]:
    """The bytes of ``manifest.json`` and the manifest they hold.

    Raises:
        UsageError: if ``directory`` is not a directory or holds no manifest.
        EvidenceError: if the manifest is not one (of this format version).
    """
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory")
    path = directory / MANIFEST
    if not path.is_file():
        raise UsageError(f"{directory} holds no {MANIFEST}: not an export")
    data = read_input(path, largest=MAX_MANIFEST_BYTES, what="export manifest")
    try:
        manifest = json.loads(data.decode("utf-8"))
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
        and all(_listed_file(f, fmt, manifest["tree_size"]) for f in manifest["files"])
    )
    if not ok:
        raise EvidenceError(f"{MANIFEST} is not an evidence-ledger export manifest (version "
                            f"{EXPORT_FORMAT_VERSION})")
    twice = sorted(n for n, c in Counter(f["name"] for f in manifest["files"]).items() if c > 1)
    if twice:
        raise EvidenceError(f"{MANIFEST} lists {twice[0]} twice (a tampered export)")
    return data, manifest


def _listed_file(f: Any, fmt: str, tree_size: int) -> bool:
    """True when ``f`` is a well-formed entry of the manifest's ``files``."""
    if not isinstance(f, dict) or not isinstance(f.get("sha256"), str):
        return False
    if not _SHA256.fullmatch(f["sha256"]):
        return False
    if f.get("name") == ENTRIES:
        return f.keys() == {"name", "entries", "sha256"} and f["entries"] == tree_size
    if f.get("name") == CHECKPOINT:
        return f.keys() == {"name", "sha256"}
    if fmt == OTLP_JSON:
        return (f.keys() == {"name", "traces", "spans", "sha256"} and f["name"] == TRACES
                and _count(f["traces"]) and _count(f["spans"]))
    view = f.get("view")
    return (
        f.keys() == {"name", "view", "rows", "sha256"} and isinstance(view, str)
        and view in VIEWS and f["name"] == f"{view}.{TABLE_FORMATS[fmt]}" and _count(f["rows"])
    )


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _time(value: Any) -> bool:
    return _count(value) and value <= MAX_TIME_NS


# -- signatures ---------------------------------------------------------------------------


def _check_signature(
    where: Path, data: bytes, manifest: dict[str, Any], verifiers: Sequence[Verifier],
    check: ExportCheck,
) -> set[str]:
    """Check ``manifest.dsse.json`` over the manifest's bytes ``data``; return the verifier
    keys whose signature verified (empty when none did)."""
    path = where / SIGNATURE
    if not path.is_file():
        check.problems.append(f"{SIGNATURE}: missing (the manifest is not signed)")
        return set()
    try:
        envelope = read_envelope(
            read_input(path, largest=MAX_SIGNATURE_BYTES, what="export signature"))
        signers = check_envelope(envelope, verifiers)
    except (UsageError, EvidenceError) as exc:  # unreadable, malformed, or not signed
        check.problems.append(f"{SIGNATURE}: {exc}")
        return set()
    if envelope.payload_type != PAYLOAD_TYPE:
        check.problems.append(f"{SIGNATURE}: payload type {envelope.payload_type[:60]!r}, "
                             f"want {PAYLOAD_TYPE}")
        return signers
    if envelope.payload != export_statement(data, manifest["tree_size"], manifest["root_hash"]):
        signed = _signed_digest(envelope.payload)
        if signed is not None and signed != check.manifest_sha256:
            check.problems.append(
                f"{MANIFEST}: SHA-256 {check.manifest_sha256} differs from the {signed} the "
                f"signature covers (manifest changed)")
        else:
            check.problems.append(
                f"{SIGNATURE}: the signed statement is not the one for this manifest, its "
                "tree size and root")
    return signers


def _signed_digest(payload: bytes) -> str | None:
    """``sha256:<hex>`` of the manifest a signed statement names, or None when it names
    none (a message's detail only: the statement was compared whole)."""
    try:
        digest = json.loads(payload)["subject"][0]["digest"]["sha256"]
    except (ValueError, TypeError, KeyError, IndexError, RecursionError):
        return None
    return f"sha256:{digest}" if isinstance(digest, str) else None


def _check_checkpoint(
    where: Path, verifiers: Sequence[Verifier], signers: set[str], check: ExportCheck,
) -> bool:
    """Check ``checkpoint.note``: signed by one of ``signers`` (any given key when that is
    empty), at the manifest's tree size and root. Returns whether it passed.

    Raises:
        KeyFormatError: if two given verifier keys are ambiguous (a usage error).
    """
    path = where / CHECKPOINT
    if not path.is_file():
        return False  # the listing says so
    try:
        note = read_input(path, largest=MAX_NOTE_BYTES, what="signed note")
    except UsageError as exc:  # not a regular file, too large, unreadable
        check.problems.append(f"{CHECKPOINT}: {exc}")
        return False
    try:
        verified = verify_checkpoint(note, verifiers)
    except EvidenceError as exc:
        check.problems.append(f"{CHECKPOINT}: {exc}")
        return False
    signed = {v.vkey for v in verifiers for s in verified.note.verified
              if (s.name, s.key_id) == (v.name, v.key_id)}
    cp = verified.checkpoint
    root = base64.b64encode(cp.root).decode("ascii")
    if signers and not signed & signers:
        check.problems.append(f"{CHECKPOINT}: signed by another key than the manifest (want "
                              "one ledger key for both)")
    elif (cp.size, root) != (check.tree_size, check.root_hash):
        check.problems.append(
            f"{CHECKPOINT}: tree size {cp.size}, root {root}; the manifest says tree size "
            f"{check.tree_size}, root {check.root_hash}")
    else:
        return True
    return False


# -- files --------------------------------------------------------------------------------


def _check_listing(where: Path, manifest: dict[str, Any], check: ExportCheck) -> set[str]:
    """Check which files are listed and present, and each one's SHA-256; return the names
    of those present."""
    fmt, files = manifest["format"], manifest["files"]
    listed = {f["name"] for f in files}
    for name in (ENTRIES, CHECKPOINT, *data_files(fmt)):
        if name not in listed:
            check.problems.append(f"{name}: missing from the manifest")
    try:
        found = set(os.listdir(where))
    except OSError as exc:
        raise UsageError(f"cannot list {where}: {exc.strerror or exc}") from exc
    for extra in sorted(found - listed - {MANIFEST, SIGNATURE}):
        check.problems.append(f"{extra}: not listed in the manifest")
    present = set()
    for f in files:
        path = where / f["name"]
        if not path.is_file():
            check.problems.append(f"{f['name']}: missing")
            continue
        got = file_sha256(path)
        if got != f["sha256"]:
            check.problems.append(f"{f['name']}: SHA-256 {got} differs from the manifest's "
                                  f"{f['sha256']} (file changed)")
        present.add(f["name"])
    return present


class _Carried:
    """The records of ``entries.bin`` before tree size ``size``, read as a stream; what is
    wrong with the file in or after them, in :attr:`problem`, once iterated."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.fh, self.size = fh, size
        self.count = 0
        self.problem: str | None = None

    def __iter__(self) -> Iterator[Record]:
        for item in scan_stream(self.fh, os.fstat(self.fh.fileno()).st_size):
            if isinstance(item, TornTail):
                self.problem = f"{item.length} bytes after its last whole entry"
            elif isinstance(item, Damage):
                self.problem = f"damaged at entry {item.index}: {item.reason}"
            elif item.index >= self.size:
                self.problem = f"holds more entries than the manifest's {self.size}"
            elif not item.crc_ok:
                self.problem = f"entry {item.index} fails its CRC-32"
            else:
                self.count += 1
                yield item
                continue
            return
        if self.count < self.size:
            self.problem = f"holds {self.count} entries, fewer than the manifest's {self.size}"


def _derive_carried(
    where: Path, check: ExportCheck, progress: Progress | None,
) -> dict[str, pa.Table] | None:
    """Every view's rows derived from ``entries.bin``, when its root is the manifest's."""
    size = check.tree_size
    try:
        fh = open_input(where / ENTRIES, None, "export entries")
    except UsageError as exc:  # replaced by something else than a file meanwhile
        check.problems.append(f"{ENTRIES}: {exc}")
        return None
    carried = _Carried(fh, size)
    try:
        with fh:
            report, tables = derive(
                carried, size, (lambda done: progress(done, done, size)) if progress else None)
    except EvidenceError as exc:  # an entry that does not decode or link, or too few
        check.problems.append(f"{ENTRIES}: {carried.problem or exc}")
        return None
    if carried.problem:
        check.problems.append(f"{ENTRIES}: {carried.problem}")
    root = base64.b64encode(report.root_hash).decode("ascii")
    if root != check.root_hash:
        check.problems.append(
            f"{ENTRIES}: the root of its {size} entries is {root}, the manifest says "
            f"{check.root_hash} (entries changed)")
        return None
    return tables


def _check_ledger(ledger: Ledger, check: ExportCheck) -> None:
    """The ledger's root at the export's tree size must be the manifest's."""
    try:
        root = base64.b64encode(log_root(ledger, check.tree_size)).decode("ascii")
    except (UsageError, EvidenceError) as exc:  # shorter than the export, or damaged
        check.problems.append(f"ledger: {exc}")
        return
    if root != check.root_hash:
        check.problems.append(
            f"root hash: the ledger's root at tree size {check.tree_size} is {root}, the "
            f"manifest says {check.root_hash} (another ledger, or a rewritten one)")


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
            theirs.validate(full=True)  # Parquet does not check its strings are UTF-8
        except (pa.ArrowException, ValueError, OSError) as exc:  # damaged data: OSError
            return f"not a Parquet file of this view's columns ({' '.join(str(exc).split())})"
        if theirs.equals(expected):
            return None
        row = _first_row_difference(expected, theirs)
        return f"rows differ from those the entries give, first at row {row}"
    return _compare_bytes(path, lambda sink: write_rows(expected, fmt, sink), "rows")


def _compare_bytes(path: Path, write: Callable[[HashingFile], Any], what: str) -> str | None:
    """None when the file at ``path`` holds exactly what ``write(sink)`` writes, else what
    differs (``what``: what the file holds, for the message)."""
    with open(path, "rb") as fh:
        sink = HashingFile(compare=fh)
        write(sink)
        trailing = fh.read(1)
    if sink.first_difference is None and not trailing:
        return None
    where = sink.first_difference if sink.first_difference is not None else sink.size
    return f"{what} differ from those the entries give, first at byte {where}"


def _check_traces(
    path: Path, f: dict[str, Any], tables: dict[str, pa.Table], since: int | None,
    until: int | None, check: ExportCheck,
) -> None:
    """Check the traces file at ``path`` (``f``: its manifest entry) against the traces
    written again from the views' rows ``tables``, the calls in the time range."""
    calls = select_rows(tables["calls"], VIEWS["calls"], since, until)
    counts = TraceCounts(0, 0)

    def write(sink: HashingFile) -> None:
        nonlocal counts
        with duckdb.connect() as con:
            for name, table in tables.items():
                con.register(name, table)
            counts = write_traces(con, calls, sink)

    problem = _compare_bytes(path, write, "traces")
    if (counts.traces, counts.spans) != (f["traces"], f["spans"]):
        check.problems.append(
            f"{f['name']}: the manifest says {f['traces']} traces of {f['spans']} spans, the "
            f"entries give {counts.traces} of {counts.spans}")
    if problem is not None:
        check.problems.append(f"{f['name']}: {problem}")


# -- verify-export ------------------------------------------------------------------------


def verify_export(
    directory: str | os.PathLike[str],
    verifiers: Sequence[Verifier],
    ledger: Ledger | None = None,
    progress: Progress | None = None,
) -> ExportCheck:
    """Check an export on its own (see the module docstring), and against ``ledger``
    when one is given.

    Args:
        directory: the export directory.
        verifiers: the ledger's verifier keys; one must have signed both the manifest and
            the checkpoint.
        ledger: also check that this ledger's root at the export's tree size is the
            export's (None: the export alone).
        progress: see :data:`evidence_ledger.index.build.Progress` (in entries, not bytes).

    Returns:
        An :class:`ExportCheck`; its ``problems`` name each file that does not match.

    Raises:
        UsageError: if no verifier key is given or two are ambiguous, ``directory`` holds
            no manifest, or ``ledger`` holds no ledger.
        EvidenceError: if the manifest is not an export manifest.
    """
    if not verifiers:
        raise UsageError("at least one --verifier-key is needed to verify an export")
    if ledger is not None:
        ledger.require_exists()
    where = Path(directory)
    data, manifest = _read_manifest(where)
    check = ExportCheck(
        manifest["tree_size"], manifest["root_hash"],
        "sha256:" + hashlib.sha256(data).hexdigest(),
        [{"name": f["name"], "sha256": f["sha256"]} for f in manifest["files"]],
        ledger=None if ledger is None else str(ledger.directory),
    )
    signers = _check_signature(where, data, manifest, verifiers, check)
    if _check_checkpoint(where, verifiers, signers, check) and not check.problems:
        check.signed_by = sorted(signers)[0]
    present = _check_listing(where, manifest, check)
    tables = _derive_carried(where, check, progress) if ENTRIES in present else None
    if ledger is not None:
        _check_ledger(ledger, check)
    if tables is None:
        return check
    since, until = manifest.get("since_ns"), manifest.get("until_ns")
    for f in manifest["files"]:
        if f["name"] == TRACES and f["name"] in present:
            _check_traces(where / TRACES, f, tables, since, until, check)
        if "view" not in f or f["name"] not in present:
            continue
        view = VIEWS[f["view"]]
        expected = select_rows(tables[view.name], view, since, until)
        if expected.num_rows != f["rows"]:
            check.problems.append(f"{f['name']}: the manifest says {f['rows']} rows, the "
                                  f"entries give {expected.num_rows}")
        problem = _compare(where / f["name"], fmt=manifest["format"], expected=expected)
        if problem is not None:
            check.problems.append(f"{f['name']}: {problem}")
    return check
