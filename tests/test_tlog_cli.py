"""The transparency-log commands through the real CLI: exact exit codes and output.

``checkpoint`` output is checked by a minimal, independent C2SP signed-note and
tlog-checkpoint verifier written here from the specs (c2sp.org/signed-note,
c2sp.org/tlog-checkpoint), sharing no code with ``evidence_ledger.tlog.note``.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import re
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.storage import keys as keys_mod
from evidence_ledger.storage.keys import load_signer
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.checkpoint import Checkpoint
from evidence_ledger.tlog.merkle import leaf_hash
from evidence_ledger.tlog.note import sign_note
from evidence_ledger.tlog.proof_verify import verify_consistency, verify_inclusion
from tests.helpers import DATA, run_cli

ORIGIN = "ledger.example/cli"


def spec_verify_checkpoint(note: bytes, vkey: str) -> tuple[str, int, bytes]:
    """A from-the-spec verifier: returns (origin, size, root) or raises AssertionError."""
    name, key_hex, key_b64 = vkey.split("+", 2)
    key = base64.b64decode(key_b64, validate=True)
    assert key[0] == 0x01 and len(key) == 33  # Ed25519
    assert hashlib.sha256(name.encode() + b"\n" + key).digest()[:4] == bytes.fromhex(key_hex)
    text_str = note.decode("utf-8")
    assert not re.search(r"[\x00-\x09\x0b-\x1f]", text_str)
    text, sep, sigs = text_str.rpartition("\n\n")
    assert sep and sigs.endswith("\n")
    body = (text + "\n").encode()
    verified = False
    for line in sigs[:-1].split("\n"):
        match = re.fullmatch(r"\u2014 (\S+) ([A-Za-z0-9+/]+=*)", line)
        assert match, line
        raw = base64.b64decode(match.group(2), validate=True)
        if match.group(1) == name and raw[:4] == bytes.fromhex(key_hex):
            Ed25519PublicKey.from_public_bytes(key[1:]).verify(raw[4:], body)  # raises if bad
            verified = True
    assert verified
    lines = text.split("\n")
    assert len(lines) >= 3 and lines[0] and re.fullmatch(r"0|[1-9][0-9]*", lines[1])
    root = base64.b64decode(lines[2], validate=True)
    assert len(root) == 32
    return lines[0], int(lines[1]), root


@pytest.fixture
def book(tmp_path) -> Path:
    path = tmp_path / "ledger"
    writer = EvidenceWriter(path)
    with writer.atomic():
        for i in range(21):
            writer.run_end(run_id=f"r{i}", status="completed")
    return path


@pytest.fixture
def key(tmp_path) -> tuple[Path, str]:
    path = tmp_path / "keys" / "log.key"
    path.parent.mkdir()
    result = run_cli("keygen", "--origin", ORIGIN, "--out", str(path))
    assert result.code == 0, result.err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return path, result.out.strip()


def _one_line_error(result, code: int) -> str:
    assert result.code == code, (result.code, result.out, result.err)
    assert result.err.count("\n") == 1, result.err
    return result.err


def test_keygen_prints_the_verifier_key(key):
    path, vkey = key
    assert re.fullmatch(rf"{re.escape(ORIGIN)}\+[0-9a-f]{{8}}\+[A-Za-z0-9+/]{{44}}", vkey)
    assert load_signer(path).verifier.vkey == vkey
    err = _one_line_error(run_cli("keygen", "--origin", ORIGIN, "--out", str(path)), 2)
    assert "already exists" in err


def test_keygen_writes_the_verifier_key_beside_the_key(key, tmp_path):
    path, vkey = key
    public = path.with_name("log.vkey")
    assert public.read_text() == vkey + "\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(public.stat().st_mode) == 0o644 & ~umask  # public: readable
    made = run_cli("keygen", "--origin", ORIGIN, "--out", str(tmp_path / "plain"), "--json")
    doc = json.loads(made.out)
    assert made.code == 0 and doc["key_file"] == str(tmp_path / "plain")
    assert doc["verifier_key_file"] == str(tmp_path / "plain.vkey")
    assert (tmp_path / "plain.vkey").read_text() == doc["verifier_key"] + "\n"


def test_keygen_refuses_an_existing_verifier_key_file_writing_nothing(tmp_path):
    (tmp_path / "log.vkey").write_text("mine\n")
    err = _one_line_error(
        run_cli("keygen", "--origin", ORIGIN, "--out", str(tmp_path / "log.key")), 2)
    assert "log.vkey already exists; refusing to overwrite a verifier key" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.vkey"]
    assert (tmp_path / "log.vkey").read_text() == "mine\n"


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), RuntimeError("x")])
def test_keygen_leaves_neither_file_when_the_verifier_key_write_fails(
    tmp_path, monkeypatch, error
):
    real = keys_mod.os.fsync
    calls = []

    def fail_the_second(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise error
        real(fd)

    monkeypatch.setattr(keys_mod.os, "fsync", fail_the_second)
    result = run_cli("keygen", "--origin", ORIGIN, "--out", str(tmp_path / "log.key"))
    assert result.code == 1 and result.err.count("\n") == 1, result.err
    assert len(calls) == 2 and list(tmp_path.iterdir()) == []


def test_pubkey_prints_the_verifier_key_of_a_key_file(key):
    path, vkey = key
    result = run_cli("pubkey", str(path))
    assert result.code == 0 and result.out == vkey + "\n"
    assert result.out == path.with_name("log.vkey").read_text()
    doc = json.loads(run_cli("pubkey", str(path), "--json").out)
    assert doc == {"verifier_key": vkey, "name": ORIGIN, "key_file": str(path),
                   "public_key_pem": run_cli("pubkey", str(path), "--pem").out}


def test_pubkey_of_a_file_that_is_not_a_private_key_is_bad_usage(key, tmp_path):
    path, vkey = key
    public = path.with_name("log.vkey")
    public.chmod(0o600)  # the public half, even kept private, holds no key to derive from
    text = tmp_path / "text.key"
    text.write_text("hello\n")
    text.chmod(0o600)
    for target, said in ((public, "not a private key"), (text, "not a private key"),
                         (tmp_path / "missing.key", "not found"), (tmp_path, "not a regular")):
        err = _one_line_error(run_cli("pubkey", str(target)), 2)
        assert said in err and vkey.split("+")[2] not in err, err  # no file content echoed
    path.chmod(0o644)
    assert "chmod 600" in _one_line_error(run_cli("pubkey", str(path)), 2)
    assert run_cli("pubkey").code == 2


def test_checkpoint_output_is_a_c2sp_checkpoint_and_is_stored(book, key):
    path, vkey = key
    result = run_cli("checkpoint", "--ledger", str(book), "--key", str(path))
    assert result.code == 0, result.err
    stored = (book / "checkpoints" / "00000001.note").read_bytes()
    assert result.out.encode() == stored
    origin, size, root = spec_verify_checkpoint(stored, vkey)
    assert (origin, size) == (ORIGIN, 21)
    inclusion = json.loads(run_cli("inclusion", "--ledger", str(book), "--seq", "0", "--json").out)
    assert base64.b64decode(inclusion["root"]) == root

    ok = run_cli(
        "verify-checkpoint", str(book / "checkpoints" / "00000001.note"), "--verifier-key", vkey
    )
    assert ok.code == 0 and ok.err == ""
    assert ok.out.startswith(f"checkpoint OK: origin {ORIGIN}, tree size 21, root ")
    assert ok.out.count("\n") == 1


def test_checkpoint_with_two_keys(book, key, tmp_path):
    path, vkey = key
    witness = tmp_path / "keys" / "witness.key"
    wkey = run_cli("keygen", "--origin", "witness.example/w", "--out", str(witness)).out.strip()
    result = run_cli("checkpoint", "--ledger", str(book), "--key", str(path), "--key", str(witness))
    assert result.code == 0, result.err
    assert spec_verify_checkpoint(result.out.encode(), vkey)[1] == 21
    assert result.out.count("\n\u2014 ") == 2
    note = book / "checkpoints" / "00000001.note"
    assert (
        run_cli("verify-checkpoint", str(note), "--verifier-key", wkey, "--origin", ORIGIN).code
        == 0
    )
    assert run_cli("verify-checkpoint", str(note), "--verifier-key", wkey).code == 1  # origin


def test_ledger_defaults_to_the_environment(book, key, monkeypatch):
    monkeypatch.setenv("EVIDENCE_LEDGER", str(book))
    assert run_cli("checkpoint", "--key", str(key[0])).code == 0
    assert json.loads(run_cli("consistency", "--from", "3", "--json").out)["size2"] == 21


@pytest.fixture
def note(book, key) -> Path:
    result = run_cli("checkpoint", "--ledger", str(book), "--key", str(key[0]))
    assert result.code == 0, result.err
    return book / "checkpoints" / "00000001.note"


def _tampered(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "tampered.note"
    path.write_bytes(data)
    return str(path)


def test_verify_checkpoint_rejects_a_wrong_key(note, tmp_path):
    other = run_cli("keygen", "--origin", ORIGIN, "--out", str(tmp_path / "other.key")).out.strip()
    err = _one_line_error(run_cli("verify-checkpoint", str(note), "--verifier-key", other), 1)
    assert "no signature by a given verifier key" in err


def test_verify_checkpoint_rejects_a_wrong_origin(key, tmp_path):
    path, vkey = key
    body = Checkpoint("evil.example/log", 21, bytes(32)).to_text()
    forged = _tampered(tmp_path, sign_note(body, [load_signer(path)]))
    err = _one_line_error(run_cli("verify-checkpoint", forged, "--verifier-key", vkey), 1)
    assert "checkpoint origin 'evil.example/log', want 'ledger.example/cli'" in err


def _size_last(text: str) -> str:
    return text.replace("\n21\n", "\n", 1).replace("\n\n", "\n21\n\n", 1)


def _signature_first(text: str) -> str:
    body, signatures = text.split("\n\n")
    return signatures + "\n" + body + "\n"


@pytest.mark.parametrize(
    "name, tamper, message",
    [
        ("size-line-moved-last", _size_last, "invalid signature"),
        (
            "size-line-moved-first",
            lambda t: "21\n" + t.replace("\n21\n", "\n", 1),
            "invalid signature",
        ),
        ("signature-first", _signature_first, "malformed note"),
        ("trailing-garbage", lambda t: t + "garbage\n", "malformed note"),
        ("trailing-bytes", lambda t: t + "x", "malformed note"),
        ("missing-final-newline", lambda t: t[:-1], "malformed note"),
        ("tampered-size", lambda t: t.replace("\n21\n", "\n22\n", 1), "invalid signature"),
    ],
)
def test_verify_checkpoint_rejects_tampering(note, key, tmp_path, name, tamper, message):
    text = note.read_text()
    bad = _tampered(tmp_path, tamper(text).encode())
    assert Path(bad).read_text() != text
    err = _one_line_error(run_cli("verify-checkpoint", bad, "--verifier-key", key[1]), 1)
    assert message in err


def test_verify_checkpoint_usage_errors(note, key, tmp_path):
    err = _one_line_error(
        run_cli("verify-checkpoint", str(tmp_path / "nope"), "--verifier-key", key[1]), 2
    )
    assert "not found" in err
    err = _one_line_error(
        run_cli("verify-checkpoint", str(note), "--verifier-key", "name+zz+AA"), 2
    )
    assert "verifier key" in err
    assert run_cli("verify-checkpoint", str(note)).code == 2  # --verifier-key is required


def test_checkpoint_refuses_a_world_readable_key(book, key):
    key[0].chmod(0o644)
    err = _one_line_error(run_cli("checkpoint", "--ledger", str(book), "--key", str(key[0])), 2)
    assert "chmod 600" in err
    assert not (book / "checkpoints" / "00000001.note").exists()


def test_inclusion_and_consistency_print_verifiable_proofs(book):
    leaves = [leaf_hash(r.data) for r in Ledger(book).scan()]  # type: ignore[union-attr]
    result = run_cli("inclusion", "--ledger", str(book), "--seq", "13", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert list(doc) == ["leafIdx", "treeSize", "leafHash", "root", "proof", "checked_against"]
    assert (doc["leafIdx"], doc["treeSize"]) == (13, 21)
    assert base64.b64decode(doc["leafHash"]) == leaves[13]
    proof = [base64.b64decode(h) for h in doc["proof"]]
    verify_inclusion(13, 21, leaves[13], proof, base64.b64decode(doc["root"]))

    result = run_cli("consistency", "--ledger", str(book), "--from", "5", "--to", "17", "--json")
    doc = json.loads(result.out)
    assert list(doc) == ["size1", "size2", "root1", "root2", "proof", "checked_against"]
    proof = [base64.b64decode(h) for h in doc["proof"]]
    roots = base64.b64decode(doc["root1"]), base64.b64decode(doc["root2"])
    verify_consistency(5, 17, proof, *roots)

    text = run_cli("inclusion", "--ledger", str(book), "--seq", "13").out.splitlines()
    assert text[:2] == ["leafIdx: 13", "treeSize: 21"]
    assert text[2] == f"leafHash: {base64.b64encode(leaves[13]).decode()}"
    labels = [line.split(":")[0] for line in text[4:]]
    assert labels == [f"proof[{i}]" for i in range(len(text) - 5)] + ["checked_against[0]"]
    assert text[-1] == ("checked_against[0]: root recorded in tree/root.json (tree size 21, "
                        f"{_recorded(book)})")


def test_proof_commands_usage_errors(book, tmp_path):
    assert "want 0 <= seq < tree size" in _one_line_error(
        run_cli("inclusion", "--ledger", str(book), "--seq", "21"), 2
    )
    assert "want 0 < from <= to" in _one_line_error(
        run_cli("consistency", "--ledger", str(book), "--from", "0"), 2
    )
    assert "no ledger" in _one_line_error(
        run_cli("inclusion", "--ledger", str(tmp_path / "none"), "--seq", "0"), 2
    )


def test_commands_are_listed_in_help():
    out = run_cli("--help").out
    for command in ("keygen", "checkpoint", "verify-checkpoint", "inclusion", "consistency"):
        assert command in out


def test_the_commands_that_print_data_take_json(tmp_path):
    book = tmp_path / "l"
    assert run_cli("ingest", str(DATA / "rules" / "valid.jsonl"), "--ledger", str(book)).code == 0
    made = run_cli("keygen", "--origin", "example.com/log", "--out", str(tmp_path / "k"), "--json")
    vkey = json.loads(made.out)["verifier_key"]
    signed = json.loads(run_cli("checkpoint", "--ledger", str(book), "--key",
                                str(tmp_path / "k"), "--json").out)
    (tmp_path / "head.note").write_text(signed["note"])
    checked = json.loads(run_cli("verify-checkpoint", str(tmp_path / "head.note"),
                                 "--verifier-key", vkey, "--json").out)
    assert checked["ok"] and checked["tree_size"] == signed["tree_size"]
    assert checked["root_hash"] == signed["root_hash"]
    exported = json.loads(run_cli("export", "--ledger", str(book), "--format", "jsonl",
                                  "--out", str(tmp_path / "x"), "--key", str(tmp_path / "k"),
                                  "--json").out)
    assert exported["tree_size"] == signed["tree_size"] and exported["files"]
    assert exported["signed_by"] == vkey
    checked = json.loads(run_cli("verify-export", str(tmp_path / "x"), "--verifier-key", vkey,
                                 "--json").out)
    assert checked["ok"] and checked["root_hash"] == signed["root_hash"]
    assert json.loads(run_cli("pubkey", str(tmp_path / "k"), "--json").out)["verifier_key"] == vkey
    digest = next(p for p in (book / "payloads").rglob("*") if p.is_file()).name
    redacted = json.loads(run_cli("redact", "--ledger", str(book), "--digest",
                                  f"sha256:{digest}", "--reason", "test", "--json").out)
    assert redacted["appended"] and redacted["erased"]


def test_keygen_and_pubkey_print_the_public_key_as_pem(tmp_path):
    key = tmp_path / "l.key"
    made = run_cli("keygen", "--origin", "example.com/log", "--out", str(key), "--pem")
    assert made.code == 0 and made.out.startswith("-----BEGIN PUBLIC KEY-----\n")
    assert run_cli("pubkey", str(key), "--pem").out == made.out
    as_json = json.loads(run_cli("pubkey", str(key), "--json").out)
    assert as_json["public_key_pem"] == made.out
    raw = serialization.load_pem_public_key(made.out.encode()).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert base64.b64decode(as_json["verifier_key"].split("+", 2)[2]) == b"\x01" + raw


def test_pubkey_of_a_verifier_key_file_says_it_is_public(tmp_path):
    key = tmp_path / "l.key"
    assert run_cli("keygen", "--origin", "example.com/log", "--out", str(key)).code == 0
    result = run_cli("pubkey", str(tmp_path / "l.vkey"))
    assert result.code == 2 and result.err == (
        f"evidence-ledger: error: {tmp_path}/l.vkey is not a private key file (a private key "
        "starts with PRIVATE+KEY+; a verifier key is public)\n")


def _recorded(book: Path) -> str:
    """When the root in ``book``'s tree/root.json was recorded, as a proof names it."""
    ns = json.loads((book / "tree" / "root.json").read_text())["recorded_ns"]
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
