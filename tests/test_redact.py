"""Redaction erases a payload; hashes, root and rules are untouched."""

import json
import os

from evidence_ledger.storage.ledger_dir import Ledger
from tests.helpers import ingest, run_cli


def _ingested(tmp_path):
    ingest(tmp_path)
    return json.loads(run_cli("verify", "--ledger", str(tmp_path), "--json").out)


def test_redaction_keeps_every_hash_and_reports_a_notice(tmp_path):
    before = _ingested(tmp_path)
    call = json.loads(run_cli("log", "--ledger", str(tmp_path), "--kind", "call", "--json").out)[0]
    digest = call["body"]["args_payload"]
    result = run_cli("redact", "--ledger", str(tmp_path), "--digest", digest,
                     "--reason", "GDPR erasure request 42", "--by", "dpo@example.com")
    assert result.code == 0, result.err
    assert Ledger(tmp_path).payloads.get(bytes.fromhex(digest[7:])) is None
    after = json.loads(run_cli("verify", "--ledger", str(tmp_path), "--json").out)
    assert after["ok"] and after["violations"] == []
    assert after["tree_size"] == before["tree_size"] + 1
    assert any("redacted" in n for n in after["notices"])
    assert not any("missing" in n for n in after["notices"])
    # the entries before the redaction are byte-identical: same leading hashes
    entries = json.loads(run_cli("log", "--ledger", str(tmp_path), "--json").out)
    assert entries[0]["hash"] == call["hash"]
    assert entries[-1]["kind"] == "redaction" and entries[-1]["body"]["by"] == "dpo@example.com"


def test_redacting_an_unknown_digest_is_bad_usage(tmp_path):
    _ingested(tmp_path)
    result = run_cli("redact", "--ledger", str(tmp_path), "--digest", "sha256:" + "0" * 64,
                     "--reason", "x")
    assert result.code == 2 and "no entry names" in result.err
    bad = run_cli("redact", "--ledger", str(tmp_path), "--digest", "abc", "--reason", "x")
    assert bad.code == 2


def test_redaction_again_finishes_an_interrupted_one(tmp_path):
    from evidence_ledger.record.writer import EvidenceWriter

    _ingested(tmp_path)
    call = json.loads(run_cli("log", "--ledger", str(tmp_path), "--kind", "call", "--json").out)[0]
    digest = call["body"]["args_payload"]
    # the redaction entry is durable, then the process died before erasing the payload
    EvidenceWriter(tmp_path).redaction(digest=bytes.fromhex(digest[7:]), reason="r")
    before = (tmp_path / "log.bin").read_bytes()
    again = run_cli("redact", "--ledger", str(tmp_path), "--digest", digest, "--reason", "r")
    assert again.code == 0 and "finished the redaction recorded at seq" in again.out, again.err
    assert Ledger(tmp_path).payloads.get(bytes.fromhex(digest[7:])) is None
    assert (tmp_path / "log.bin").read_bytes() == before


def test_a_payload_recorded_again_after_its_redaction_is_stored_again(tmp_path):
    from evidence_ledger.record.writer import EvidenceWriter

    writer = EvidenceWriter(tmp_path)
    writer.call(run_id="r", call_id="c1", agent="a", tool="t", arguments='{"secret": 1}')
    digest = next(e.body["args_payload"] for e, _ in Ledger(tmp_path).entries())
    # erased by another process while this writer stays open
    assert run_cli("redact", "--ledger", str(tmp_path), "--digest", "sha256:" + digest.hex(),
                   "--reason", "r").code == 0
    writer.call(run_id="r", call_id="c2", agent="a", tool="t", arguments='{"secret": 1}')
    assert writer.ledger.payloads.get(digest) == b'{"secret": 1}'


def test_redaction_overwrites_the_payloads_bytes_where_they_are_stored(tmp_path):
    """Once only unlinked: the bytes stayed in the file system's free blocks (and in every
    other link to the file)."""
    ledger = tmp_path / "ledger"
    _ingested(ledger)
    call = json.loads(run_cli("log", "--ledger", str(ledger), "--kind", "call", "--json").out)[0]
    digest = call["body"]["args_payload"]
    stored = Ledger(ledger).payloads.path_for(bytes.fromhex(digest[7:]))
    secret = stored.read_bytes()
    other_link = tmp_path / "other-link"
    os.link(stored, other_link)  # the same blocks, seen through another name

    assert run_cli("redact", "--ledger", str(ledger), "--digest", digest,
                   "--reason", "erasure").code == 0
    assert not stored.exists()
    assert other_link.read_bytes() == bytes(len(secret)) != secret
