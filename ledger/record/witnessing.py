"""Asking witnesses to cosign a checkpoint the ledger just signed (the log's side of
c2sp.org/tlog-witness ``add-checkpoint``), for ``checkpoint --witness URL=VKEY``.

Each witness is first sent the checkpoint with old size 0 and no proof. A witness that has
cosigned this log before answers 409 with the size it holds; the request is then sent once
more, with the RFC 6962 consistency proof from that size to the checkpoint's, computed
from the ledger's log and checked against it. What each witness answered is a
:class:`~evidence_ledger.tlog.witness_protocol.WitnessResult`; only a cosignature line by the
witness's own key that verifies on this checkpoint is kept (the spec: "The client MUST
ignore any cosignatures from unknown keys").

HTTP is the standard library's ``urllib`` (proxies from the environment apply), one
request at a time, each with a time-out, answers read up to :data:`MAX_ANSWER_BYTES`.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from collections.abc import Sequence

from evidence_ledger.format.errors import EvidenceError
from evidence_ledger.storage.checked_proofs import prove_consistency_checked
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.checkpoint import Checkpoint
from evidence_ledger.tlog.cosignature import CosignatureVerifier
from evidence_ledger.tlog.note import parse_note
from evidence_ledger.tlog.witness_protocol import (
    ADD_CHECKPOINT,
    SIZE_CONTENT_TYPE,
    MalformedRequestError,
    Witness,
    WitnessResult,
    format_add_checkpoint,
    parse_size_body,
)

__all__ = ["MAX_ANSWER_BYTES", "TIMEOUT", "request_cosignatures"]

TIMEOUT = 10.0
"""Seconds to wait for each witness to connect and answer."""
MAX_ANSWER_BYTES = 64 * 1024
"""Most bytes of an answer read."""

_REJECTED = {
    403: "it does not trust this log's key for its origin (403)",
    404: "it does not follow this log (404)",
}


class _Failed(Exception):
    """No usable answer (network, time-out, a body not in the protocol's form)."""


def _post(witness: Witness, body: bytes, timeout: float) -> tuple[int, str, bytes]:
    """POST ``body`` to the witness's add-checkpoint: (status, content type, body)."""
    request = urllib.request.Request(
        witness.url + ADD_CHECKPOINT, data=body, method="POST",
        headers={"Content-Type": "text/plain; charset=utf-8"},
    )
    try:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.status, answer.headers.get("Content-Type", ""), answer.read(
                    MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as answer:
            with answer:
                return answer.code, answer.headers.get("Content-Type", ""), answer.read(
                    MAX_ANSWER_BYTES)
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise _Failed(f"no answer: {reason}") from None


def _held_size(content_type: str, body: bytes) -> int:
    if content_type != SIZE_CONTENT_TYPE:
        raise _Failed(f"409 with content type {content_type[:40]!r}, not {SIZE_CONTENT_TYPE}")
    try:
        return parse_size_body(body)
    except MalformedRequestError as exc:
        raise _Failed(str(exc)) from None


def _first_line(body: bytes) -> str:
    """The first line of a witness's answer, at most 200 characters, non-printable ones
    (terminal escapes) shown as ``?``."""
    line = body.decode("utf-8", "replace").strip().split("\n", 1)[0][:200]
    return "".join(c if c.isprintable() else "?" for c in line)


def _cosignature(verifier: CosignatureVerifier, text: str, body: bytes) -> str:
    """The line of ``body`` that is ``verifier``'s valid cosignature of ``text``."""
    try:
        signatures = parse_note(text.encode("utf-8") + b"\n" + body).signatures
    except EvidenceError as exc:
        raise _Failed(f"200 whose body is not signature lines ({exc})") from None
    for sig in signatures:
        if verifier.verify(text, sig) is not None:
            return sig.line
    raise _Failed(f"200 without a valid cosignature by {verifier.label}")


def _ask(ledger: Ledger, note: bytes, cp: Checkpoint, witness: Witness,
         timeout: float) -> WitnessResult:
    verifier = CosignatureVerifier.from_vkey(witness.verifier_key)
    old = 0
    proof: tuple[bytes, ...] = ()
    status, content_type, body = _post(witness, format_add_checkpoint(0, (), note), timeout)
    if status == 409:
        old = _held_size(content_type, body)
        if old > cp.size:
            return WitnessResult(witness, "refused", (
                f"it cosigned tree size {old} of {cp.origin}, larger than this checkpoint's "
                f"{cp.size}: this log was rolled back, or the witness was shown another "
                "branch (409)"))
        if 0 < old < cp.size:
            proof = prove_consistency_checked(ledger, old, cp.size).proof
        status, content_type, body = _post(witness, format_add_checkpoint(old, proof, note),
                                           timeout)
    if status == 200:
        text = parse_note(note).text
        return WitnessResult(witness, "cosigned", f"cosigned tree size {cp.size}",
                             _cosignature(verifier, text, body))
    if status == 409:
        again = _held_size(content_type, body)
        if again == old == cp.size:
            return WitnessResult(witness, "refused", (
                f"it cosigned another root at tree size {cp.size}: a fork (409)"))
        raise _Failed(f"its tree size moved from {old} to {again} while asked (409); retry")
    if status == 422:
        return WitnessResult(witness, "refused", (
            f"this checkpoint does not extend the one it cosigned at tree size {old}: a fork "
            f"(422: {_first_line(body)})"))
    if status in _REJECTED:
        return WitnessResult(witness, "rejected", _REJECTED[status])
    if status == 400:
        return WitnessResult(witness, "rejected",
                             f"it calls the request malformed (400: {_first_line(body)})")
    raise _Failed(f"HTTP {status}: {_first_line(body)}")


def request_cosignatures(
    ledger: Ledger, note: bytes, checkpoint: Checkpoint, witnesses: Sequence[Witness],
    timeout: float = TIMEOUT,
) -> list[WitnessResult]:
    """Ask each witness, in order, to cosign ``note`` (see the module docstring).

    Args:
        ledger: the ledger whose log the checkpoint signs (consistency proofs come from it).
        note: the signed checkpoint note, as it will be stored.
        checkpoint: its parsed body.
        witnesses: the witnesses to ask.
        timeout: seconds per request.

    Returns:
        One :class:`~evidence_ledger.tlog.witness_protocol.WitnessResult` per witness, in
        order; ``cosignature`` holds the line of those that cosigned. Nothing is raised for
        a witness that refuses or cannot be reached.

    Raises:
        KeyFormatError: for a witness key that is not a cosignature key (type 0x04).
        EvidenceError: if the log is damaged where a consistency proof is made.
    """
    results = []
    for witness in witnesses:
        try:
            result = _ask(ledger, note, checkpoint, witness, timeout)
        except _Failed as exc:
            result = WitnessResult(witness, "failed", str(exc))
        results.append(result)
    return results
