"""The export's OpenTelemetry form: GenAI attribute names for the views' columns, and the
traces file of ``export --format otlp-json``.

Names come from ``opentelemetry-semantic-conventions`` (the GenAI attributes, incubating;
the version is pinned in pyproject.toml, so an exporter and a verifier use the same
names), and ours are namespaced ``evidence_ledger.*`` (docs/QUERIES.md "Exports" lists
them all).

:data:`TRACES` is the OpenTelemetry specification's OTLP file format ("OpenTelemetry
Protocol File Exporter": JSON Lines, each line a ``TracesData``, which has the fields of
an OTLP ``ExportTraceServiceRequest``): one line per run, in the order of the runs' first
calls, in OTLP/JSON (the Protobuf JSON mapping of opentelemetry-proto, with trace and span
ids as lowercase hex, 64-bit integers as decimal strings and enums as integers; the
OpenTelemetry Collector's ``otlpjsonfile`` receiver reads such a file)::

    {"resourceSpans":[{"resource":{"attributes":[service.name "evidence-ledger"]},
      "scopeSpans":[{"scope":{"name":"evidence-ledger"},"spans":[<span>, ...]}]}]}

A run is one trace (trace id: the first 16 bytes of SHA-256 of its ``run_id``, UTF-8);
each row of the ``calls`` view is one ``execute_tool`` span (span id: the first 8 bytes
of the call entry's hash), in ``seq`` order, INTERNAL, named ``execute_tool <tool>``:

- it starts at the call's time and ends at its first execution's, or at the call's own
  time when it never ran (its ``status`` then says ERROR, ``not executed (<status>)``, and
  ``error.type`` is the ``call_chains`` status: ``rejected``, ``blocked``, ...); a tool
  error in that execution or a rule the call broke is ERROR too, else the status is unset;
- its parent is the span of the agent-as-tool call its ``scope`` names last (a call in the
  same run at the scope before it, whose ``<tool>:<call_id>`` is that edge), if any;
- its attributes are the call's (GenAI names, and ours pointing back to the entry);
- its events are the entries the rules attribute to the call (decisions, executions,
  session items, guardrail blocks, guard verdicts) and the rules it broke, in log order,
  each at its entry's time (a violation without one: at the span's end).

Times are ns since the epoch (UTC), those past 2^63 ns too (from the TIMESTAMP column,
to the microsecond). The spans are those of the calls given (the export's time range
selects calls by their time); each carries all its events. Memory: DuckDB makes the rows
(spilling to disk as it needs), read and written :data:`BATCH` spans at a time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GEN_AI_AGENT_NAME,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
    GEN_AI_RESPONSE_ID,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
    GenAiOperationNameValues,
)
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE, ErrorTypeValues
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME

__all__ = [
    "BATCH",
    "OTEL_NAMES",
    "TRACES",
    "TraceCounts",
    "span_id",
    "trace_id",
    "write_traces",
]

TRACES = "traces.otlp.jsonl"
"""The traces file's name in an export."""
BATCH = 1000
"""Spans read from DuckDB and written at a time."""
OTEL_NAMES = {
    "call_id": GEN_AI_TOOL_CALL_ID,
    "tool": GEN_AI_TOOL_NAME,
    "agent": GEN_AI_AGENT_NAME,
    "session_id": GEN_AI_CONVERSATION_ID,
    "response_id": GEN_AI_RESPONSE_ID,
}
"""Column -> its OpenTelemetry GenAI attribute name (the keys of the JSON Lines export)."""

_NAME = "evidence-ledger"
_EXECUTE_TOOL = GenAiOperationNameValues.EXECUTE_TOOL.value
_SPAN_KIND_INTERNAL = 1
_STATUS_ERROR = 2
_NS = "evidence_ledger."


@dataclass(frozen=True)
class TraceCounts:
    """What :func:`write_traces` wrote: ``traces`` (runs, one line each) and ``spans``
    (calls)."""

    traces: int
    spans: int


