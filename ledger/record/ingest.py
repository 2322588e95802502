"""Ingest evidence from any framework: one JSON object per line, line order = evidence order.

Each line must pass ``schemas/ingest-event.schema.json``. A file is checked whole before
anything is written: one failing line rejects the file (:class:`IngestError` with the
line number, exit code 2) and nothing is appended. A file that passes is appended as one
atomic log group (all lines or none), followed by an ``ingest`` entry holding the file's
SHA-256; ingesting the same bytes again is refused unless ``again=True``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from evidence_ledger.format import schemas
from evidence_ledger.format.digests import parse_strict_json, to_text
from evidence_ledger.format.errors import IngestError, UsageError
from evidence_ledger.format.framing import MAX_RECORD
from evidence_ledger.record.writer import EvidenceWriter, Interruption
from evidence_ledger.storage.files import open_input

DEFAULT_RUN_ID = "default"
SCHEMA = "ingest-event"
MAX_LINE = MAX_RECORD
"""Longest line taken, in bytes (an entry holds at most
:data:`evidence_ledger.format.framing.MAX_RECORD`)."""
_CHUNK = 1 << 20  # bytes read at a time
MAX_PROBLEM = 200
"""Most characters of a problem quoted in an error (a schema error may echo a huge value)."""


@dataclass(frozen=True)
class IngestResult:
    """What an ingest appended.

    Attributes:
        file_sha256: SHA-256 of the file's bytes (32 bytes).
        events: number of evidence lines appended.
        first_seq: seq of the first entry appended.
        last_seq: seq of the ``ingest`` entry that closes the group.
    """

    file_sha256: bytes
    events: int
    first_seq: int
    last_seq: int


def read_events(fh: BinaryIO, digest: Any = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Parse and validate the JSONL file ``fh`` as it is read (1 MiB at a time, one line
    held at a time); yield (line number, event) pairs. ``digest`` (a ``hashlib`` object),
    if given, is updated with every byte read. Memory is bounded by :data:`MAX_LINE`,
    whatever the file's size.

    Blank lines are skipped (they still count for line numbers).

    Raises:
        IngestError: at the first line that is longer than :data:`MAX_LINE` (found
            before it is read whole), not UTF-8, not strict JSON (duplicate keys, NaN and
            Infinity are refused), or fails the ingest schema.
    """
    for number, raw in _lines(fh, digest):
        if not raw.strip():
            continue
        try:
            event = parse_strict_json(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise _line_error(number, f"not UTF-8 ({exc.reason})") from exc
        except (ValueError, RecursionError) as exc:
            raise _line_error(number, f"not a JSON object ({exc})") from exc
        problem = schemas.first_error(SCHEMA, event) or _not_storable(event)
        if problem is not None:
            raise _line_error(number, problem)
        yield number, event


def _lines(fh: BinaryIO, digest: Any) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the newline) of every line of ``fh``, the last one too
    (empty after a final newline); a line past :data:`MAX_LINE` bytes raises as soon as
    that many are read."""
    number, pending, held = 1, bytearray(), 0
    while chunk := fh.read(_CHUNK):
        if digest is not None:
            digest.update(chunk)
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end == -1 else chunk[start:end]
            held += len(piece)
            if held > MAX_LINE:
                raise _line_error(number, f"longer than the limit of {MAX_LINE} bytes")
            pending += piece
            if end == -1:
                break
            yield number, bytes(pending)
            number, pending, held, start = number + 1, bytearray(), 0, end + 1
    yield number, bytes(pending)


def _line_error(number: int, problem: object) -> IngestError:
    """The error naming line ``number`` and its problem, cut to :data:`MAX_PROBLEM`."""
    text = str(problem)
    if len(text) > MAX_PROBLEM:
        text = text[:MAX_PROBLEM] + "..."
    return IngestError(f"line {number}: {text}", number)


def _not_storable(event: dict[str, Any]) -> str | None:
    """What the schema lets through but an entry cannot hold, or None."""
    if "time" in event and type(event["time"]) is not int:
        return "time: must be an integer (ns since the epoch, UTC)"
    try:
        json.dumps(event, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "a string holds a lone surrogate (not valid Unicode)"
    return None


def _arguments(value: str | dict[str, Any]) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _common(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": event.get("run_id", DEFAULT_RUN_ID),
        "scope": event.get("scope", []),
        "time_ns": event.get("time"),
    }


def _optional(event: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: event[name] for name in names if name in event}


def _interruption(item: dict[str, Any]) -> Interruption:
    arguments = item.get("arguments")
    return Interruption(
        call_id=item["call_id"], tool=item.get("tool"), agent=item.get("agent"),
        scope=item.get("scope"), arguments=None if arguments is None else _arguments(arguments),
    )


def _append(writer: EvidenceWriter, event: dict[str, Any]) -> None:
    kind, common = event["kind"], _common(event)
    appenders: dict[str, Callable[[], bytes]] = {
        "call": lambda: writer.call(
            call_id=event["call_id"], agent=event["agent"], tool=event["tool"],
            arguments=_arguments(event["arguments"]),
            needs_approval=event.get("needs_approval", False),
            response_id=event.get("response_id"), **common,
        ),
        "decision": lambda: writer.decision(
            call_id=event["call_id"], decision=event["decision"], approver=event["approver"],
            always=event.get("always", False),
            arguments=_arguments(event["arguments"]) if "arguments" in event else None,
            **_optional(event, "reason", "message", "agent", "tool", "run_state"), **common,
        ),
        "execution": lambda: writer.execution(
            call_id=event["call_id"], arguments=_arguments(event["arguments"]),
            result=event.get("result"),
            **_optional(event, "error", "agent", "tool", "run_state"), **common,
        ),
        "session_item": lambda: writer.session_item(
            session_id=event["session_id"], item=event.get("item"),
            op=event.get("op", "add"), **common,
        ),
        "guardrail": lambda: writer.guardrail(
            call_id=event["call_id"], guardrail=event["guardrail"],
            **_optional(event, "message", "agent", "tool"), **common,
        ),
        "run_end": lambda: writer.run_end(
            status=event["status"], **_optional(event, "run_state"), **common,
        ),
        "run_state": lambda: writer.run_state(
            run_id=common["run_id"], time_ns=common["time_ns"], state_id=event["state_id"],
            event=event["event"], parent=event.get("parent"), state=event.get("state"),
            interruptions=[_interruption(i) for i in event.get("interruptions", [])],
        ),
    }
    appenders[kind]()


def ingest_file(writer: EvidenceWriter, path: Path, *, again: bool = False) -> IngestResult:
    """Validate the JSONL file at ``path`` whole, then append it atomically: two passes,
    each reading one line at a time (the second checks the file's bytes did not change).

    Raises:
        UsageError: if the file cannot be read, or was ingested before and ``again`` is
            False.
        IngestError: if a line fails (see :func:`read_events`); nothing is appended.
        StorageError: if the append fails; nothing is appended.
    """
    digest = hashlib.sha256()
    with open_input(path) as fh:
        count = sum(1 for _ in read_events(fh, digest))  # the whole file checked first
    if not count:
        raise IngestError(f"{path}: no events", 0)
    with writer.atomic():
        if writer.already_ingested(digest.digest()) and not again:
            raise UsageError(f"{path} ({to_text(digest.digest())}) was ingested before; pass "
                             "--again to ingest it again")
        first, again_digest = writer.size, hashlib.sha256()
        with open_input(path) as fh:
            for number, event in read_events(fh, again_digest):
                try:
                    _append(writer, event)
                except UsageError as exc:
                    raise _line_error(number, exc) from exc
        if again_digest.digest() != digest.digest():  # nothing of the group is appended
            raise UsageError(f"{path} changed while it was being ingested; nothing appended")
        last = writer.size
        writer.ingest_marker(file_sha256=digest.digest(), lines=count, name=Path(path).name)
    return IngestResult(digest.digest(), count, first, last)
