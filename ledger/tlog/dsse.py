"""DSSE envelopes (secure-systems-lab/dsse v1.0) signed with C2SP note keys (pure).

The ledger signs what it hands out (proof bundles, export manifests) with the same
Ed25519 key as its checkpoints (:mod:`evidence_ledger.tlog.note`). An envelope is::

    {"payload": base64(payload bytes),
     "payloadType": "<media type>",
     "signatures": [{"keyid": "<C2SP verifier key>", "sig": base64(64-byte Ed25519)}]}

Each signature is Ed25519 (RFC 8032) over the DSSE pre-authentication encoding
``PAE(payloadType, payload)`` (securesystemslib ``Envelope.sign`` / ``verify``); its keyid
is the signer's verifier key string, ``name+hex8(keyid)+base64(0x01 || public key)``. An
envelope file is the envelope as JSON indented by two spaces, ending in a newline
(:func:`encode_envelope`).

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

from securesystemslib import exceptions as sslib_exceptions
from securesystemslib.dsse import Envelope
from securesystemslib.signer import Key, SecretsHandler, Signature, SSlibKey
from securesystemslib.signer import Signer as DsseSigner

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.tlog.note import Signer, Verifier

__all__ = [
    "PAYLOAD_TYPE",
    "STATEMENT_TYPE",
    "EnvelopeFormatError",
    "EnvelopeSignatureError",
    "NoteKeySigner",
    "check_envelope",
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
    """The securesystemslib Ed25519 key for a C2SP verifier key.

    Its ``keyid`` is the verifier key string (``name+hex8(keyid)+base64(0x01 || key)``),
    the keyid an envelope's signature carries.
    """
    return SSlibKey(
        keyid=verifier.vkey, keytype="ed25519", scheme="ed25519",
        keyval={"public": verifier.public_key.hex()},
    )


class NoteKeySigner(DsseSigner):
    """A securesystemslib signer over a C2SP note key (Ed25519, RFC 8032); its
    signatures' keyid is the verifier key string (:func:`dsse_key`)."""

    def __init__(self, signer: Signer) -> None:
        self._signer = signer
        self._key = dsse_key(signer.verifier)

    @property
    def public_key(self) -> Key:
        return self._key

    def sign(self, payload: bytes) -> Signature:
        return Signature(self._key.keyid, self._signer.sign(payload).hex())

    @classmethod
    def from_priv_key_uri(
        cls, priv_key_uri: str, public_key: Key, secrets_handler: SecretsHandler | None = None
    ) -> NoteKeySigner:
        raise UsageError("a ledger key is loaded from its key file, not from a URI")


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
    envelope.sign(NoteKeySigner(signer))
    return encode_envelope(envelope)


def check_envelope(envelope: Envelope, verifiers: Sequence[Verifier]) -> set[str]:
    """Verify the envelope's signatures with ``verifiers`` (securesystemslib, threshold 1).

    Returns:
        The verifier key strings whose signature verified.

    Raises:
        EnvelopeSignatureError: if no given key signed it validly (the detail says whether
            the given key's signature failed or another key signed).
    """
    keys: list[Key] = [dsse_key(v) for v in verifiers]
    try:
        accepted = envelope.verify(keys, 1)
    except (sslib_exceptions.VerificationError, ValueError) as exc:
        given = {k.keyid for k in keys}
        signed = sorted(str(keyid) for keyid in envelope.signatures)
        if given.intersection(signed):
            detail = "the signature by the given key does not verify over the DSSE PAE"
        else:
            detail = (
                f"signed by {', '.join(_cut(s) for s in signed)}, not by the given key "
                f"({', '.join(sorted(given))})"
            )
        raise EnvelopeSignatureError(detail) from exc
    return set(accepted)


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
