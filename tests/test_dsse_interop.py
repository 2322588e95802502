"""Proof bundles verify with the DSSE tools a bug report's reader already has: stock
securesystemslib given only the public key (``SSlibKey.from_crypto``, its default key id),
and our ``verify-proof`` with the ``keyid`` hints removed (DSSE v1.0: "keyid: optional,
unauthenticated hint"). go-securesystemslib and cosign are documented in docs/CLI.md (not
installable from PyPI or Debian, so not run here)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from tests.helpers import ingest, run_cli


def _public_key(vkey: str) -> Ed25519PublicKey:
    raw = base64.b64decode(vkey.split("+", 2)[2])  # name+hex8+base64
    assert raw[0] == 0x01 and len(raw) == 33  # c2sp.org/signed-note Ed25519 key
    return Ed25519PublicKey.from_public_bytes(raw[1:])


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[Path, str]:
    ledger = tmp_path / "ledger"
    ingest(ledger)
    key = tmp_path / "ledger.key"
    vkey = run_cli("keygen", "--origin", "example.com/log", "--out", str(key)).out.strip()
    out = tmp_path / "bundle.json"
    made = run_cli("prove", "--ledger", str(ledger), "--key", str(key), "--all", "--out", str(out))
    assert made.code == 0, made.err
    return out, vkey


def test_stock_securesystemslib_verifies_a_bundle_given_only_the_public_key(bundle):
    path, vkey = bundle
    envelope = Envelope.from_dict(json.loads(path.read_text()))
    pem = run_cli("pubkey", str(path.parent / "ledger.key"), "--pem").out
    assert pem.startswith("-----BEGIN PUBLIC KEY-----\n")
    public = serialization.load_pem_public_key(pem.encode())
    key = SSlibKey.from_crypto(public)  # the standard way: its default key id
    assert key == SSlibKey.from_crypto(_public_key(vkey))
    assert set(envelope.verify([key], 1)) == {key.keyid}
    assert [s.keyid for s in envelope.signatures.values()] == [key.keyid, ""]
    other = SSlibKey.from_crypto(_public_key(run_cli(
        "keygen", "--origin", "example.com/log", "--out", str(path.parent / "o.key")).out.strip()))
    with pytest.raises(VerificationError):
        envelope.verify([other], 1)


@pytest.mark.parametrize("hint", ["removed", "empty", "one signature, removed"])
def test_an_envelope_without_key_ids_passes_verify_proof(bundle, hint):
    path, vkey = bundle
    doc = json.loads(path.read_text())
    if hint.startswith("one"):
        doc["signatures"] = doc["signatures"][:1]
    for signature in doc["signatures"]:
        if hint == "empty":
            signature["keyid"] = ""
        else:
            del signature["keyid"]
    path.write_text(json.dumps(doc, indent=2) + "\n")
    result = run_cli("verify-proof", str(path), "--verifier-key", vkey)
    assert result.code == 0, result.err


def test_a_changed_copy_of_the_signature_fails_though_the_other_verifies(bundle):
    path, vkey = bundle
    doc = json.loads(path.read_text())
    raw = bytearray(base64.b64decode(doc["signatures"][1]["sig"]))
    raw[-1] ^= 0x01
    doc["signatures"][1]["sig"] = base64.b64encode(bytes(raw)).decode()
    path.write_text(json.dumps(doc, indent=2) + "\n")
    result = run_cli("verify-proof", str(path), "--verifier-key", vkey)
    assert result.code == 1 and "the envelope was changed" in result.err, result.err


def test_another_signers_signature_beside_ours_is_left_alone(bundle):
    # a trial added a third signature, by another key, with an empty key id: exit 1
    path, vkey = bundle
    doc = json.loads(path.read_text())
    forged = dict(doc["signatures"][1], sig=base64.b64encode(bytes(64)).decode())
    doc["signatures"].append(forged)  # an empty key id that no given key verifies
    path.write_text(json.dumps(doc, indent=2) + "\n")
    result = run_cli("verify-proof", str(path), "--verifier-key", vkey)
    assert result.code == 0, result.err
