"""The witness protocol's ``add-checkpoint`` call (c2sp.org/tlog-witness v1.0.0), pure:
request bodies parsed and written, and the witness's judgement of one request against the
latest checkpoint it cosigned for that log. The HTTP server is
:mod:`evidence_ledger.api.witness`, its durable state
:mod:`evidence_ledger.storage.witness_state`, the log's client
:mod:`evidence_ledger.record.witnessing`.

Request (``POST <prefix>/add-checkpoint``)::

    "old " <size of the previous checkpoint, decimal, no leading zeros> "\\n"
    <consistency proof hash, base64> "\\n"        (0 to 63 lines)
    "\\n"
    <the signed checkpoint note>

Answers, checked in this order (the spec's, v1.0.0; its editor's draft adds the two marked
*draft*, which only refuse what v1.0.0 leaves undefined):

====  ==================================================================================
400   malformed body or checkpoint; or old size > checkpoint size
404   the checkpoint's origin is not a log this witness follows
403   no signature by a key trusted for that origin, or one by such a key fails
409   old size is not the size it last cosigned (body: that size, ``text/x.tlog.size``);
      or old size = checkpoint size = its size but the roots differ (same body)
422   the consistency proof from old size does not verify against the root it holds;
      a proof given with old size 0 (*draft*); size 0 with another root than the empty
      tree's (*draft*)
200   body: the witness's cosignature line(s) (c2sp.org/tlog-cosignature)
====  ==================================================================================

(The draft answers a same-size root mismatch with 422; v1.0.0 with 409, kept here: its
body is the size the client sent, which tells a fork from a stale ``old`` line.)
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.tlog.checkpoint import Checkpoint, parse_checkpoint
from evidence_ledger.tlog.cosignature import CosignatureVerifier
from evidence_ledger.tlog.merkle import EMPTY_ROOT, HASH_SIZE
from evidence_ledger.tlog.note import (
    InvalidSignatureError,
    NoteError,
    OpenedNote,
    UnverifiedNoteError,
    Verifier,
    open_note,
    parse_note,
)
from evidence_ledger.tlog.proof_verify import ProofError, verify_consistency

__all__ = [
    "ADD_CHECKPOINT",
    "MAX_PROOF_LINES",
    "SIZE_CONTENT_TYPE",
    "AddCheckpoint",
    "MalformedRequestError",
    "Verdict",
    "Witness",
    "WitnessResult",
    "format_add_checkpoint",
    "judge",
    "parse_add_checkpoint",
    "parse_size_body",
]

ADD_CHECKPOINT = "/add-checkpoint"
"""The call's path under the witness's submission prefix."""
SIZE_CONTENT_TYPE = "text/x.tlog.size"
"""Content type of a 409 answer's body: the size the witness holds, decimal, newline."""
MAX_PROOF_LINES = 63
"""Most consistency proof lines a request may carry."""
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")


class MalformedRequestError(EvidenceError):
    """An ``add-checkpoint`` body (or a 409 body) not in the protocol's form (HTTP 400)."""


def _size(text: str, what: str) -> int:
    if not _DECIMAL.fullmatch(text) or int(text) >= 1 << 64:
        raise MalformedRequestError(f"{what} {text[:24]!r} is not a decimal uint64 without "
                                    "leading zeros")
    return int(text)