def trace_id(run_id: str) -> str:
    """The trace id of run ``run_id``: the first 16 bytes of SHA-256 of its UTF-8 bytes,
    as 32 lowercase hex digits."""
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:32]


def span_id(entry_hash: str) -> str:
    """The span id of the call whose entry hash is ``entry_hash`` (``sha256:<hex>``): its
    first 8 bytes, as 16 lowercase hex digits (all zero only for a hash that starts with
    64 zero bits, which no one can make)."""
    return entry_hash.removeprefix("sha256:")[:16]


# -- the rows -----------------------------------------------------------------------------


def _ns(column: str) -> str:
    """SQL: the time of a TIMESTAMP column ``column`` in ns (HUGEINT): its ``_ns`` column,
    or, past 2^63-1 ns where that is NULL, the TIMESTAMP's microseconds."""
    return f"coalesce({column}_ns::HUGEINT, epoch_us({column})::HUGEINT * 1000)"


@dataclass(frozen=True)
class _Events:
    """The span events one view gives: ``name``, the view, the SQL of their time, and
    ``attributes`` (attribute name -> SQL expression over the view's row ``r``)."""

    name: str
    view: str
    time: str
    attributes: tuple[tuple[str, str], ...]


_ENTRY = ((f"{_NS}entry_hash", "r.entry_hash"), (f"{_NS}seq", "r.seq"))
_EVENTS = (
    _Events(f"{_NS}decision", "approvals", _ns("r.decided_at"), (*_ENTRY,
        (f"{_NS}approval.decision", "r.decision"), (f"{_NS}approval.always", "r.always"),
        (f"{_NS}approval.approver", "r.approver"), (f"{_NS}approval.reason", "r.reason"),
        (f"{_NS}arguments_digest", "r.arguments_digest"), (f"{_NS}approval.bound", "r.bound"),
        (f"{_NS}message_digest", "r.message_digest"))),
    _Events(f"{_NS}execution", "executions", _ns("r.executed_at"), (*_ENTRY,
        (f"{_NS}arguments_digest", "r.arguments_digest"),
        (f"{_NS}execution.arguments_match", "r.arguments_match"),
        (f"{_NS}execution.result_digest", "r.result_digest"),
        (f"{_NS}execution.error", "r.error"))),
    _Events(f"{_NS}session_item", "session_items", _ns("r.recorded_at"), (*_ENTRY,
        (GEN_AI_CONVERSATION_ID, "r.session_id"), (f"{_NS}session_item.op", "r.op"),
        (f"{_NS}session_item.type", "r.item_type"),
        (f"{_NS}session_item.item_digest", "r.item_digest"),
        (f"{_NS}session_item.output_digest", "r.output_digest"))),
    _Events(f"{_NS}guardrail", "guardrails", _ns("r.blocked_at"), (*_ENTRY,
        (f"{_NS}guardrail.name", "r.guardrail"), (f"{_NS}message_digest", "r.message_digest"))),
    _Events(f"{_NS}guard_verdict", "guard_verdicts", _ns("r.judged_at"), (*_ENTRY,
        (f"{_NS}guard.verdict", "r.verdict"), (f"{_NS}guard.mode", "r.mode"),
        (f"{_NS}guard.code", "r.code"), (f"{_NS}guard.reason", "r.reason"),
        (f"{_NS}arguments_digest", "r.arguments_digest"),
        (f"{_NS}guard.policy_digest", "r.policy_digest"))),
    _Events(f"{_NS}violation", "violations",
            f"coalesce({_ns('r.time')}, (SELECT {_ns('e.time')} FROM entries e "
            "WHERE e.seq = r.seq))", (
        (f"{_NS}seq", "r.seq"), (f"{_NS}violation.rule", "r.rule"),
        (f"{_NS}violation.detail", "r.detail"))),
)
"""Every kind of span event, in the order events of one entry are listed."""


