"""Compliance export: files read back the same, CSV escaping, the signed manifest and
checkpoint, and verify-export with and without the ledger."""

from __future__ import annotations

import base64
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
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib.signer import SSlibKey

import evidence_ledger as el
from evidence_ledger.format.errors import UsageError
from evidence_ledger.format.framing import Record, frame, scan_bytes
from evidence_ledger.format.times import parse_time
from evidence_ledger.index import build as index_mod
from evidence_ledger.index.db import VIEWS
from evidence_ledger.index.export import export_ledger, export_statement
from evidence_ledger.index.export_check import verify_export as check_export
from evidence_ledger.index.otlp import OTEL_NAMES
from evidence_ledger.index.query import connect_read_only
from evidence_ledger.record.ingest import ingest_file
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage.keys import load_signer
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.dsse import PAYLOAD_TYPE, sign_envelope
from tests.helpers import DATA, run_cli
from tests.test_index import DAY, ODD_APPROVER, ODD_REASON, ODD_TOOL, T0, build_audit_ledger

FORMATS = ["parquet", "csv", "jsonl"]
ORIGIN = "audit.example/log"
CARRIED = ["manifest.json", "manifest.dsse.json", "entries.bin", "checkpoint.note"]


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    """The ledger's key and another key of the same name (paths; ``.vkey`` beside each)."""
    root = tmp_path_factory.mktemp("keys")
    for name in ("ledger", "other"):
        el.SigningKey.generate(root / f"{name}.key", ORIGIN)
    return {name: root / f"{name}.key" for name in ("ledger", "other")}


def vkey(key: Path) -> str:
    return el.SigningKey.verifier_key_path(key).read_text().strip()


def key_label(key: Path) -> str:
    """``name+hex8`` of a key, as a signed note's errors name it."""
    return "+".join(vkey(key).split("+")[:2])


@pytest.fixture(scope="module")
def audit(tmp_path_factory) -> Ledger:
    ledger = build_audit_ledger(tmp_path_factory.mktemp("audit"))
    index_mod.update_index(ledger)
    return ledger


@pytest.fixture(scope="module")
def exports(audit, keys, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    for fmt in FORMATS:
        export_ledger(audit, root / fmt, fmt, load_signer(keys["ledger"]))
    return {fmt: root / fmt for fmt in FORMATS}


def verify_export(path: Path, ledger: Ledger | None, key: Path):
    """The export check with ``key``'s verifier key (and ``ledger``, when given)."""
    return check_export(path, [load_signer(key).verifier], ledger)


def verify_cli(path: Path, key: Path, *extra: str):
    return run_cli("verify-export", str(path), "--verifier-key", vkey(key), *extra)


def resign(path: Path, key: Path) -> None:
    """Sign ``path``'s manifest.json as it now is with ``key``, as a forger holding the
    ledger's key would after editing it."""
    data = (path / "manifest.json").read_bytes()
    m = json.loads(data)
    statement = export_statement(data, m["tree_size"], m["root_hash"])
    (path / "manifest.dsse.json").write_bytes(
        sign_envelope(statement, load_signer(key), PAYLOAD_TYPE))


def rehash(path: Path, name: str, key: Path) -> None:
    """Put ``name``'s SHA-256 as it now is into the manifest, and sign it again."""
    m = manifest(path)
    for f in m["files"]:
        if f["name"] == name:
            f["sha256"] = "sha256:" + hashlib.sha256((path / name).read_bytes()).hexdigest()
    (path / "manifest.json").write_text(json.dumps(m))
    resign(path, key)


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
        assert m["export_format_version"] == 2
        assert (m["tree_size"], m["root_hash"]) == (verified["tree_size"], verified["root_hash"])
        assert [f["name"] for f in m["files"][:2]] == ["entries.bin", "checkpoint.note"]
        assert m["files"][0]["entries"] == m["tree_size"]
        assert [f["view"] for f in m["files"][2:]] == list(VIEWS)
        for f in m["files"]:
            data = (path / f["name"]).read_bytes()
            assert f["sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
        for f in m["files"][2:]:
            assert f["name"] == f"{f['view']}.{fmt}"
        assert sorted(p.name for p in path.iterdir()) == sorted(
            [f["name"] for f in m["files"]] + ["manifest.json", "manifest.dsse.json"]
        )


def test_the_export_carries_the_log_entries_and_a_checkpoint_signed_by_the_key(
    audit, exports, keys
):
    path = exports["jsonl"]
    m = manifest(path)
    ours = [item.data for item in scan_bytes((path / "entries.bin").read_bytes())]
    logged = [item.data for item in audit.scan() if isinstance(item, Record)]
    assert ours == logged[: m["tree_size"]] and len(ours) == m["tree_size"]
    cp = el.verify_checkpoint(path / "checkpoint.note", vkey(keys["ledger"])).checkpoint
    assert (cp.origin, cp.size, base64.b64encode(cp.root).decode()) == (
        ORIGIN, m["tree_size"], m["root_hash"])
    assert not (audit.directory / "checkpoints").exists()  # handed out, not stored


def sslib_keyid(key: Path) -> str:
    """securesystemslib's default key id of the public key of ``key`` (a key file)."""
    raw = base64.b64decode(vkey(key).split("+", 2)[2])[1:]
    return SSlibKey.from_crypto(Ed25519PublicKey.from_public_bytes(raw)).keyid


def test_the_manifest_is_signed_as_an_in_toto_statement_in_a_dsse_envelope(exports, keys):
    path = exports["csv"]
    envelope = json.loads((path / "manifest.dsse.json").read_text())
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert [s["keyid"] for s in envelope["signatures"]] == [sslib_keyid(keys["ledger"]), ""]
    statement = json.loads(base64.b64decode(envelope["payload"]))
    m = manifest(path)
    digest = hashlib.sha256((path / "manifest.json").read_bytes()).hexdigest()
    assert statement == {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "manifest.json", "digest": {"sha256": digest}}],
        "predicateType": "https://evidence-ledger.dev/export/v1",
        "predicate": {"tree_size": m["tree_size"], "root_hash": m["root_hash"]},
    }


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


