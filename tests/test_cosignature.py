"""Witness cosignatures (c2sp.org/tlog-cosignature v1.0.1, Ed25519) and quorums of them.

The known answer (``tests/vectors/cosignature/known-answer.json``) is checked against the
spec text quoted below with code of this file's own (hashlib, cryptography), sharing none
with ``evidence_ledger.tlog.cosignature``; a real witness's cosignature of a public log's
checkpoint (``interop-remora.json``) must verify too.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.tlog.checkpoint import CheckpointFormatError
from evidence_ledger.tlog.cosignature import (
    CosignatureVerifier,
    Cosigner,
    WitnessPolicy,
    check_quorum,
    cosigned_message,
)
from evidence_ledger.tlog.note import KeyFormatError, NoteSignature, Signer, parse_note

VECTORS = Path(__file__).parent / "vectors"
KAT = json.loads((VECTORS / "cosignature" / "known-answer.json").read_text())
REMORA = json.loads((VECTORS / "cosignature" / "interop-remora.json").read_text())

# c2sp.org/tlog-cosignature v1.0.1, quoted (git tag tlog-cosignature/v1.0.1 of C2SP/C2SP):
SPEC_KEY_ID = """The key ID MUST be

    SHA-256(<name> || "\\n" || 0x04 || 32-byte Ed25519 cosigner public key)[:4]"""
SPEC_SIGNATURE = """The signature MUST be a 72-byte `timestamped_signature` structure.

    struct timestamped_signature {
        u64 timestamp;
        opaque signature[64];
    };"""
SPEC_MESSAGE = """The signed message MUST be two newline (U+000A) terminated lines (one header
line and one timestamp line) followed by the whole note body of the cosigned
checkpoint (including the final newline, but not including any signature lines).

The header line MUST be the fixed string `cosignature/v1`, and provides domain
separation.