def _events_sql() -> str:
    selects = []
    for number, events in enumerate(_EVENTS):
        attributes = ", ".join(f"'{key}': {sql}" for key, sql in events.attributes)
        nth = "r.finding_no" if events.view == "violations" else "0"
        selects.append(
            f"SELECT r.call_seq, r.seq, {number} AS source, {nth} AS nth, "
            f"'{events.name}' AS name, {events.time} AS t, "
            f"to_json({{{attributes}}}) AS attributes "
            f"FROM {events.view} r WHERE r.call_seq IS NOT NULL")
    return " UNION ALL ".join(selects)


_SPANS_SQL = f"""
WITH events AS ({_events_sql()}),
first_execution AS (
    SELECT call_seq, {_ns('executed_at')} AS t, error FROM executions
    WHERE call_seq IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY call_seq ORDER BY seq) = 1),
conversation AS (
    SELECT call_seq, session_id FROM session_items
    WHERE call_seq IS NOT NULL AND session_id IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY call_seq ORDER BY seq) = 1),
parent AS (
    SELECT c.seq, arg_min(p.entry_hash, p.seq) AS entry_hash
    FROM span_calls c JOIN calls p ON p.run_id = c.run_id
        AND p.scope = c.scope[1:len(c.scope) - 1] AND p.tool || ':' || p.call_id = c.scope[-1]
    WHERE len(c.scope) > 0 GROUP BY c.seq),
runs AS (SELECT run_id, min(seq) AS first FROM span_calls GROUP BY run_id)
SELECT c.seq, c.entry_hash, c.run_id, c.scope, c.call_id, c.agent, c.tool,
    c.arguments_digest, c.needs_approval, {_ns('c.called_at')} AS start,
    x.t AS executed, x.error, ch.status, ch.decision, ch.sticky, ch.approver,
    ch.executions, ch.persisted, ch.violations, p.entry_hash AS parent,
    s.session_id,
    (SELECT list({{'name': e.name, 't': e.t, 'attributes': e.attributes}}
                 ORDER BY e.seq NULLS LAST, e.source, e.nth)
     FROM events e WHERE e.call_seq = c.seq) AS events
FROM span_calls c JOIN runs USING (run_id)
LEFT JOIN call_chains ch ON ch.call_seq = c.seq
LEFT JOIN first_execution x ON x.call_seq = c.seq
LEFT JOIN conversation s ON s.call_seq = c.seq
LEFT JOIN parent p ON p.seq = c.seq
ORDER BY runs.first, c.seq
"""
"""One row per call of ``span_calls`` (the calls given), run by run: the call, its
``call_chains`` row, its first execution, first session, parent call and events."""


def _rows(con: duckdb.DuckDBPyConnection, calls: pa.Table) -> Iterator[list[dict[str, Any]]]:
    """The rows of :data:`_SPANS_SQL` over ``calls``, :data:`BATCH` at a time, as dicts."""
    con.register("span_calls", calls)
    try:
        cursor = con.execute(_SPANS_SQL)
        names = [d[0] for d in cursor.description]
        while batch := cursor.fetchmany(BATCH):
            yield [dict(zip(names, row, strict=True)) for row in batch]
    finally:
        con.unregister("span_calls")


# -- OTLP/JSON ----------------------------------------------------------------------------


def _value(value: Any) -> dict[str, Any]:
    """An OTLP ``AnyValue`` in OTLP/JSON."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": value}


def _attributes(pairs: Any) -> list[dict[str, Any]]:
    """OTLP ``KeyValue`` list of ``(key, value)`` pairs, without those valued None or
    ``[]``."""
    return [{"key": k, "value": _value(v)} for k, v in pairs if v is not None and v != []]


def _status(row: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The span's status and its ``error.type`` (None: none)."""
    problems, error_type = [], None
    if row["status"] != "executed":
        problems.append(f"not executed ({row['status']})")
        error_type = row["status"]
    elif row["error"] is not None:
        problems.append(f"tool error: {row['error']}")
        error_type = ErrorTypeValues.OTHER.value
    if row["violations"]:
        problems.append(f"violates {', '.join(row['violations'])}")
    if not problems:
        return {}, None
    return {"code": _STATUS_ERROR, "message": "; ".join(problems)}, error_type


