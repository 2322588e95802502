"""The ``add-checkpoint`` call of c2sp.org/tlog-witness v1.0.0, pure: request bodies and the
witness's judgement, each status against the spec text it comes from (quoted below, from
the git tag tlog-witness/v1.0.0 of C2SP/C2SP)."""

from __future__ import annotations

import base64
import hashlib

import pytest

from evidence_ledger.format.errors import UsageError
from evidence_ledger.tlog.checkpoint import Checkpoint
from evidence_ledger.tlog.merkle import EMPTY_ROOT, leaf_hash
from evidence_ledger.tlog.note import Signer, sign_note
from evidence_ledger.tlog.witness_protocol import (
    MalformedRequestError,
    Witness,
    format_add_checkpoint,
    judge,
    parse_add_checkpoint,
    parse_size_body,
)
from tests.test_proofs import naive_mth, naive_proof

SPEC_BODY = """The request body MUST be a sequence of
  - an old size line,
  - zero or more consistency proof lines,
  - and an empty line,
  - followed by a [checkpoint][].

Each line MUST terminate in a newline character (U+000A).

The old size line MUST consist of the string `old`, a single space (0x20),
and the tree size of the previous checkpoint encoded as an ASCII decimal with no
leading zeroes (unless the size is zero, in which case the encoding MUST be `0`).

Each consistency proof line MUST encode a single hash in base64. The client MUST
NOT send more than 63 consistency proof lines."""
SPEC_403 = """If none of the signatures verify against any of the
trusted public keys, the witness MUST respond with a "403 Forbidden" HTTP status
code."""
SPEC_400 = """The old size MUST be equal to or lower than the checkpoint size. Otherwise,
the witness MUST respond with a "400 Bad Request" HTTP status code."""
SPEC_409 = """The witness MUST check that the old size matches the size of the latest
checkpoint it cosigned for the checkpoint's origin (or zero if it never cosigned
a checkpoint for that origin). If it doesn't match, the witness MUST respond
with a "409 Conflict" HTTP status code. The response body MUST consist of the
tree size of the latest cosigned checkpoint in decimal, followed by a newline
(U+000A). The response MUST have a `Content-Type` of `text/x.tlog.size`."""
SPEC_422 = """The consistency proof lines MUST encode a Merkle Consistency Proof from the old
size to the checkpoint size according to [RFC 6962][], Section 2.1.2. The proof
MUST be empty if the old size is zero. If the Merkle Consistency Proof doesn't
verify, the witness MUST respond with a "422 Unprocessable Entity" HTTP status
code."""
SPEC_SAME_SIZE = """If the old size matches the checkpoint size, the witness MUST check that the
root hashes are also identical. If they don't match, the witness MUST respond
with a "409 Conflict" HTTP status code."""
# The editor's draft (C2SP/C2SP main) adds, and this witness follows:
DRAFT_SIZE_ZERO = """A checkpoint of size zero MUST have the root hash of the empty tree, which
[RFC 6962][], Section 2.1 defines as the hash of the empty string. Otherwise,
the witness MUST respond with a "422 Unprocessable Entity" HTTP status code."""

LOG = Signer("log.example/a", hashlib.sha256(b"log").digest())
OTHER = Signer("log.example/a", hashlib.sha256(b"other").digest())


A = [leaf_hash(b"a%d" % i) for i in range(20)]
B = A[:5] + [leaf_hash(b"b%d" % i) for i in range(15)]  # a fork after 5 leaves


def _note(leaves: list[bytes], size: int, signer: Signer = LOG) -> bytes:
    text = Checkpoint("log.example/a", size, naive_mth(leaves[:size])).to_text()
    return sign_note(text, [signer])


def _request(old: int, leaves: list[bytes], size: int, proof: list[bytes] | None = None,
             signer: Signer = LOG):
    if proof is None:
        proof = [] if old in (0, size) else naive_proof(old, leaves[:size])
    return parse_add_checkpoint(format_add_checkpoint(old, proof, _note(leaves, size, signer)))


def _held(leaves: list[bytes], size: int) -> Checkpoint:
    return Checkpoint("log.example/a", size, naive_mth(leaves[:size]))


def test_a_request_body_round_trips_in_the_spec_form():
    assert "an old size line" in SPEC_BODY and "NOT send more than 63" in SPEC_BODY
    proof = naive_proof(7, A[:13])
    body = format_add_checkpoint(7, proof, _note(A, 13))
    head = body.split(b"\n\n", 1)[0].decode().split("\n")
    assert head == ["old 7", *(base64.b64encode(h).decode() for h in proof)]
    request = parse_add_checkpoint(body)
    assert (request.old_size, request.proof, request.checkpoint.size) == (7, tuple(proof), 13)