def test_since_until_keep_rows_in_range_and_still_verify(audit, keys, tmp_path):
    out = tmp_path / "range"
    result = run_cli("export", "--ledger", str(audit.directory), "--format", "jsonl",
                     "--out", str(out), "--since", "2025-03-04", "--until", str(T0 + 2 * DAY),
                     "--key", str(keys["ledger"]))
    assert result.code == 0, result.err
    m = manifest(out)
    assert (m["since_ns"], m["until_ns"]) == (T0 + DAY, T0 + 2 * DAY)
    entries = [json.loads(x) for x in (out / "entries.jsonl").read_text().splitlines()]
    assert entries and all(T0 + DAY <= e["time_ns"] < T0 + 2 * DAY for e in entries)
    approvals = [json.loads(x) for x in (out / "approvals.jsonl").read_text().splitlines()]
    assert {a["approver"] for a in approvals} == {"dave@example.com", "carol@example.com"}
    assert verify_cli(out, keys["ledger"], "--ledger", str(audit.directory)).code == 0
    assert verify_cli(out, keys["ledger"]).code == 0


# -- verify-export: standing alone --------------------------------------------------------


@pytest.fixture(scope="module")
def alone(audit, keys, tmp_path_factory) -> dict[str, Path]:
    """Each export copied to a new directory (the one it was written to removed)."""
    root = tmp_path_factory.mktemp("alone")
    for fmt in FORMATS:
        export_ledger(audit, root / "made" / fmt, fmt, load_signer(keys["ledger"]))
        shutil.copytree(root / "made" / fmt, root / fmt)
    shutil.rmtree(root / "made")
    return {fmt: root / fmt for fmt in FORMATS}


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_export_copied_elsewhere_verifies_with_the_ledger_gone(audit, alone, keys, tmp_path,
                                                                   fmt):
    moved = tmp_path / "moved-away"
    audit.directory.rename(moved)
    try:
        result = verify_cli(alone[fmt], keys["ledger"])
        as_json = verify_cli(alone[fmt], keys["ledger"], "--json")
    finally:
        moved.rename(audit.directory)
    assert result.code == 0, result.out + result.err
    m = manifest(alone[fmt])
    assert f"OK: 12 files match at tree size {m['tree_size']}" in result.out
    assert f"signed by {vkey(keys['ledger'])}" in result.out
    doc = json.loads(as_json.out)
    assert as_json.code == 0 and doc["ok"] and doc["problems"] == [] and doc["ledger"] is None
    assert doc["root_hash"] == m["root_hash"] and base64.b64decode(doc["root_hash"])
    assert doc["signed_by"] == vkey(keys["ledger"])
    digest = hashlib.sha256((alone[fmt] / "manifest.json").read_bytes()).hexdigest()
    assert doc["manifest_sha256"] == f"sha256:{digest}"
    assert doc["files"] == [{"name": f["name"], "sha256": f["sha256"]} for f in m["files"]]
    assert all(f["sha256"].startswith("sha256:") for f in doc["files"])


