"""Compliance export: files read back the same, CSV escaping, and verify-export."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evidence_ledger.format.errors import UsageError
from evidence_ledger.format.times import parse_time
from evidence_ledger.index import build as index_mod
from evidence_ledger.index.db import VIEWS
from evidence_ledger.index.export import OTEL_NAMES, export_ledger, verify_export
from evidence_ledger.index.query import connect_read_only
from evidence_ledger.record.ingest import ingest_file
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.ledger_dir import Ledger
from tests.helpers import DATA, run_cli
from tests.test_index import DAY, ODD_APPROVER, ODD_REASON, ODD_TOOL, T0, build_audit_ledger

FORMATS = ["parquet", "csv", "jsonl"]


@pytest.fixture(scope="module")
def audit(tmp_path_factory) -> Ledger:
    ledger = build_audit_ledger(tmp_path_factory.mktemp("audit"))
    index_mod.update_index(ledger)
    return ledger


@pytest.fixture(scope="module")
def exports(audit, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    for fmt in FORMATS:
        export_ledger(audit, root / fmt, fmt)
    return {fmt: root / fmt for fmt in FORMATS}


def index_table(ledger: Ledger, name: str) -> pa.Table:
    view = VIEWS[name]
    with connect_read_only(index_mod.update_index(ledger).path) as con:
        table = con.sql(f"SELECT * FROM {name} ORDER BY {view.order}").to_arrow_table()
    return table.cast(view.schema)


def copy(path: Path, tmp_path: Path) -> Path:
    target = tmp_path / path.name
    shutil.copytree(path, target)
    return target


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


# -- what is exported --------------------------------------------------------------------


def test_manifest_binds_the_files_to_the_root(audit, exports):
    verified = json.loads(run_cli("verify", "--json", "--ledger", str(audit.directory)).out)
    for fmt, path in exports.items():
        m = manifest(path)
        assert (m["tree_size"], m["root_hash"]) == (verified["tree_size"], verified["root_hash"])
        assert [f["view"] for f in m["files"]] == list(VIEWS)
        for f in m["files"]:
            data = (path / f["name"]).read_bytes()
            assert f["sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
            assert f["name"] == f"{f['view']}.{fmt}"
        assert sorted(p.name for p in path.iterdir()) == sorted(
            [f["name"] for f in m["files"]] + ["manifest.json"]
        )


def test_parquet_reads_back_the_same_with_duckdb_and_pyarrow(audit, exports):
    for name, view in VIEWS.items():
        path = exports["parquet"] / f"{name}.parquet"
        by_arrow = pq.read_table(path)
        by_duckdb = duckdb.sql(f"SELECT * FROM read_parquet('{path}')").to_arrow_table()
        assert by_arrow.schema == view.schema
        assert by_duckdb.cast(view.schema).equals(by_arrow), name
        assert by_arrow.equals(index_table(audit, name)), name
        assert by_arrow.num_rows > 0, name


def test_csv_escapes_commas_quotes_and_newlines(exports):
    text = (exports["csv"] / "approvals.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    (odd,) = [r for r in rows if r["call_id"] == "c7"]
    assert odd["approver"] == ODD_APPROVER and odd["reason"] == ODD_REASON
    assert odd["bound"] == "false" and odd["scope"] == "[]"
    assert {r["reason"] for r in rows if r["call_id"] != "c7"} == {""}
    calls = list(csv.DictReader(io.StringIO(
        (exports["csv"] / "calls.csv").read_text(encoding="utf-8"), newline="")))
    assert ODD_TOOL in {r["tool"] for r in calls}
    path = exports["csv"] / "approvals.csv"
    back = duckdb.sql(
        f"SELECT approver, reason FROM read_csv('{path}', header = true) WHERE call_id = 'c7'"
    ).fetchall()
    assert back == [(ODD_APPROVER, ODD_REASON)]


def test_csv_keeps_null_apart_from_empty_and_lists_as_json(exports):
    text = (exports["csv"] / "entries.csv").read_text(encoding="utf-8")
    header, first = text.splitlines()[:2]
    assert header.startswith('"seq","entry_hash","prev","kind","time","time_ns"')
    assert ',"[]",' in first or ',"[' in first  # refs is a JSON array
    nested = (exports["csv"] / "call_chains.csv").read_text(encoding="utf-8")
    assert '"[""ask_expert:c12""]"' in nested


def test_jsonl_uses_opentelemetry_names(audit, exports):
    lines = (exports["jsonl"] / "call_chains.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    expected = index_table(audit, "call_chains").to_pylist()
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected, strict=True):
        assert list(row) == [OTEL_NAMES.get(c, c) for c in want]
        assert row["gen_ai.tool.call.id"] == want["call_id"]
        assert row["gen_ai.tool.name"] == want["tool"] and row["gen_ai.agent.name"] == want["agent"]
        assert row["called_at"].endswith("Z") and row["called_at_ns"] == want["called_at_ns"]
        assert row["scope"] == want["scope"] and row["violations"] == want["violations"]


@pytest.mark.parametrize(
    "text, ns",
    [
        ("0", 0), ("1700000000123456789", 1700000000123456789),
        ("2025-03-03", T0), ("2025-03-03T00:00:00Z", T0), ("2025-03-03T01:00:00+01:00", T0),
        ("2025-03-04T00:00:00.000001", T0 + DAY + 1000),
    ],
)
def test_parse_time(text, ns):
    assert parse_time(text) == ns


@pytest.mark.parametrize("text", ["yesterday", "-5", "1969-12-31", "2025-13-01", ""])
def test_parse_time_refuses(text):
    with pytest.raises(UsageError):
        parse_time(text)


def test_since_until_keep_rows_in_range_and_still_verify(audit, tmp_path):
    out = tmp_path / "range"
    result = run_cli("export", "--ledger", str(audit.directory), "--format", "jsonl",
                     "--out", str(out), "--since", "2025-03-04", "--until", str(T0 + 2 * DAY))
    assert result.code == 0, result.err
    m = manifest(out)
    assert (m["since_ns"], m["until_ns"]) == (T0 + DAY, T0 + 2 * DAY)
    entries = [json.loads(x) for x in (out / "entries.jsonl").read_text().splitlines()]
    assert entries and all(T0 + DAY <= e["time_ns"] < T0 + 2 * DAY for e in entries)
    approvals = [json.loads(x) for x in (out / "approvals.jsonl").read_text().splitlines()]
    assert {a["approver"] for a in approvals} == {"dave@example.com", "carol@example.com"}
    assert run_cli("verify-export", str(out), "--ledger", str(audit.directory)).code == 0


# -- verify-export -----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_fresh_export_verifies(audit, exports, fmt):
    result = run_cli("verify-export", str(exports[fmt]), "--ledger", str(audit.directory))
    assert result.code == 0, result.out
    assert "OK" in result.out and f"tree size {manifest(exports[fmt])['tree_size']}" in result.out


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_edited_file_fails_naming_it(audit, exports, tmp_path, fmt):
    path = copy(exports[fmt], tmp_path)
    name = f"approvals.{fmt}"
    if fmt == "parquet":
        table = pq.read_table(path / name)
        approver = table["approver"].to_pylist()
        approver[0] = "mallory@example.com"
        table = table.set_column(table.schema.get_field_index("approver"), "approver",
                                 pa.array(approver))
        pq.write_table(table, path / name)
    else:
        data = (path / name).read_bytes()
        (path / name).write_bytes(data.replace(b"alice@example.com", b"mallory@example.co", 1))
    result = run_cli("verify-export", str(path), "--ledger", str(audit.directory))
    assert result.code == 1
    problems = [line for line in result.out.splitlines() if line.startswith("mismatch")]
    assert problems and all(name in line for line in problems)
    assert "SHA-256" in problems[0] and "FAIL" in result.out


@pytest.mark.parametrize("offset", [4, 800, -40])
def test_a_parquet_file_with_a_damaged_byte_fails_naming_it(audit, exports, tmp_path, offset):
    path = copy(exports["parquet"], tmp_path)
    name = "calls.parquet"
    data = bytearray((path / name).read_bytes())
    data[offset] ^= 0x5A
    (path / name).write_bytes(bytes(data))
    result = run_cli("verify-export", str(path), "--ledger", str(audit.directory))
    assert result.code == 1, result.err
    assert "internal error" not in result.err
    problems = [line for line in result.out.splitlines() if line.startswith("mismatch")]
    assert problems and all(name in line for line in problems) and "FAIL" in result.out


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_forged_export_with_a_recomputed_manifest_fails(audit, exports, tmp_path, fmt):
    """Someone edits a file and re-hashes it into the manifest: the rows give it away."""
    path = copy(exports[fmt], tmp_path)
    name = f"call_chains.{fmt}"
    table = pq.read_table(exports["parquet"] / "call_chains.parquet")
    status = ["executed" if s == "approved_not_executed" else s
              for s in table["status"].to_pylist()]
    forged = table.set_column(table.schema.get_field_index("status"), "status", pa.array(status))
    if fmt == "parquet":
        pq.write_table(forged, path / name)
    else:
        text = (path / name).read_text(encoding="utf-8")
        (path / name).write_text(text.replace("approved_not_executed", "executed"),
                                 encoding="utf-8")
    m = manifest(path)
    for f in m["files"]:
        if f["name"] == name:
            f["sha256"] = "sha256:" + hashlib.sha256((path / name).read_bytes()).hexdigest()
    (path / "manifest.json").write_text(json.dumps(m))
    check = verify_export(path, audit)
    assert not check.ok
    assert check.problems == [check.problems[0]] and check.problems[0].startswith(
        f"{name}: rows differ from the ledger's"
    )
    assert run_cli("verify-export", str(path), "--ledger", str(audit.directory)).code == 1


def test_missing_and_unlisted_files_fail(audit, exports, tmp_path):
    path = copy(exports["csv"], tmp_path)
    (path / "guardrails.csv").unlink()
    (path / "violations_fixed.csv").write_text("rule\n")
    check = verify_export(path, audit)
    assert check.problems == ["violations_fixed.csv: not listed in the manifest",
                              "guardrails.csv: missing"]


def test_an_export_still_verifies_after_the_ledger_grows(audit, exports, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    shutil.copytree(audit.directory, ledger.directory)
    EvidenceWriter(ledger).run_end(run_id="r3", status="failed")
    for fmt in FORMATS:
        assert verify_export(exports[fmt], ledger).ok


def test_an_export_of_another_ledger_fails_on_the_root(exports, tmp_path):
    other = Ledger(tmp_path / "other")
    for _ in range(3):
        ingest_file(EvidenceWriter(other), DATA / "rules" / "valid.jsonl", again=True)
    result = run_cli("verify-export", str(exports["jsonl"]), "--ledger", str(other.directory))
    assert result.code == 1 and "root hash" in result.out
    short = Ledger(tmp_path / "short")
    ingest_file(EvidenceWriter(short), DATA / "rules" / "valid.jsonl")
    check = verify_export(exports["jsonl"], short)
    assert len(check.problems) == 1 and "fewer than" in check.problems[0]


def test_verify_export_json(audit, exports):
    result = run_cli("verify-export", str(exports["csv"]), "--ledger", str(audit.directory),
                     "--json")
    doc = json.loads(result.out)
    assert result.code == 0 and doc["ok"] and doc["problems"] == []


@pytest.mark.parametrize(
    "content, code",
    [(None, 2), ("not json", 1), ('{"format": "xlsx"}', 1), ("[]", 1)],
)
def test_verify_export_bad_manifests(audit, tmp_path, content, code):
    if content is not None:
        (tmp_path / "manifest.json").write_text(content)
    result = run_cli("verify-export", str(tmp_path), "--ledger", str(audit.directory))
    assert result.code == code and result.err.count("\n") == 1


@pytest.mark.parametrize("edit", [
    {"format": {"a": 1}}, {"format": ["jsonl"]}, {"export_format_version": True},
    {"export_format_version": 1.0}, {"files": [{"view": ["calls"], "name": "x"}]},
])
def test_a_manifest_with_a_field_of_the_wrong_type_is_not_an_export(audit, exports, tmp_path,
                                                                     edit):
    copy = tmp_path / "export"
    shutil.copytree(exports["jsonl"], copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, **edit}))
    result = run_cli("verify-export", str(copy), "--ledger", str(audit.directory))
    assert result.code == 1 and "not an evidence-ledger export manifest" in result.err
    assert "internal error" not in result.err


def test_a_manifest_naming_a_path_outside_the_export_is_refused(audit, exports, tmp_path):
    path = copy(exports["csv"], tmp_path)
    m = manifest(path)
    m["files"][0]["name"] = "../../etc/passwd"
    (path / "manifest.json").write_text(json.dumps(m))
    assert run_cli("verify-export", str(path), "--ledger", str(audit.directory)).code == 1


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--format", "xlsx"], "xlsx"),
        (["--format", "csv", "--since", "yesterday"], "ISO 8601"),
        (["--format", "csv", "--since", "2025-03-05", "--until", "2025-03-04"], "before"),
    ],
)
def test_export_usage_errors(audit, tmp_path, extra, message):
    result = run_cli("export", "--ledger", str(audit.directory), "--out", str(tmp_path / "o"),
                     *extra)
    assert result.code == 2 and message in result.err and result.err.count("\n") == 1


def test_export_refuses_a_non_empty_directory(audit, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    result = run_cli("export", "--ledger", str(audit.directory), "--out", str(tmp_path),
                     "--format", "csv")
    assert result.code == 2 and "not an empty directory" in result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
