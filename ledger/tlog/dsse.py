"""DSSE envelopes (secure-systems-lab/dsse v1.0) signed with C2SP note keys (pure).

The ledger signs what it hands out (proof bundles, export manifests) with the same
Ed25519 key as its checkpoints (:mod:`evidence_ledger.tlog.note`). An envelope is::

    {"payload": base64(payload bytes),
     "payloadType": "<media type>",
     "signatures": [{"keyid": "<securesystemslib default key id>", "sig": base64(Ed25519)},
                    {"keyid": "", "sig": base64(Ed25519)}]}

The signature is Ed25519 (RFC 8032) over the DSSE pre-authentication encoding
``PAE(payloadType, payload)``, carried twice, because DSSE makes ``keyid`` an optional,
unauthenticated hint and verifiers read it differently:

- with the key id securesystemslib computes for the public key (:func:`default_keyid`:
  SHA-256 of the canonical JSON of ``{"keytype": "ed25519", "scheme": "ed25519",
  "keyval": {"public": hex}}``), which stock securesystemslib and in-toto need: they try
  only the signature whose keyid equals that of the key they were given
  (``SSlibKey.from_crypto(public_key)``);
- with an empty key id, which go-securesystemslib (and so cosign) tries with every key it
  has: it skips a signature whose non-empty key id differs from the one it computes (which
  also covers ``keyid_hash_algorithms``, so it differs).

This module's verifier (:func:`check_envelope`) reads neither: it tries every given key on
every signature, so an envelope whose ``keyid`` is empty or missing (as DSSE allows)
verifies too. Bundles written before this layout (one signature, keyid the C2SP verifier
key string) still verify. An envelope file is the envelope as JSON indented by two spaces,
ending in a newline (:func:`encode_envelope`).

The payload the ledger signs is an in-toto Statement v1 (:func:`in_toto_statement`), of
type :data:`PAYLOAD_TYPE`.

Errors: an envelope that does not verify raises :class:`EnvelopeSignatureError`, one
that is not in the form :func:`encode_envelope` writes :class:`EnvelopeFormatError`
(both :class:`~evidence_ledger.format.errors.EvidenceError`, exit code 1).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib import exceptions as sslib_exceptions
from securesystemslib.dsse import Envelope
from securesystemslib.signer import Signature, SSlibKey

from evidence_ledger.format.errors import EvidenceError
from evidence_ledger.tlog.note import Signer, Verifier

__all__ = [
    "PAYLOAD_TYPE",
    "STATEMENT_TYPE",
    "EnvelopeFormatError",
    "EnvelopeSignatureError",
    "check_envelope",
    "default_keyid",
    "dsse_key",
    "encode_envelope",
    "in_toto_statement",
    "read_envelope",
    "sign_envelope",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"


class EnvelopeFormatError(EvidenceError):
    """Bytes that are not an envelope file as :func:`encode_envelope` writes it (exit 1)."""


class EnvelopeSignatureError(EvidenceError):
    """An envelope with no valid signature by a given key (exit code 1).

    Attributes:
        detail: one line: who signed, and which keys were given.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def dsse_key(verifier: Verifier) -> SSlibKey:
    """The securesystemslib Ed25519 key of a C2SP verifier key, built the standard way
    (``SSlibKey.from_crypto``), so with securesystemslib's default key id."""
    return SSlibKey.from_crypto(Ed25519PublicKey.from_public_bytes(verifier.public_key))


def default_keyid(verifier: Verifier) -> str:
    """The key id securesystemslib gives the public key of ``verifier`` by default: 64 hex
    digits of SHA-256 over the canonical JSON of its key object."""
    return dsse_key(verifier).keyid


