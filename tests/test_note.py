"""C2SP signed notes: known-answer vectors (Go sumdb/note, C2SP, Rekor v2) and strictness."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import load_der_public_key

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.tlog.checkpoint import parse_checkpoint
from evidence_ledger.tlog.note import (
    InvalidSignatureError,
    KeyFormatError,
    MalformedNoteError,
    Note,
    NoteSignature,
    Signer,
    UnverifiedNoteError,
    Verifier,
    format_note,
    key_id,
    open_note,
    parse_note,
    sign_note,
)

VECTORS = Path(__file__).parent / "vectors"
KAT = json.loads((VECTORS / "kat-extracted.json").read_text())
GO = KAT["signed_note_go"]
C2SP = KAT["signed_note_c2sp_example"]
REKOR = KAT["rekor_v2_checkpoint"]

# -- known answers -------------------------------------------------------------------


def test_go_vector_is_reproduced_byte_for_byte():
    """Ed25519 is deterministic: signing the Go text with the Go key gives the Go note."""
    signer = Signer.from_skey(GO["skey_go_format"])
    assert signer.skey == GO["skey_go_format"]
    assert signer.verifier.vkey == GO["vkey"]
    assert f"{signer.key_id:08x}" == "c74f20a3"
    assert sign_note(GO["text"], [signer]) == GO["signed_note"].encode()


def test_go_vector_verifies_and_a_second_signer_is_ignored_unless_known():
    peter = Verifier.from_vkey(GO["vkey"])
    enoch = Verifier.from_vkey(GO["second_verifier_vkey"])
    double = (GO["signed_note"] + GO["second_signature_line"]).encode()

    opened = open_note(double, [peter])
    assert opened.text == GO["text"]
    assert [s.name for s in opened.verified] == ["PeterNeumann"]
    assert [s.name for s in opened.unverified] == ["EnochRoot"]

    both = open_note(double, [peter, enoch])
    assert [s.name for s in both.verified] == ["PeterNeumann", "EnochRoot"]
    assert parse_note(double).signatures[1].line == GO["second_signature_line"]
    assert format_note(parse_note(double)) == double


def test_c2sp_example_verifies():
    opened = open_note(C2SP["signed_note"].encode(), [Verifier.from_vkey(C2SP["vkey"])])
    assert opened.text == "This is an example message.\n"


def test_rekor_v2_checkpoint_verifies_with_the_vkey_derived_from_its_key():
    spki = base64.b64decode(REKOR["ed25519_spki_der_b64"])
    public = load_der_public_key(spki).public_bytes_raw()  # type: ignore[union-attr]
    origin = REKOR["log_origin"]
    derived = Verifier(origin, key_id(origin, public), public)
    assert derived.vkey == REKOR["vkey_derived"]
    full = hashlib.sha256(origin.encode() + b"\n\x01" + public).digest()
    assert base64.b64encode(full).decode() == REKOR["log_id_full_sha256_b64"]

    bundle = json.loads(
        (VECTORS / "sigstore-python" / "staging-rekor-v2.txt.sigstore.json").read_text()
    )
    envelope = bundle["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]["checkpoint"]
    opened = open_note(envelope["envelope"].encode(), [Verifier.from_vkey(REKOR["vkey_derived"])])
    checkpoint = parse_checkpoint(opened.text)
    assert (checkpoint.origin, checkpoint.size) == (origin, 646)


def test_go_sumdb_tree_note_text_is_a_checkpoint_body():
    tree = KAT["tree_note_go_sumdb"]
    checkpoint = parse_checkpoint(tree["tree_note_text"])
    assert checkpoint.origin == "go.sum database tree"
    assert checkpoint.size == 123456789012
    assert base64.b64encode(checkpoint.root).decode() == tree["record_hash_b64"]
    assert checkpoint.to_text() == tree["tree_note_text"]


# -- strict parsing and verification -------------------------------------------------

NOTE = GO["signed_note"]
PETER = [Verifier.from_vkey(GO["vkey"])]
SIG_LINE = NOTE.split("\n\n")[1].rstrip("\n")


@pytest.mark.parametrize(
    "name, data",
    [
        ("missing-final-newline", NOTE[:-1]),
        ("trailing-garbage-line", NOTE + "garbage\n"),
        ("trailing-garbage-bytes", NOTE + "x"),
        ("trailing-blank-line", NOTE + "\n"),
        ("signature-line-first", SIG_LINE + "\n\n" + GO["text"]),
        ("no-blank-line", GO["text"] + SIG_LINE + "\n"),
        ("no-signature", GO["text"] + "\n"),
        ("hyphen-not-em-dash", NOTE.replace("— ", "- ")),
        ("no-space-after-name", NOTE.replace("PeterNeumann ", "PeterNeumann")),
        ("plus-in-name", NOTE.replace("— PeterNeumann", "— Peter+Neumann")),
        ("bad-base64", NOTE.replace("x08go", "x08g!")),
        ("non-canonical-base64", NOTE.replace("AM=\n", "AN=\n")),
        ("short-signature", GO["text"] + "\n— PeterNeumann AAAA\n"),
        ("tab-in-text", NOTE.replace("answer to", "answer\tto")),
        ("carriage-return", NOTE.replace("problem,\n", "problem,\r\n")),
        ("too-many-signatures", GO["text"] + "\n" + (SIG_LINE + "\n") * 101),
    ],
)
def test_malformed_notes_are_rejected(name, data):
    with pytest.raises(MalformedNoteError) as caught:
        open_note(data.encode(), PETER)
    assert "malformed note" in str(caught.value)
    assert caught.value.exit_code == 1


@pytest.mark.parametrize("data", [b"", b"\n", b"  \n\n"])
def test_an_empty_file_is_named_as_such(data):
    with pytest.raises(MalformedNoteError, match="the file is empty"):
        parse_note(data)


def test_non_utf8_is_malformed():
    with pytest.raises(MalformedNoteError, match="not UTF-8"):
        parse_note(NOTE.encode() + b"\xff\n")


def test_sixteen_signatures_are_accepted():
    others = "".join(f"— witness{i}.example " + base64.b64encode(bytes([i]) * 68).decode() + "\n"
                     for i in range(15))  # unknown keys: ignored
    opened = open_note((GO["text"] + "\n" + others + SIG_LINE + "\n").encode(), PETER)
    assert (len(opened.verified), len(opened.unverified)) == (1, 15)


def test_every_line_of_a_known_key_is_verified_and_a_repeated_line_refused():
    """Regression (hostile-input audit): only the first line of a key was verified, so a
    bad second line passed, and one line twice was accepted."""
    name, rest = SIG_LINE.removeprefix("— ").split(" ")
    raw = base64.b64decode(rest)
    bad = f"— {name} " + base64.b64encode(raw[:4] + bytes(64)).decode()
    with pytest.raises(InvalidSignatureError):
        open_note((GO["text"] + "\n" + SIG_LINE + "\n" + bad + "\n").encode(), PETER)
    with pytest.raises(MalformedNoteError, match="is repeated"):
        open_note((GO["text"] + "\n" + (SIG_LINE + "\n") * 2).encode(), PETER)


def test_tampered_text_fails_the_known_key():
    tampered = NOTE.replace("cryptography", "cryptographY").encode()
    with pytest.raises(
        InvalidSignatureError, match=r"invalid signature by key PeterNeumann\+c74f20a3"
    ):
        open_note(tampered, PETER)


def test_unknown_keys_never_count_as_verified():
    enoch = [Verifier.from_vkey(GO["second_verifier_vkey"])]
    with pytest.raises(UnverifiedNoteError, match="no signature by a given verifier key"):
        open_note(NOTE.encode(), enoch)
    # Same name, another key ID; same key ID, another name: both unknown, both ignored.
    peter = PETER[0]
    impostor = Signer("PeterNeumann", bytes(32))
    forged = sign_note(GO["text"], [impostor])
    with pytest.raises(UnverifiedNoteError):
        open_note(forged, PETER)
    renamed = NOTE.replace("— PeterNeumann", "— PaulNeumann").encode()
    with pytest.raises(UnverifiedNoteError):
        open_note(renamed, PETER)
    # A signature under the right name and key ID that does not verify rejects the note.
    wrong = Note(GO["text"], (NoteSignature(peter.name, peter.key_id, impostor.sign(b"x")),))
    with pytest.raises(InvalidSignatureError):
        open_note(format_note(wrong), PETER)


def test_known_and_unknown_signatures_together():
    extra = Signer("witness.example/w1", bytes(range(32)))
    cosigned = NOTE + parse_note(sign_note(GO["text"], [extra])).signatures[0].line
    opened = open_note(cosigned.encode(), PETER)
    assert [s.name for s in opened.unverified] == ["witness.example/w1"]


# -- keys ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vkey",
    [
        "",
        "PeterNeumann",
        "PeterNeumann+c74f20a3",
        "PeterNeumann+c74f20a+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+0xc74f20+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+Apc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+AhpczQcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW=",
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ],
)
def test_malformed_verifier_keys_are_usage_errors(vkey):
    with pytest.raises(KeyFormatError) as caught:
        Verifier.from_vkey(vkey)
    assert isinstance(caught.value, UsageError) and caught.value.exit_code == 2


def test_private_key_errors_never_show_the_key():
    good = GO["skey_go_format"]
    secret = good.rsplit("+", 1)[1]
    for bad in [
        good.replace("PRIVATE+KEY", "PUBLIC+KEY"),
        good.replace("c74f20a3", "c74f20a4"),
        good[:-2],
        good.replace("+AYEK", "+AoEK"),
        GO["vkey"],
    ]:
        with pytest.raises(KeyFormatError) as caught:
            Signer.from_skey(bad)
        assert secret[:12] not in str(caught.value)


def test_signing_refuses_bad_input():
    signer = Signer.from_skey(GO["skey_go_format"])
    with pytest.raises(MalformedNoteError):
        sign_note("no final newline", [signer])
    with pytest.raises(MalformedNoteError):
        sign_note("a\x00b\n", [signer])
    with pytest.raises(KeyFormatError):
        sign_note("text\n", [])
    with pytest.raises(KeyFormatError, match="given twice"):
        sign_note("text\n", [signer, signer])
    with pytest.raises(KeyFormatError):
        Signer("bad name", bytes(32))


def test_ambiguous_verifiers_are_refused():
    peter = PETER[0]
    clash = Verifier(peter.name, peter.key_id, bytes(32))
    with pytest.raises(KeyFormatError, match="ambiguous"):
        open_note(NOTE.encode(), [peter, clash])
    assert open_note(NOTE.encode(), [peter, peter]).verified  # the same key twice is fine


def test_note_errors_are_evidence_errors():
    for cls in (MalformedNoteError, UnverifiedNoteError):
        assert issubclass(cls, EvidenceError)
