"""Checkpoints: signed tree heads in the c2sp.org/tlog-checkpoint format (pure: bytes in,
checkpoints out; the store is :mod:`evidence_ledger.storage.checkpoint_store`).

A checkpoint is a C2SP signed note (:mod:`evidence_ledger.tlog.note`) whose text is::

    <origin>\\n                  non-empty; here, the name of the log's key
    <tree size>\\n               ASCII decimal, no leading zeros ("0" for the empty tree)
    <base64 root hash>\\n        standard base64 of the 32-byte RFC 9162 root
    [<extension line>\\n ...]    optional, each non-empty
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass

from evidence_ledger.format.errors import EvidenceError
from evidence_ledger.tlog.merkle import HASH_SIZE
from evidence_ledger.tlog.note import OpenedNote, Verifier, open_note

__all__ = [
    "Checkpoint",
    "CheckpointFormatError",
    "CheckpointOriginError",
    "VerifiedCheckpoint",
    "parse_checkpoint",
    "verify_checkpoint",
]

_SIZE_RE = re.compile(r"0|[1-9][0-9]*")
MAX_TREE_SIZE = (1 << 64) - 1


class CheckpointFormatError(EvidenceError):
    """Note text that is not a c2sp.org/tlog-checkpoint body (exit code 1)."""


class CheckpointOriginError(EvidenceError):
    """A checkpoint for another log than the one expected (exit code 1).

    Attributes:
        got: the checkpoint's origin line.
        want: the expected origin.
    """

    def __init__(self, got: str, want: str, detail: str = "") -> None:
        super().__init__(f"checkpoint origin {got!r}, want {want!r}{detail}")
        self.got = got
        self.want = want


@dataclass(frozen=True)
class Checkpoint:
    """A tree head (c2sp.org/tlog-checkpoint note text).

    Attributes:
        origin: the log's identity (first line).
        size: number of leaves, ``0 <= size < 2**64``.
        root: RFC 9162 root of the tree of ``size`` leaves, 32 bytes.
        extensions: optional extension lines, each non-empty, without newlines.
    """

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def to_text(self) -> str:
        """The note text: origin, size, base64 root, extension lines, each with ``\\n``.

        Raises:
            CheckpointFormatError: if a field cannot be represented.
        """
        text = "".join(
            line + "\n"
            for line in (
                self.origin,
                str(self.size),
                base64.b64encode(self.root).decode("ascii"),
                *self.extensions,
            )
        )
        if parse_checkpoint(text) != self:
            raise CheckpointFormatError(f"cannot format {self!r} as a checkpoint")
        return text


def parse_checkpoint(text: str) -> Checkpoint:
    """Parse checkpoint note text (c2sp.org/tlog-checkpoint §Note text), strictly.

    Raises:
        CheckpointFormatError: unless the text is at least three non-empty lines, each
            ending in a newline: a non-empty origin, a decimal tree size without
            leading zeros, the canonical base64 of a 32-byte root, then non-empty
            extension lines.
    """
    if not text.endswith("\n"):
        raise CheckpointFormatError("checkpoint text does not end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointFormatError(f"checkpoint has {len(lines)} lines, want at least 3")
    origin, size_text, root_text, *extensions = lines
    if not origin:
        raise CheckpointFormatError("checkpoint origin (line 1) is empty")
    if not _SIZE_RE.fullmatch(size_text) or int(size_text) > MAX_TREE_SIZE:
        raise CheckpointFormatError(
            f"checkpoint tree size (line 2) {size_text[:40]!r} is not a decimal uint64 "
            "without leading zeros"
        )
    try:
        root = base64.b64decode(root_text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise CheckpointFormatError(
            f"checkpoint root hash (line 3) {root_text[:60]!r} is not base64"
        ) from exc
    if len(root) != HASH_SIZE or base64.b64encode(root).decode("ascii") != root_text:
        raise CheckpointFormatError(
            f"checkpoint root hash (line 3) is {len(root)} bytes, want {HASH_SIZE} in "
            "canonical base64"
        )
    for number, line in enumerate(extensions, 4):
        if not line:
            raise CheckpointFormatError(f"checkpoint extension line {number} is empty")
    return Checkpoint(origin, int(size_text), root, tuple(extensions))


@dataclass(frozen=True)
class VerifiedCheckpoint:
    """A checkpoint whose note verified.

    Attributes:
        checkpoint: the parsed tree head.
        note: the opened note (verified and ignored signatures).
    """

    checkpoint: Checkpoint
    note: OpenedNote


def verify_checkpoint(
    data: bytes, verifiers: Sequence[Verifier], origin: str | None = None
) -> VerifiedCheckpoint:
    """Verify a signed checkpoint: note signatures first, then the body, then the origin.

    Args:
        data: the signed note bytes.
        verifiers: trusted keys; at least one must have signed.
        origin: the expected origin line; by default it must equal the name of a key
            whose signature verified (C2SP: the log's key name matches the origin).

    Raises:
        NoteError: (from :func:`evidence_ledger.tlog.note.open_note`) malformed note, bad or no
            trusted signature.
        CheckpointFormatError: if the text is not a checkpoint.
        CheckpointOriginError: if the origin is not the one expected.
        KeyFormatError: if the verifier keys are ambiguous.
    """
    note = open_note(data, verifiers)
    checkpoint = parse_checkpoint(note.text)
    if origin is not None:
        if checkpoint.origin != origin:
            raise CheckpointOriginError(checkpoint.origin, origin)
    else:
        names = sorted({s.name for s in note.verified})
        if checkpoint.origin not in names:
            raise CheckpointOriginError(
                checkpoint.origin, names[0], " (the name of the key that signed it)"
            )
    return VerifiedCheckpoint(checkpoint, note)