@pytest.mark.parametrize("body, message", [
    (b"old 1\n", "no blank line"),
    (b"old 01\n\n", "leading zeros"),
    (b"old -1\n\n", "leading zeros"),
    (b"old  1\n\n", "leading zeros"),
    (b"new 1\n\n", "is not 'old <size>'"),
    (b"old 18446744073709551616\n\n", "uint64"),
    (b"old 1\nnot base64\n\n", "proof line 1"),
    (b"old 1\n" + base64.b64encode(bytes(31)) + b"\n\n", "proof line 1"),
    (b"old 1\n" + (base64.b64encode(bytes(32)) + b"\n") * 64 + b"\n", "64 consistency proof"),
    (b"old 0\n\nnot a note\n", "the checkpoint"),
    (b"old 0\n\n" + sign_note("not\na checkpoint\n", [LOG]), "the checkpoint"),
    (b"old \xff\n\n", "not ASCII"),
])
def test_a_malformed_body_is_refused(body, message):
    with pytest.raises(MalformedRequestError, match=message):
        parse_add_checkpoint(body)


def test_the_409_body_is_a_size_and_a_newline():
    assert parse_size_body(b"20852014\n") == 20852014
    for body in (b"20\n\n", b"20", b"020\n", b"x\n", b"1" * 30 + b"\n"):
        with pytest.raises(MalformedRequestError):
            parse_size_body(body)


def test_403_without_a_trusted_signature():
    assert '"403 Forbidden"' in SPEC_403
    verdict = judge(_request(0, A, 3, signer=OTHER), [LOG.verifier], None)
    assert verdict.status == 403 and "no signature by a given verifier key" in verdict.reason


def test_400_when_old_size_is_above_the_checkpoint():
    assert '"400 Bad Request"' in SPEC_400
    assert judge(_request(5, A, 3, proof=[]), [LOG.verifier], _held(A, 5)).status == 400


def test_409_with_the_held_size_when_old_size_is_not_it():
    assert "`text/x.tlog.size`" in SPEC_409
    verdict = judge(_request(0, A, 9), [LOG.verifier], _held(A, 7))
    assert (verdict.status, verdict.size) == (409, 7)
    verdict = judge(_request(3, A, 9), [LOG.verifier], None)
    assert (verdict.status, verdict.size) == (409, 0)  # never cosigned: zero


def test_same_size_other_root_is_a_409_fork_and_same_root_is_cosigned_again():
    assert 'respond\nwith a "409 Conflict"' in SPEC_SAME_SIZE
    fork = judge(_request(9, B, 9), [LOG.verifier], _held(A, 9))
    assert (fork.status, fork.size) == (409, 9) and "a fork" in fork.reason
    again = judge(_request(9, A, 9), [LOG.verifier], _held(A, 9))
    assert again.status == 200 and again.opened is not None


def test_422_for_a_proof_that_does_not_verify_or_should_be_empty():
    assert '"422 Unprocessable Entity"' in SPEC_422 and "MUST be empty if" in SPEC_422
    grown = judge(_request(9, A, 15), [LOG.verifier], _held(A, 9))
    assert grown.status == 200
    fork = judge(_request(9, B, 15), [LOG.verifier], _held(A, 9))  # B's own proof
    assert fork.status == 422 and "does not verify" in fork.reason
    shared = judge(_request(5, B, 15), [LOG.verifier], _held(A, 5))  # B extends A[:5]
    assert shared.status == 200
    nonempty = judge(_request(0, A, 9, proof=[A[0]]), [LOG.verifier], None)
    assert nonempty.status == 422
    equal = judge(_request(9, A, 9, proof=[A[0]]), [LOG.verifier], _held(A, 9))
    assert equal.status == 422


def test_422_for_a_size_zero_checkpoint_without_the_empty_root():
    assert "root hash of the empty tree" in DRAFT_SIZE_ZERO
    empty = sign_note(Checkpoint("log.example/a", 0, EMPTY_ROOT).to_text(), [LOG])
    assert judge(parse_add_checkpoint(format_add_checkpoint(0, [], empty)), [LOG.verifier],
                 None).status == 200
    wrong = sign_note(Checkpoint("log.example/a", 0, A[0]).to_text(), [LOG])
    assert judge(parse_add_checkpoint(format_add_checkpoint(0, [], wrong)), [LOG.verifier],
                 None).status == 422


def test_a_witness_is_named_url_equals_cosignature_key():
    vkey = "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"
    assert Witness.parse(f"https://w.example/sub/={vkey}") == Witness("https://w.example/sub",
                                                                       vkey)
    for bad in (f"ftp://w.example={vkey}", vkey, "http://w.example=", f"w.example={vkey}"):
        with pytest.raises(UsageError, match=r"want URL=VKEY|verifier key"):
            Witness.parse(bad)