def in_toto_statement(
    subjects: Iterable[tuple[str, bytes]], predicate_type: str, predicate: dict[str, Any]
) -> bytes:
    """An in-toto Statement v1 as the ledger signs it: compact ASCII JSON, keys in the
    order ``_type``, ``subject``, ``predicateType``, ``predicate``.

    Args:
        subjects: ``(name, 32-byte SHA-256 digest)`` of each subject, in order.
        predicate_type: the predicate's type URI.
        predicate: the predicate (JSON values).
    """
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest.hex()}}
                    for name, digest in subjects],
        "predicateType": predicate_type,
        "predicate": predicate,
    }
    return json.dumps(statement, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def encode_envelope(envelope: Envelope) -> bytes:
    """The envelope file: JSON indented by two spaces, UTF-8, ending in a newline."""
    return (json.dumps(envelope.to_dict(), indent=2) + "\n").encode("utf-8")


def sign_envelope(payload: bytes, signer: Signer, payload_type: str) -> bytes:
    """Wrap ``payload`` in a DSSE envelope signed by ``signer``.

    Args:
        payload: the bytes to sign (e.g. an in-toto Statement as JSON).
        signer: the note key (its signature is deterministic: the same inputs give the
            same file).
        payload_type: the media type, e.g. ``application/vnd.in-toto+json``.

    Returns:
        The envelope file (:func:`encode_envelope`).
    """
    envelope = Envelope(payload, payload_type, {})
    sig = signer.sign(envelope.pae()).hex()
    keyid = default_keyid(signer.verifier)
    envelope.signatures = {keyid: Signature(keyid, sig), "": Signature("", sig)}
    return encode_envelope(envelope)


def check_envelope(envelope: Envelope, verifiers: Sequence[Verifier]) -> set[str]:
    """Verify the envelope's signatures with ``verifiers``, over the DSSE PAE. A ``keyid``
    is a hint (DSSE v1.0): a signature is tried with every given key whatever it says, and
    one whose keyid is empty, missing, or names a given key (its default key id or its C2SP
    verifier key string) must verify with one of them, and so must one of those with an
    empty or missing key id, so that no byte of a signature the ledger wrote can change
    unnoticed; other signatures (naming another key, or a second one with an empty key id)
    are another signer's, left alone unless a given key verifies them. Threshold 1.

    Returns:
        The verifier key strings (C2SP) whose signature verified.

    Raises:
        EnvelopeSignatureError: if no given key signed it validly, or a signature that
            names a given key (or none) does not verify (the detail says which).
    """
    pae = envelope.pae()
    keys = [(verifier, dsse_key(verifier)) for verifier in verifiers]
    given = ", ".join(v.vkey for v in verifiers)
    accepted: set[str] = set()
    failed: list[str] = []  # signatures that claim a given key and do not verify
    named = False  # one of them names a given key
    unnamed_good = unnamed_bad = False  # signatures with an empty key id
    for signature in envelope.signatures.values():
        keyid = str(signature.keyid)
        good = {verifier.vkey for verifier, key in keys if _verifies(key, signature, pae)}
        names = any(keyid in (key.keyid, verifier.vkey) for verifier, key in keys)
        if not good and names:
            failed.append(_cut(keyid))
            named = True
        if keyid == "":
            unnamed_good, unnamed_bad = unnamed_good or bool(good), unnamed_bad or not good
        accepted |= good
    if unnamed_bad and not unnamed_good:  # our copy under no key id was changed
        failed.append("(empty)")
    if not accepted and named:
        raise EnvelopeSignatureError(
            "the signature by the given key does not verify over the DSSE PAE")
    if not accepted:
        hints = sorted({_cut(str(s.keyid)) for s in envelope.signatures.values()} - {""})
        by = f"a key with key id {', '.join(hints)}" if hints else "another key"
        raise EnvelopeSignatureError(f"signed by {by}, not by the given key ({given})")
    if failed:
        raise EnvelopeSignatureError(
            f"the signature with keyid {failed[0]} does not verify with the given key "
            f"({given}), though another does: the envelope was changed")
    return accepted


def _verifies(key: SSlibKey, signature: Signature, pae: bytes) -> bool:
    try:
        key.verify_signature(Signature(key.keyid, signature.signature), pae)
    except (sslib_exceptions.UnverifiedSignatureError, sslib_exceptions.VerificationError,
            ValueError):
        return False
    return True


def _cut(text: str, most: int = 200) -> str:
    """``text`` (untrusted, e.g. a key id from an envelope) shortened to ``most`` characters,
    with an ellipsis when cut, so a cut value is never mistaken for a whole one."""
    text = text if text.isprintable() else text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= most else text[: most - 1] + "…"


def read_envelope(data: bytes) -> Envelope:
    """Parse an envelope file that must be byte for byte what :func:`encode_envelope`
    writes: any other spelling of the same envelope (spacing, key order, base64 padding
    bits, escapes) is refused, so that no byte of a signed file can change unnoticed.

    Raises:
        EnvelopeFormatError: for anything else (the caller bounds the size).
    """
    try:
        doc = json.loads(data.decode("utf-8"))
        if not isinstance(doc, dict) or not isinstance(doc.get("signatures"), list):
            raise TypeError("not an envelope object")
        envelope = Envelope.from_dict(doc)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError,
            sslib_exceptions.FormatError) as exc:  # UnicodeDecodeError, JSON, base64: ValueError
        raise EnvelopeFormatError(
            f"not a DSSE envelope ({' '.join(str(exc).split())[:120]})") from exc
    try:
        canonical = encode_envelope(envelope) == data
    except (TypeError, ValueError):  # fields of a type to_dict cannot write back
        canonical = False
    if not canonical or not isinstance(envelope.payload_type, str):
        raise EnvelopeFormatError("not a DSSE envelope in the form the ledger writes it")
    return envelope