def _changed(data: bytes) -> list[bytes]:
    """``data`` with one byte flipped: the first, the middle and the last byte (low bit),
    and one a third of the way in (high bit); an empty file gets a byte added."""
    if not data:
        return [b"\0"]
    flips = {(0, 0x01), (len(data) // 2, 0x01), (len(data) - 1, 0x01), (len(data) // 3, 0x80)}
    return [data[:at] + bytes([data[at] ^ bit]) + data[at + 1 :] for at, bit in sorted(flips)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_any_byte_changed_in_any_file_fails_with_exit_1(alone, keys, tmp_path, fmt):
    """The bar: flip one byte (first, last and two between) of every file of the export,
    the manifest and its signature included; verify-export exits 1 each time, naming the
    file. An empty file (a view without rows, in JSON Lines) gets a byte added instead."""
    work = tmp_path / fmt
    shutil.copytree(alone[fmt], work)
    names = sorted(p.name for p in work.iterdir())
    assert set(CARRIED) <= set(names) and len(names) == len(CARRIED) + len(VIEWS)
    for name in names:
        original = (work / name).read_bytes()
        for changed in _changed(original):
            (work / name).write_bytes(changed)
            result = verify_cli(work, keys["ledger"])
            said = result.out + result.err
            assert result.code == 1, (name, said)
            assert "internal error" not in said and "Traceback" not in said, (name, said)
            assert name in said, (name, said)
        (work / name).write_bytes(original)
    assert verify_cli(work, keys["ledger"]).code == 0  # every file back: it verifies again


@pytest.mark.parametrize("fmt", FORMATS)
def test_another_key_fails_with_exit_1(alone, keys, fmt):
    result = verify_cli(alone[fmt], keys["other"])
    assert result.code == 1, result.out
    problems = [line for line in result.out.splitlines() if line.startswith("mismatch")]
    assert problems == [
        f"mismatch: manifest.dsse.json: signed by a key with key id {sslib_keyid(keys['ledger'])}"
        f", not by the given key ({vkey(keys['other'])})",
        "mismatch: checkpoint.note: note has no signature by a given verifier key (signed by "
        f"{key_label(keys['ledger'])}; keys given: "
        f"{key_label(keys['other'])})",
    ]
    assert verify_cli(alone[fmt], keys["other"], "--verifier-key", vkey(keys["ledger"])).code == 0


def test_a_manifest_signed_by_another_key_than_the_checkpoint_fails(alone, keys, tmp_path):
    path = copy(alone["csv"], tmp_path)
    resign(path, keys["other"])
    result = run_cli("verify-export", str(path), "--verifier-key", vkey(keys["ledger"]),
                     "--verifier-key", vkey(keys["other"]))
    assert result.code == 1
    assert "checkpoint.note: signed by another key than the manifest" in result.out


def test_verify_export_needs_a_verifier_key(alone, keys):
    result = run_cli("verify-export", str(alone["csv"]))
    assert result.code == 2 and "--verifier-key" in result.err
    with pytest.raises(UsageError, match="at least one --verifier-key"):
        el.verify_export(alone["csv"], [])


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_forged_export_with_a_recomputed_manifest_fails(exports, keys, tmp_path, fmt):
    """Someone holding the key edits a file, re-hashes it into the manifest and signs the
    manifest again: the rows derived from the carried entries give it away."""
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
    rehash(path, name, keys["ledger"])
    check = verify_export(path, None, keys["ledger"])
    assert not check.ok
    assert check.problems == [check.problems[0]] and check.problems[0].startswith(
        f"{name}: rows differ from those the entries give"
    )
    assert verify_cli(path, keys["ledger"]).code == 1


def test_re_signed_entries_cut_short_or_with_bytes_after_them_are_named(exports, keys, tmp_path):
    path = copy(exports["jsonl"], tmp_path)
    data = (path / "entries.bin").read_bytes()
    last = [item for item in scan_bytes(data) if isinstance(item, Record)][-1]
    (path / "entries.bin").write_bytes(data[: last.offset])
    rehash(path, "entries.bin", keys["ledger"])
    n = manifest(path)["tree_size"]
    assert verify_export(path, None, keys["ledger"]).problems == [
        f"entries.bin: holds {n - 1} entries, fewer than the manifest's {n}"]
    (path / "entries.bin").write_bytes(data + data[last.offset : last.end])
    rehash(path, "entries.bin", keys["ledger"])
    assert verify_export(path, None, keys["ledger"]).problems == [
        f"entries.bin: holds more entries than the manifest's {n}"]
    (path / "entries.bin").write_bytes(data + b"junk")
    rehash(path, "entries.bin", keys["ledger"])
    assert verify_export(path, None, keys["ledger"]).problems == [
        "entries.bin: 4 bytes after its last whole entry"]


def test_entries_of_another_log_under_a_re_signed_manifest_fail_on_the_root(
    exports, keys, tmp_path
):
    other = Ledger(tmp_path / "other")
    for _ in range(3):
        ingest_file(EvidenceWriter(other), DATA / "rules" / "valid.jsonl", again=True)
    path = copy(exports["csv"], tmp_path)
    n = manifest(path)["tree_size"]
    frames = [item for item in other.scan() if isinstance(item, Record)][:n]
    assert len(frames) == n
    (path / "entries.bin").write_bytes(b"".join(frame(r.data, False) for r in frames))
    rehash(path, "entries.bin", keys["ledger"])
    (problem,) = verify_export(path, None, keys["ledger"]).problems
    assert problem.startswith(f"entries.bin: the root of its {n} entries is ")
    assert problem.endswith("(entries changed)")


def test_missing_and_unlisted_files_fail(exports, keys, tmp_path):
    path = copy(exports["csv"], tmp_path)
    (path / "guardrails.csv").unlink()
    (path / "violations_fixed.csv").write_text("rule\n")
    check = verify_export(path, None, keys["ledger"])
    assert check.problems == ["violations_fixed.csv: not listed in the manifest",
                              "guardrails.csv: missing"]
    (path / "manifest.dsse.json").unlink()
    assert verify_export(path, None, keys["ledger"]).problems[0] == (
        "manifest.dsse.json: missing (the manifest is not signed)")


def test_an_export_still_verifies_after_the_ledger_grows(audit, exports, keys, tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    shutil.copytree(audit.directory, ledger.directory)
    EvidenceWriter(ledger).run_end(run_id="r3", status="failed")
    for fmt in FORMATS:
        check = verify_export(exports[fmt], ledger, keys["ledger"])
        assert check.ok and check.ledger == str(ledger.directory)


def test_an_export_of_another_ledger_fails_on_the_root(exports, keys, tmp_path):
    other = Ledger(tmp_path / "other")
    for _ in range(3):
        ingest_file(EvidenceWriter(other), DATA / "rules" / "valid.jsonl", again=True)
    result = verify_cli(exports["jsonl"], keys["ledger"], "--ledger", str(other.directory))
    assert result.code == 1 and "mismatch: root hash: the ledger's root" in result.out
    short = Ledger(tmp_path / "short")
    ingest_file(EvidenceWriter(short), DATA / "rules" / "valid.jsonl")
    check = verify_export(exports["jsonl"], short, keys["ledger"])
    assert len(check.problems) == 1 and "larger than the ledger" in check.problems[0]
    assert check.problems[0].startswith("ledger: ")


def test_verify_export_json(audit, exports, keys):
    result = verify_cli(exports["csv"], keys["ledger"], "--ledger", str(audit.directory),
                        "--json")
    doc = json.loads(result.out)
    assert result.code == 0 and doc["ok"] and doc["problems"] == []
    assert doc["ledger"] == str(audit.directory)


@pytest.mark.parametrize(
    "content, code",
    [(None, 2), ("not json", 1), ('{"format": "xlsx"}', 1), ("[]", 1)],
)
def test_verify_export_bad_manifests(keys, tmp_path, content, code):
    if content is not None:
        (tmp_path / "manifest.json").write_text(content)
    result = verify_cli(tmp_path, keys["ledger"])
    assert result.code == code and result.err.count("\n") == 1


@pytest.mark.parametrize("edit", [
    {"format": {"a": 1}}, {"format": ["jsonl"]}, {"export_format_version": True},
    {"export_format_version": 1.0}, {"export_format_version": 1},
    {"files": [{"view": ["calls"], "name": "x"}]},
    {"files": [{"name": "entries.bin", "entries": 3, "sha256": "sha256:" + "0" * 64}]},
    {"files": [{"name": "checkpoint.note", "sha256": "sha256:00"}]},
])
def test_a_manifest_with_a_field_of_the_wrong_type_is_not_an_export(exports, keys, tmp_path,
                                                                     edit):
    copy = tmp_path / "export"
    shutil.copytree(exports["jsonl"], copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, **edit}))
    result = verify_cli(copy, keys["ledger"])
    assert result.code == 1 and "not an evidence-ledger export manifest" in result.err
    assert "internal error" not in result.err


def test_a_manifest_naming_a_path_outside_the_export_is_refused(exports, keys, tmp_path):
    path = copy(exports["csv"], tmp_path)
    m = manifest(path)
    m["files"][0]["name"] = "../../etc/passwd"
    (path / "manifest.json").write_text(json.dumps(m))
    assert verify_cli(path, keys["ledger"]).code == 1


# -- export: usage -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--format", "xlsx"], "xlsx"),
        (["--format", "csv", "--since", "yesterday"], "ISO 8601"),
        (["--format", "csv", "--since", "2025-03-05", "--until", "2025-03-04"], "before"),
    ],
)
def test_export_usage_errors(audit, keys, tmp_path, extra, message):
    result = run_cli("export", "--ledger", str(audit.directory), "--out", str(tmp_path / "o"),
                     "--key", str(keys["ledger"]), *extra)
    assert result.code == 2 and message in result.err and result.err.count("\n") == 1