def _span(row: dict[str, Any]) -> dict[str, Any]:
    """One call's span (see the module docstring)."""
    status, error_type = _status(row)
    start = row["start"]
    end = start if row["executed"] is None else row["executed"]
    span: dict[str, Any] = {
        "traceId": trace_id(row["run_id"]), "spanId": span_id(row["entry_hash"])}
    if row["parent"] is not None:
        span["parentSpanId"] = span_id(row["parent"])
    decided = row["decision"] is not None
    span.update({
        "name": f"{_EXECUTE_TOOL} {row['tool']}",
        "kind": _SPAN_KIND_INTERNAL,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": _attributes([
            (GEN_AI_OPERATION_NAME, _EXECUTE_TOOL),
            (GEN_AI_TOOL_NAME, row["tool"]),
            (GEN_AI_TOOL_CALL_ID, row["call_id"]),
            (GEN_AI_AGENT_NAME, row["agent"]),
            (GEN_AI_CONVERSATION_ID, row["session_id"]),
            (ERROR_TYPE, error_type),
            (f"{_NS}entry_hash", row["entry_hash"]),
            (f"{_NS}seq", row["seq"]),
            (f"{_NS}run_id", row["run_id"]),
            (f"{_NS}scope", row["scope"]),
            (f"{_NS}arguments_digest", row["arguments_digest"]),
            (f"{_NS}needs_approval", row["needs_approval"]),
            (f"{_NS}status", row["status"]),
            (f"{_NS}approval.decision", row["decision"]),
            (f"{_NS}approval.approver", row["approver"]),
            (f"{_NS}approval.sticky", row["sticky"] if decided else None),
            (f"{_NS}executions", row["executions"]),
            (f"{_NS}persisted", row["persisted"]),
            (f"{_NS}violation.rule", row["violations"]),
        ]),
        "events": [
            {"timeUnixNano": str(end if e["t"] is None else e["t"]), "name": e["name"],
             "attributes": _attributes(json.loads(e["attributes"]).items())}
            for e in row["events"] or ()
        ],
    })
    if status:
        span["status"] = status
    return span


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_HEAD, _TAIL = _json({"resourceSpans": [{
    "resource": {"attributes": _attributes([(SERVICE_NAME, _NAME)])},
    "scopeSpans": [{"scope": {"name": _NAME}, "spans": ["SPANS"]}],
}]}).split('"SPANS"')
"""A request's line before and after its spans."""


def write_traces(con: duckdb.DuckDBPyConnection, calls: pa.Table, sink: Any) -> TraceCounts:
    """Write the traces of ``calls`` to ``sink`` as :data:`TRACES` holds them (see the
    module docstring).

    Args:
        con: a DuckDB connection where the views of
            :data:`evidence_ledger.index.db.VIEWS` are tables (an index, or the views
            derived again, registered under their names).
        calls: the ``calls`` rows to make spans of (the view's schema).
        sink: a binary file object; written a batch of spans at a time (UTF-8).

    Returns:
        The runs and spans written.

    Raises:
        duckdb.Error: if DuckDB fails to read the views.
    """
    run, traces, spans = None, 0, 0
    for batch in _rows(con, calls):
        parts = []
        for row in batch:
            if row["run_id"] != run:
                parts.append(_TAIL + "\n" if run is not None else "")
                parts.append(_HEAD)
                run, traces = row["run_id"], traces + 1
            else:
                parts.append(",")
            parts.append(_json(_span(row)))
            spans += 1
        sink.write("".join(parts).encode("utf-8"))
    if run is not None:
        sink.write((_TAIL + "\n").encode("utf-8"))
    return TraceCounts(traces, spans)