def _hash(line: str, number: int) -> bytes:
    try:
        raw = base64.b64decode(line.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raw = b""
    if len(raw) != HASH_SIZE or base64.b64encode(raw).decode("ascii") != line:
        raise MalformedRequestError(
            f"consistency proof line {number} is not the base64 of a {HASH_SIZE}-byte hash")
    return raw


@dataclass(frozen=True)
class AddCheckpoint:
    """One ``add-checkpoint`` request.

    Attributes:
        old_size: the size of the checkpoint the client believes the witness last cosigned.
        proof: RFC 6962 consistency proof from ``old_size`` to the checkpoint's size.
        note: the signed checkpoint note, bytes as sent.
        checkpoint: its parsed body (signatures not checked here).
    """

    old_size: int
    proof: tuple[bytes, ...]
    note: bytes
    checkpoint: Checkpoint



def format_add_checkpoint(old_size: int, proof: Sequence[bytes], note: bytes) -> bytes:
    """The request body: ``old <size>``, one base64 line per proof hash, a blank line, the
    signed checkpoint note (bytes as stored)."""
    lines = [f"old {old_size}", *(base64.b64encode(h).decode("ascii") for h in proof)]
    return ("\n".join(lines) + "\n\n").encode("ascii") + note


def parse_add_checkpoint(body: bytes) -> AddCheckpoint:
    """Parse a request body (c2sp.org/tlog-witness §add-checkpoint), strictly.

    Raises:
        MalformedRequestError: for an old size line that is not ``old <decimal>``, more than
            :data:`MAX_PROOF_LINES` proof lines or one that is not a base64 hash, no blank
            line, a note that is not a well-formed signed note, or a note text that is not
            a checkpoint.
    """
    head, sep, note = body.partition(b"\n\n")
    if not sep:
        raise MalformedRequestError("no blank line after the old size and proof lines")
    try:
        lines = head.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise MalformedRequestError("the old size and proof lines are not ASCII") from None
    first, proof_lines = lines[0], lines[1:]
    if not first.startswith("old "):
        raise MalformedRequestError(f"first line {first[:24]!r} is not 'old <size>'")
    old_size = _size(first[4:], "old size")
    if len(proof_lines) > MAX_PROOF_LINES:
        raise MalformedRequestError(
            f"{len(proof_lines)} consistency proof lines, want <= {MAX_PROOF_LINES}")
    proof = tuple(_hash(line, n) for n, line in enumerate(proof_lines, 1))
    try:
        checkpoint = parse_checkpoint(parse_note(note).text)
    except EvidenceError as exc:
        raise MalformedRequestError(f"the checkpoint: {exc}") from None
    return AddCheckpoint(old_size, proof, note, checkpoint)


def parse_size_body(body: bytes) -> int:
    """The size in a 409 answer's ``text/x.tlog.size`` body (``<decimal>\\n``).

    Raises:
        MalformedRequestError: for any other body.
    """
    if not body.endswith(b"\n") or len(body) > 21:
        raise MalformedRequestError(f"409 body {body[:24]!r} is not '<size>\\n'")
    return _size(body[:-1].decode("ascii", "replace"), "409 body")


@dataclass(frozen=True)
class Verdict:
    """The witness's answer to one request (before it cosigns or stores anything).

    Attributes:
        status: HTTP status, per the table in the module docstring.
        reason: one line saying why (for the answer's body and the witness's log).
        size: for 409, the size the witness holds (the body); else None.
        opened: for 200, the note with the log signatures that verified.
    """

    status: int
    reason: str
    size: int | None = None
    opened: OpenedNote | None = None


def judge(request: AddCheckpoint, trusted: Sequence[Verifier],
          latest: Checkpoint | None) -> Verdict:
    """What a witness answers ``request`` for a log it follows (origin already matched).

    Args:
        request: the parsed request.
        trusted: the log keys trusted for the checkpoint's origin.
        latest: the latest checkpoint this witness cosigned for that origin (None: none).

    Returns:
        The :class:`Verdict`; status 200 means: cosign ``request.checkpoint``, store it as
        the new latest, then answer (never the other way round).
    """
    cp = request.checkpoint
    try:
        opened = open_note(request.note, trusted)
    except (UnverifiedNoteError, InvalidSignatureError) as exc:
        return Verdict(403, str(exc))
    except (NoteError, UsageError) as exc:  # cannot happen for a parsed note and sane keys
        return Verdict(400, str(exc))
    old = request.old_size
    if old > cp.size:
        return Verdict(400, f"old size {old} is larger than the checkpoint's {cp.size}")
    held = 0 if latest is None else latest.size
    if old != held:
        return Verdict(409, f"old size {old}, but the latest checkpoint cosigned has size "
                            f"{held}", size=held)
    if cp.size == 0 and cp.root != EMPTY_ROOT:
        return Verdict(422, "a checkpoint of size 0 must carry the empty tree's root")
    if old == 0:
        if request.proof:
            return Verdict(422, "a consistency proof from old size 0 must be empty")
        return Verdict(200, "ok", opened=opened)
    assert latest is not None
    if old == cp.size:
        if request.proof:
            return Verdict(422, "a consistency proof between equal sizes must be empty")
        if cp.root != latest.root:
            return Verdict(409, f"another root at tree size {old} than the one cosigned: a "
                                "fork", size=held)
        return Verdict(200, "ok", opened=opened)
    try:
        verify_consistency(old, cp.size, request.proof, latest.root, cp.root)
    except ProofError as exc:
        return Verdict(422, f"the consistency proof from {old} to {cp.size} does not verify "
                            f"against the root cosigned at {old}: {exc}")
    return Verdict(200, "ok", opened=opened)


@dataclass(frozen=True)
class Witness:
    """A witness a log asks for cosignatures: its submission prefix and its key.

    Attributes:
        url: the submission prefix, ``http://`` or ``https://``, without a trailing ``/``.
        verifier_key: its cosignature verifier key (type 0x04, ``witness key`` prints it).
    """

    url: str
    verifier_key: str

    @classmethod
    def parse(cls, text: str) -> Witness:
        """``URL=VKEY`` (split at the first ``=``: the URL holds none) as a :class:`Witness`.

        Raises:
            UsageError: unless ``text`` is an http(s) URL, ``=``, and a type 0x04 key.
        """
        url, sep, vkey = text.partition("=")
        if not sep or not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
            raise UsageError(f"witness {text[:80]!r}: want URL=VKEY, the URL http(s)://...")
        CosignatureVerifier.from_vkey(vkey)
        return cls(url.rstrip("/"), vkey)


@dataclass(frozen=True)
class WitnessResult:
    """What one witness said to one checkpoint.

    Attributes:
        witness: the witness asked.
        status: ``cosigned``; ``refused`` (it holds a tree this checkpoint does not extend:
            a fork, or a log rolled back); ``rejected`` (it does not follow this log or key,
            or called the request malformed); ``unreachable`` (no usable answer).
        detail: one line: what it answered.
        cosignature: the signature line it returned (``cosigned`` only).
    """

    witness: Witness
    status: str
    detail: str
    cosignature: str | None = None

    @property
    def ok(self) -> bool:
        """True when it cosigned."""
        return self.status == "cosigned"

    def to_json(self) -> dict[str, object]:
        """``{"url", "verifier_key", "status", "detail"}``."""
        return {"url": self.witness.url, "verifier_key": self.witness.verifier_key,
                "status": self.status, "detail": self.detail}