The timestamp line MUST consist of the string `time`, a single space (0x20), and
`timestamped_signature.timestamp` encoded as an ASCII decimal with no leading
zeroes."""
SPEC_EXAMPLE_MESSAGE = """    cosignature/v1
    time 1679315147
    example.com/behind-the-sofa
    20852163
    CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I="""
SPEC_EXAMPLE_LINE = ("— witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5O"
                     "WXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==")
# c2sp.org/signed-note v1.0.0, §Signatures:
SPEC_KNOWN_KEY = ("If a signature from a known key fails to verify, clients SHOULD reject the "
                  "whole note.")

WITNESS = KAT["witness"]


def _spec_key_id(name: str, sig_type: int, public_key: bytes) -> bytes:
    assert "0x04 || 32-byte Ed25519 cosigner public key" in SPEC_KEY_ID
    return hashlib.sha256(name.encode() + b"\n" + bytes([sig_type]) + public_key).digest()[:4]


def _spec_message(timestamp: int, body: str) -> bytes:
    assert "`cosignature/v1`" in SPEC_MESSAGE and "`time`, a single space" in SPEC_MESSAGE
    return f"cosignature/v1\ntime {timestamp}\n{body}".encode()


def _cosigner() -> Cosigner:
    return Cosigner(Signer(WITNESS["name"], bytes.fromhex(WITNESS["seed_hex"])))


# -- the known answer, against the spec --------------------------------------------------


def test_known_answer_key_id_is_the_spec_hash_with_type_0x04():
    public = bytes.fromhex(WITNESS["public_key_hex"])
    assert _spec_key_id(WITNESS["name"], 0x04, public).hex() == WITNESS["key_id_hex"]
    assert _spec_key_id(WITNESS["name"], 0x01, public).hex() == WITNESS["note_key_id_hex"]
    assert WITNESS["key_id_hex"] != WITNESS["note_key_id_hex"]  # never taken for each other
    name, key_hex, key64 = WITNESS["verifier_key"].split("+", 2)
    assert (name, key_hex) == (WITNESS["name"], WITNESS["key_id_hex"])
    assert base64.b64decode(key64) == b"\x04" + public
    cosigner = _cosigner()
    assert cosigner.verifier.vkey == WITNESS["verifier_key"]
    assert f"{cosigner.key_id:08x}" == WITNESS["key_id_hex"]
    assert CosignatureVerifier.from_vkey(WITNESS["verifier_key"]) == cosigner.verifier


def test_known_answer_signed_message_is_the_spec_layout():
    example = "\n".join(line[4:] for line in SPEC_EXAMPLE_MESSAGE.splitlines()) + "\n"
    body = example.split("\n", 2)[2]
    assert cosigned_message(body, 1679315147).decode() == example
    assert _spec_message(KAT["timestamp"], KAT["checkpoint_text"]).decode() == \
        KAT["signed_message"]
    assert cosigned_message(KAT["checkpoint_text"], KAT["timestamp"]).decode() == \
        KAT["signed_message"]


def test_known_answer_line_is_key_id_timestamp_signature_and_verifies():
    assert "72-byte `timestamped_signature`" in SPEC_SIGNATURE
    name, b64 = KAT["cosignature_line"].removeprefix("— ").split(" ")
    raw = base64.b64decode(b64, validate=True)
    assert name == WITNESS["name"] and len(raw) == 4 + 8 + 64
    assert raw[:4].hex() == WITNESS["key_id_hex"]
    assert int.from_bytes(raw[4:12], "big") == KAT["timestamp"]
    assert raw[12:].hex() == KAT["signature_hex"]
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(WITNESS["public_key_hex"]))
    public.verify(raw[12:], _spec_message(KAT["timestamp"], KAT["checkpoint_text"]))  # raises


def test_known_answer_is_reproduced_byte_for_byte_and_verifies():
    line = _cosigner().cosign(KAT["checkpoint_text"], KAT["timestamp"])
    assert line.line == KAT["cosignature_line"] + "\n"  # Ed25519 is deterministic
    ledger = json.loads((VECTORS / "evidence-ledger" / "checkpoints" / "signed.json").read_text())
    assert KAT["cosigned_note"] == ledger["note"] + line.line
    verifier = CosignatureVerifier.from_vkey(WITNESS["verifier_key"])
    assert verifier.verify(KAT["checkpoint_text"], line) == KAT["timestamp"]
    policy = WitnessPolicy.from_keys([WITNESS["verifier_key"]], 1)
    assert policy is not None
    quorum = check_quorum(KAT["cosigned_note"].encode(), policy)
    assert quorum.ok and [c.timestamp for c in quorum.cosigned] == [1679315147]


def test_the_spec_example_line_carries_its_time():
    note = parse_note(b"a\n1\n" + base64.b64encode(bytes(32)) + b"\n\n"
                      + SPEC_EXAMPLE_LINE.encode() + b"\n")
    (sig,) = note.signatures
    assert sig.name == "witness.example.com/w1" and len(sig.signature) == 72
    assert int.from_bytes(sig.signature[:8], "big") == 1679315147  # the example's time line


def test_a_real_witness_cosignature_of_a_public_log_verifies():
    policy = WitnessPolicy.from_keys([REMORA["witness_verifier_key"]], 1)
    assert policy is not None and f"{policy.verifiers[0].key_id:08x}" == "da77ade7"
    quorum = check_quorum(REMORA["note"].encode(), policy)
    assert quorum.ok and quorum.tree_size == REMORA["tree_size"]
    assert [(c.witness, c.timestamp) for c in quorum.cosigned] == [
        ("remora.n621.de+da77ade7", REMORA["witness_timestamp"])]
    changed = REMORA["note"].replace("\n1432088532\n", "\n1432088533\n").encode()
    assert check_quorum(changed, policy).failed == ("remora.n621.de+da77ade7",)


# -- verifying -------------------------------------------------------------------------


def test_a_cosignature_covers_every_line_of_the_body_and_its_time():
    cosigner = _cosigner()
    text = KAT["checkpoint_text"]
    line = cosigner.cosign(text + "extension\n", 5)
    assert cosigner.verifier.verify(text + "extension\n", line) == 5
    assert cosigner.verifier.verify(text + "extensioN\n", line) is None
    moved = NoteSignature(line.name, line.key_id, (6).to_bytes(8, "big") + line.signature[8:])
    assert cosigner.verifier.verify(text + "extension\n", moved) is None
    other = NoteSignature("other.example", line.key_id, line.signature)
    assert cosigner.verifier.verify(text + "extension\n", other) is None


def test_a_witness_never_signs_time_zero_nor_a_body_that_is_no_checkpoint():
    with pytest.raises(EvidenceError, match="never 0"):
        _cosigner().cosign(KAT["checkpoint_text"], 0)
    with pytest.raises(CheckpointFormatError):
        _cosigner().cosign("not a checkpoint\n", 1)
    with pytest.raises(EvidenceError, match="2\\^63"):
        cosigned_message(KAT["checkpoint_text"], 1 << 63)


def test_a_note_key_is_refused_where_a_cosignature_key_is_wanted():
    with pytest.raises(KeyFormatError, match=r"signature type 0x01, want 0x04.*witness key"):
        CosignatureVerifier.from_vkey(WITNESS["note_verifier_key"])
    with pytest.raises(KeyFormatError, match="does not match the key"):
        CosignatureVerifier.from_vkey(WITNESS["verifier_key"].replace("7c2a60d3", "7c2a60d4"))


# -- quorums -----------------------------------------------------------------------------


def _witnesses(n: int) -> list[Cosigner]:
    return [Cosigner(Signer(f"w{i}.example", bytes([i + 1]) * 32)) for i in range(n)]


def _note(lines: list[NoteSignature]) -> bytes:
    return KAT["cosigned_note"].encode() + "".join(s.line for s in lines).encode()


def test_a_quorum_counts_distinct_trusted_witnesses_that_verify():
    a, b, c = _witnesses(3)
    text = KAT["checkpoint_text"]
    policy = WitnessPolicy.from_keys([a.verifier.vkey, b.verifier.vkey, c.verifier.vkey], 2)
    assert policy is not None
    one = check_quorum(_note([a.cosign(text, 10), a.cosign(text, 11)]), policy)
    assert not one.ok and [x.witness for x in one.cosigned] == [a.verifier.label]
    assert one.describe().startswith("checkpoint of tree size 26 carries 1 valid "
                                     "cosignature(s) by the 3 witness key(s) given, want 2")
    two = check_quorum(_note([c.cosign(text, 10), a.cosign(text, 12)]), policy)
    assert two.ok and {x.witness for x in two.cosigned} == {a.verifier.label, c.verifier.label}


def test_unknown_witnesses_do_not_count_and_a_failing_trusted_one_fails_the_note():
    assert "SHOULD reject the whole note" in SPEC_KNOWN_KEY
    a, b, stranger = _witnesses(3)
    text = KAT["checkpoint_text"]
    policy = WitnessPolicy.from_keys([a.verifier.vkey, b.verifier.vkey], 1)
    assert policy is not None
    assert not check_quorum(_note([stranger.cosign(text, 1)]), policy).ok
    bad = a.cosign(text, 1)
    bad = NoteSignature(bad.name, bad.key_id, bad.signature[:-1] + bytes([bad.signature[-1] ^ 1]))
    quorum = check_quorum(_note([b.cosign(text, 1), bad]), policy)
    assert not quorum.ok and quorum.failed == (a.verifier.label,)
    assert "the cosignature of w0.example+" in quorum.describe()


def test_a_witness_policy_refuses_what_cannot_be_met():
    a, b = _witnesses(2)
    assert WitnessPolicy.from_keys([], None) is None
    with pytest.raises(UsageError, match="--min-witnesses needs"):
        WitnessPolicy.from_keys([], 1)
    with pytest.raises(UsageError, match=r"want 1\.\.1"):
        WitnessPolicy.from_keys([a.verifier.vkey, a.verifier.vkey], 2)  # one distinct key
    with pytest.raises(UsageError, match=r"want 1\.\.2"):
        WitnessPolicy.from_keys([a.verifier.vkey, b.verifier.vkey], 0)
    policy = WitnessPolicy.from_keys([a.verifier.vkey, b.verifier.vkey], None)
    assert policy is not None and policy.minimum == 1