def test_export_needs_a_key(audit, keys, tmp_path):
    result = run_cli("export", "--ledger", str(audit.directory), "--out", str(tmp_path / "o"),
                     "--format", "csv")
    assert result.code == 2 and "--key" in result.err and not (tmp_path / "o").exists()
    result = run_cli("export", "--ledger", str(audit.directory), "--out", str(tmp_path / "o"),
                     "--format", "csv", "--key", str(keys["ledger"]) + ".vkey")
    assert result.code == 2 and not (tmp_path / "o").exists()


def test_export_refuses_a_key_named_otherwise_than_the_ledgers_checkpoints(keys, tmp_path):
    ledger = tmp_path / "ledger"
    ingest_file(EvidenceWriter(Ledger(ledger)), DATA / "rules" / "valid.jsonl")
    other = tmp_path / "renamed.key"
    assert run_cli("keygen", "--origin", "elsewhere.example/log", "--out", str(other)).code == 0
    assert run_cli("checkpoint", "--ledger", str(ledger), "--key", str(other)).code == 0
    result = run_cli("export", "--ledger", str(ledger), "--out", str(tmp_path / "o"),
                     "--format", "csv", "--key", str(keys["ledger"]))
    assert result.code == 2 and "the ledger's checkpoints have origin" in result.err
    assert not (tmp_path / "o").exists()
    result = run_cli("export", "--ledger", str(ledger), "--out", str(tmp_path / "o"),
                     "--format", "csv", "--key", str(other), "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["signed_by"] == vkey(other)


def test_export_refuses_a_non_empty_directory(audit, keys, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    result = run_cli("export", "--ledger", str(audit.directory), "--out", str(tmp_path),
                     "--format", "csv", "--key", str(keys["ledger"]))
    assert result.code == 2 and "not an empty directory" in result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
