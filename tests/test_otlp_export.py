"""The otlp-json export: OpenTelemetry GenAI ``execute_tool`` spans, one trace per run,
parsed as opentelemetry-proto's ExportTraceServiceRequest, part of the signed export that
verify-export writes again and compares."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import evidence_ledger as el
from evidence_ledger.index.otlp import OTEL_NAMES, TRACES
from evidence_ledger.storage.ledger_dir import Ledger

from .helpers import run_cli
from .test_export import copy, index_table, manifest, rehash, resign, verify_cli
from .test_index import DAY, T0, build_audit_ledger

HEX_IDS = ("traceId", "spanId", "parentSpanId")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return el.run_demo(tmp_path_factory.mktemp("demo") / "ledger")


def export(ledger: Path, key: Path, out: Path, *extra: str) -> Path:
    result = run_cli("export", "--ledger", str(ledger), "--format", "otlp-json", "--out",
                     str(out), "--key", str(key), *extra)
    assert result.code == 0, result.err
    return out


@pytest.fixture(scope="module")
def demo_export(demo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export(demo.ledger.directory, demo.key.path, tmp_path_factory.mktemp("x") / "otlp")


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ledger, Path]:
    """The ledger with every chain shape and violation (tests/test_index.py) and its key."""
    root = tmp_path_factory.mktemp("audit")
    key = root / "ledger.key"
    el.SigningKey.generate(key, "audit.example/log")
    return build_audit_ledger(root / "ledger"), key


@pytest.fixture(scope="module")
def audit_export(audit, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ledger, key = audit
    return export(ledger.directory, key, tmp_path_factory.mktemp("x") / "otlp")


def requests(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (path / TRACES).read_text("utf-8").splitlines()]


def spans(path: Path) -> list[dict[str, Any]]:
    return [span for request in requests(path) for rs in request["resourceSpans"]
            for ss in rs["scopeSpans"] for span in ss["spans"]]


def attributes(item: dict[str, Any]) -> dict[str, Any]:
    """An OTLP/JSON attribute list as a dict of plain values."""
    def plain(value: dict[str, Any]) -> Any:
        (kind, v), = value.items()
        if kind == "arrayValue":
            return [plain(x) for x in v["values"]]
        return int(v) if kind == "intValue" else v
    return {a["key"]: plain(a["value"]) for a in item["attributes"]}


def by_call(path: Path) -> dict[str, dict[str, Any]]:
    return {attributes(s)["gen_ai.tool.call.id"]: s for s in spans(path)}


def demo_rows(demo: Any, view: str) -> list[dict[str, Any]]:
    return index_table(Ledger(demo.ledger.directory), view).to_pylist()


def protobuf_json(request: dict[str, Any]) -> str:
    """The request with its hex ids in base64, as the Protobuf JSON mapping has bytes."""
    for rs in request["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in HEX_IDS:
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json.dumps(request)


# -- the demo ----------------------------------------------------------------------------


def test_demo_export_parses_as_export_trace_service_requests(demo, demo_export):
    parsed = [json_format.Parse(protobuf_json(r), ExportTraceServiceRequest())
              for r in requests(demo_export)]
    assert len(parsed) == 1  # the demo is one run: one trace, one line
    proto_spans = [s for r in parsed for rs in r.resource_spans for ss in rs.scope_spans
                   for s in ss.spans]
    count = run_cli("query", "--ledger", str(demo.ledger.directory), "--json",
                    "SELECT count(*) AS n FROM calls")
    assert count.code == 0, count.err
    assert len(proto_spans) == json.loads(count.out)[0]["n"] == 6
    for span in proto_spans:
        keys = {a.key: a.value for a in span.attributes}
        assert keys["gen_ai.tool.call.id"].string_value
        assert keys["gen_ai.operation.name"].string_value == "execute_tool"
        assert span.name == f"execute_tool {keys['gen_ai.tool.name'].string_value}"
        assert span.kind == span.SPAN_KIND_INTERNAL
        assert span.start_time_unix_nano <= span.end_time_unix_nano
    assert parsed[0].resource_spans[0].resource.attributes[0].key == "service.name"


def test_demo_export_is_signed_and_verifies(demo, demo_export):
    m = manifest(demo_export)
    assert m["format"] == "otlp-json"
    assert [f["name"] for f in m["files"]] == ["entries.bin", "checkpoint.note", TRACES]
    assert {k: m["files"][2][k] for k in ("traces", "spans")} == {"traces": 1, "spans": 6}
    digest = hashlib.sha256((demo_export / TRACES).read_bytes()).hexdigest()
    assert m["files"][2]["sha256"] == f"sha256:{digest}"
    done = verify_cli(demo_export, demo.key.path)
    assert done.code == 0, done.out
    assert done.out.startswith("OK: 3 files match at tree size 35")
    against = verify_cli(demo_export, demo.key.path, "--ledger", str(demo.ledger.directory))
    assert against.code == 0, against.out


def test_a_byte_changed_in_the_traces_fails(demo, demo_export, tmp_path):
    target = copy(demo_export, tmp_path)
    data = bytearray((target / TRACES).read_bytes())
    at = data.index(b"c-credit")
    data[at] = ord("x")  # a call id changed: x-credit
    (target / TRACES).write_bytes(bytes(data))
    done = verify_cli(target, demo.key.path)
    assert done.code == 1
    assert f"{TRACES}: SHA-256 sha256:" in done.out and "(file changed)" in done.out
    assert f"{TRACES}: traces differ from those the entries give, first at byte {at}" in done.out
    # a forger holding the key who hashes and signs the manifest again is still caught
    rehash(target, TRACES, demo.key.path)
    forged = verify_cli(target, demo.key.path)
    assert forged.code == 1
    assert forged.out.splitlines() == [
        f"mismatch: {TRACES}: traces differ from those the entries give, first at byte {at}",
        "FAIL"]


def test_a_traces_file_missing_or_a_view_file_listed_fails(demo, demo_export, tmp_path):
    gone = copy(demo_export, tmp_path / "gone")
    (gone / TRACES).unlink()
    done = verify_cli(gone, demo.key.path)
    assert done.code == 1 and f"mismatch: {TRACES}: missing" in done.out
    extra = copy(demo_export, tmp_path / "extra")
    (extra / "calls.jsonl").write_text("")
    done = verify_cli(extra, demo.key.path)
    assert done.code == 1 and "mismatch: calls.jsonl: not listed in the manifest" in done.out


def test_a_span_count_changed_in_the_signed_manifest_fails(demo, demo_export, tmp_path):
    target = copy(demo_export, tmp_path)
    m = manifest(target)
    m["files"][2]["spans"] = 7
    (target / "manifest.json").write_text(json.dumps(m))
    resign(target, demo.key.path)
    done = verify_cli(target, demo.key.path)
    assert done.code == 1
    assert done.out.splitlines() == [
        f"mismatch: {TRACES}: the manifest says 1 traces of 7 spans, the entries give 1 of 6",
        "FAIL"]


def test_nested_call_is_a_child_of_its_agent_tool_call(demo_export):
    calls = by_call(demo_export)
    billing, credit = calls["c-billing"], calls["c-credit"]
    assert credit["parentSpanId"] == billing["spanId"]
    assert credit["traceId"] == billing["traceId"]
    assert attributes(credit)["evidence_ledger.scope"] == ["ask_billing:c-billing"]
    assert attributes(credit)["gen_ai.agent.name"] == "billing"
    assert [c for c, s in calls.items() if "parentSpanId" in s] == ["c-credit"]


def test_ids_are_hex_nonzero_and_derived_from_run_and_entry(demo, demo_export):
    calls = {r["call_id"]: r for r in demo_rows(demo, "calls")}
    seen = set()
    for call_id, span in by_call(demo_export).items():
        row = calls[call_id]
        assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16
        assert int(span["traceId"], 16) and int(span["spanId"], 16)
        assert span["traceId"] == hashlib.sha256(row["run_id"].encode()).hexdigest()[:32]
        assert span["spanId"] == row["entry_hash"].removeprefix("sha256:")[:16]
        assert attributes(span)["evidence_ledger.entry_hash"] == row["entry_hash"]
        assert attributes(span)["evidence_ledger.arguments_digest"] == row["arguments_digest"]
        assert int(span["startTimeUnixNano"]) == row["called_at_ns"]
        seen.add(span["spanId"])
    assert len(seen) == len(calls)


def test_times_status_and_decisions_of_the_demo(demo, demo_export):
    chains = {r["call_id"]: r for r in demo_rows(demo, "call_chains")}
    calls = by_call(demo_export)
    refund = calls["c-refund-1"]
    assert int(refund["endTimeUnixNano"]) == chains["c-refund-1"]["executed_at_ns"]
    assert "status" not in refund
    assert [(e["name"].removeprefix("evidence_ledger."), attributes(e)["evidence_ledger.seq"])
            for e in refund["events"]] == [
        ("session_item", 8), ("decision", 15), ("execution", 22), ("session_item", 25)]
    decision = [e for e in refund["events"] if e["name"] == "evidence_ledger.decision"]
    assert len(decision) == 1
    assert int(decision[0]["timeUnixNano"]) == chains["c-refund-1"]["decided_at_ns"]
    assert {k: v for k, v in attributes(decision[0]).items()
            if k.startswith("evidence_ledger.approval.")} == {
        "evidence_ledger.approval.decision": "approve",
        "evidence_ledger.approval.always": True,
        "evidence_ledger.approval.approver": "alice",
        "evidence_ledger.approval.reason": "within policy",
        "evidence_ledger.approval.bound": True,
    }
    # the second refund ran under alice's "always": the span says so, with no event
    sticky = attributes(calls["c-refund-2"])
    assert (sticky["evidence_ledger.approval.approver"], sticky["evidence_ledger.approval.sticky"]
            ) == ("alice", True)
    assert "evidence_ledger.decision" not in [e["name"] for e in calls["c-refund-2"]["events"]]
    email = calls["c-email"]  # rejected: never ran
    assert email["startTimeUnixNano"] == email["endTimeUnixNano"]
    assert email["status"] == {"code": 2, "message": "not executed (rejected)"}
    assert attributes(email)["error.type"] == "rejected"
    assert attributes(email)["evidence_ledger.approval.approver"] == "alice"
    outputs = [attributes(e) for e in email["events"]
               if e["name"] == "evidence_ledger.session_item"]
    assert [o["evidence_ledger.session_item.type"] for o in outputs] == [
        "function_call", "function_call_output"]
    assert outputs[1]["evidence_ledger.session_item.output_digest"].startswith("sha256:")
    assert attributes(email)["gen_ai.conversation.id"] == "support-4711"


# -- every chain shape, violations, several runs, a time range ---------------------------


def test_violations_are_span_attributes_and_events(audit, audit_export):
    book, key = audit
    chains = index_table(book, "call_chains").to_pylist()
    violations = index_table(book, "violations").to_pylist()
    out = spans(audit_export)
    assert len(out) == len(chains) == len(index_table(book, "calls"))
    by_seq = {attributes(s)["evidence_ledger.seq"]: s for s in out}
    broke = [c for c in chains if c["violations"]]
    assert broke  # the audit ledger breaks rules on purpose
    for chain in broke:
        span = by_seq[chain["call_seq"]]
        assert attributes(span)["evidence_ledger.violation.rule"] == chain["violations"]
        assert span["status"]["code"] == 2
        assert f"violates {', '.join(chain['violations'])}" in span["status"]["message"]
        events = [attributes(e) for e in span["events"]
                  if e["name"] == "evidence_ledger.violation"]
        want = [(v["rule"], v["detail"]) for v in violations if v["call_seq"] == chain["call_seq"]]
        assert [(e["evidence_ledger.violation.rule"], e["evidence_ledger.violation.detail"])
                for e in events] == want
    assert verify_cli(audit_export, key).code == 0


def test_one_trace_per_run(audit, audit_export):
    calls = index_table(audit[0], "calls").to_pylist()
    runs = list(dict.fromkeys(c["run_id"] for c in calls))
    lines = requests(audit_export)
    assert len(lines) == len(runs) == manifest(audit_export)["files"][2]["traces"]
    for run, line in zip(runs, lines, strict=True):
        trace = hashlib.sha256(run.encode()).hexdigest()[:32]
        in_line = line["resourceSpans"][0]["scopeSpans"][0]["spans"]
        assert {s["traceId"] for s in in_line} == {trace}
        assert [attributes(s)["evidence_ledger.run_id"] for s in in_line] == [
            c["run_id"] for c in calls if c["run_id"] == run]
        for span in in_line:  # events in log order
            seqs = [attributes(e)["evidence_ledger.seq"] for e in span["events"]]
            assert seqs == sorted(seqs)


def test_a_time_range_keeps_the_calls_in_it(audit, tmp_path):
    ledger, key = audit
    out = export(ledger.directory, key, tmp_path / "range", "--since", "2025-03-04",
                 "--until", str(T0 + 2 * DAY))
    calls = index_table(ledger, "calls").to_pylist()
    want = [c["entry_hash"] for c in calls if T0 + DAY <= c["called_at_ns"] < T0 + 2 * DAY]
    assert want and len(want) < len(calls)
    assert [attributes(s)["evidence_ledger.entry_hash"] for s in spans(out)] == want
    assert manifest(out)["files"][2]["spans"] == len(want)
    assert verify_cli(out, key).code == 0


def test_jsonl_export_takes_the_genai_names(audit, tmp_path):
    ledger, key = audit
    out = tmp_path / "jsonl"
    assert run_cli("export", "--ledger", str(ledger.directory), "--format", "jsonl", "--out",
                   str(out), "--key", str(key)).code == 0
    items = [json.loads(x) for x in (out / "session_items.jsonl").read_text().splitlines()]
    assert OTEL_NAMES["session_id"] == "gen_ai.conversation.id"
    assert items and all("gen_ai.conversation.id" in i and "session_id" not in i
                         for i in items)
    calls = [json.loads(x) for x in (out / "calls.jsonl").read_text().splitlines()]
    assert {"gen_ai.tool.call.id", "gen_ai.tool.name", "gen_ai.agent.name",
            "gen_ai.response.id"} <= calls[0].keys()
    assert not {"call_id", "tool", "agent", "response_id"} & calls[0].keys()
    assert verify_cli(out, key).code == 0
