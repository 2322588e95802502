"""Checkpoint cosignatures by witnesses (c2sp.org/tlog-cosignature v1.0.1, Ed25519), and
quorums of them (pure: bytes in, verdicts out).

A cosignature is one more signature line on a checkpoint's signed note
(c2sp.org/signed-note), by a *witness* that checked the checkpoint is consistent with
every earlier one it saw of that log (c2sp.org/tlog-witness). Several witnesses that saw
one tree each vouch that nobody was shown another: a split view needs them all to lie.

Keys (signature type 0x04, "timestamped Ed25519 checkpoint cosignatures")::

    key ID        = SHA-256(name || 0x0A || 0x04 || 32-byte Ed25519 public key)[:4]
    verifier key  = name "+" hex8(key ID) "+" base64(0x04 || 32-byte public key)

A witness's key is an ordinary Ed25519 note key (``keygen``); as a cosigner the same
public key gets type 0x04, hence another key ID, so its cosignatures are never taken
for checkpoint signatures, nor the other way round.

Signature line::

    "— " name " " base64(key ID (4 bytes) || timestamp (8 bytes, big-endian) || Ed25519 sig)

where the Ed25519 signature (RFC 8032) is over the signed message::

    "cosignature/v1\\n"
    "time " <timestamp, ASCII decimal, no leading zeros> "\\n"
    <the checkpoint's note text: origin, size, root, extension lines, final newline>

``timestamp`` is POSIX seconds, at most 2^63 - 1; a witness never signs 0.

A quorum is ``minimum`` distinct keys, of those trusted, each with a cosignature on the
note that verifies. A cosignature line by a trusted key that fails to verify makes the
note fail whatever else it carries (c2sp.org/signed-note: "If a signature from a known key
fails to verify, clients SHOULD reject the whole note").
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.tlog.checkpoint import parse_checkpoint
from evidence_ledger.tlog.note import (
    KeyFormatError,
    Note,
    NoteSignature,
    Signer,
    Verifier,
    key_id,
    parse_note,
    parse_vkey,
)

__all__ = [
    "HEADER",
    "MAX_TIMESTAMP",
    "SIG_COSIGNATURE_V1",
    "Cosignature",
    "CosignatureVerifier",
    "Cosigner",
    "QuorumError",
    "WitnessPolicy",
    "WitnessQuorum",
    "check_quorum",
    "cosigned_message",
]

SIG_COSIGNATURE_V1 = 0x04
"""Signature type byte of Ed25519 ``cosignature/v1`` (c2sp.org/signed-note §Signature types)."""
HEADER = "cosignature/v1"
"""The first line of every signed message: domain separation."""
MAX_TIMESTAMP = (1 << 63) - 1
"""Largest timestamp a cosignature may carry (POSIX seconds)."""
_TIMESTAMP_BYTES = 8
_SIGNATURE_BYTES = 64


class QuorumError(EvidenceError):
    """A checkpoint without enough valid witness cosignatures (exit code 1; rule
    ``witness_quorum``).

    Attributes:
        quorum: what was found.
    """

    def __init__(self, quorum: WitnessQuorum) -> None:
        super().__init__(f"witness_quorum: {quorum.describe()}")
        self.quorum = quorum


def cosigned_message(checkpoint_text: str, timestamp: int) -> bytes:
    """The message a witness signs: ``cosignature/v1\\ntime <t>\\n`` + the note text.

    Args:
        checkpoint_text: the checkpoint's note text (c2sp.org/tlog-checkpoint, ending in a
            newline, without the blank line and signatures).
        timestamp: POSIX seconds, ``0 <= timestamp <= 2**63 - 1``.

    Raises:
        CheckpointFormatError: if the text is not a checkpoint.
        EvidenceError: if the timestamp is out of range.
    """
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise EvidenceError(f"cosignature timestamp {timestamp} is not in 0..2^63-1")
    parse_checkpoint(checkpoint_text)
    return f"{HEADER}\ntime {timestamp}\n{checkpoint_text}".encode()


@dataclass(frozen=True)
class CosignatureVerifier:
    """A witness's Ed25519 cosignature key (type 0x04).

    Attributes:
        name: the witness's key name.
        key_id: 32-bit key ID (type byte 0x04 in the hash).
        public_key: 32-byte Ed25519 public key.
    """

    name: str
    key_id: int
    public_key: bytes

    @classmethod
    def from_vkey(cls, vkey: str) -> CosignatureVerifier:
        """Parse ``name+hex8(keyid)+base64(0x04 || 32-byte public key)``.

        Raises:
            KeyFormatError: if the string is malformed, not of type 0x04 (a note key's
                0x01 is named as such), or its key ID does not match.
        """
        hint = (" (a cosignature key; `evidence-ledger witness key KEY` prints a "
                "witness's)")
        return cls(*parse_vkey(vkey, SIG_COSIGNATURE_V1, hint))

    @property
    def vkey(self) -> str:
        """The verifier key string."""
        key = base64.b64encode(bytes([SIG_COSIGNATURE_V1]) + self.public_key).decode("ascii")
        return f"{self.label}+{key}"

    @property
    def label(self) -> str:
        """``name+hex8(keyid)``: how messages name the key."""
        return f"{self.name}+{self.key_id:08x}"

    def signed_by(self, sig: NoteSignature) -> bool:
        """True when the line names this key (its name and key ID both match)."""
        return (sig.name, sig.key_id) == (self.name, self.key_id)

    def verify(self, checkpoint_text: str, sig: NoteSignature) -> int | None:
        """The timestamp of ``sig`` when it is this key's valid cosignature of the text,
        else None (a line by another key, a wrong length, a bad signature)."""
        if not self.signed_by(sig) or len(sig.signature) != _TIMESTAMP_BYTES + _SIGNATURE_BYTES:
            return None
        timestamp = int.from_bytes(sig.signature[:_TIMESTAMP_BYTES], "big")
        try:
            message = cosigned_message(checkpoint_text, timestamp)
        except EvidenceError:
            return None
        verifier = Verifier(self.name, self.key_id, self.public_key)
        return timestamp if verifier.verify(message, sig.signature[_TIMESTAMP_BYTES:]) else None


class Cosigner:
    """A witness's signing key, making ``cosignature/v1`` signature lines.

    Args:
        signer: the witness's Ed25519 note key (``keygen``); its name names the witness.
    """

    def __init__(self, signer: Signer) -> None:
        self._signer = signer
        self.name = signer.name
        self.key_id = key_id(signer.name, signer.public_key, SIG_COSIGNATURE_V1)
        self.verifier = CosignatureVerifier(self.name, self.key_id, signer.public_key)

    def cosign(self, checkpoint_text: str, timestamp: int) -> NoteSignature:
        """The cosignature line of ``checkpoint_text`` at ``timestamp`` (POSIX seconds).

        Raises:
            CheckpointFormatError: if the text is not a checkpoint.
            EvidenceError: if the timestamp is not in ``1..2**63 - 1`` (a witness's
                cosignature never omits its time: c2sp.org/tlog-witness).
        """
        if timestamp == 0:
            raise EvidenceError("a witness's cosignature carries its time, never 0")
        message = cosigned_message(checkpoint_text, timestamp)
        signature = timestamp.to_bytes(_TIMESTAMP_BYTES, "big") + self._signer.sign(message)
        return NoteSignature(self.name, self.key_id, signature)


@dataclass(frozen=True)
class Cosignature:
    """A cosignature that verified.

    Attributes:
        witness: the key's ``name+hex8(keyid)``.
        timestamp: when the witness signed it, POSIX seconds.
    """

    witness: str
    timestamp: int


@dataclass(frozen=True)
class WitnessPolicy:
    """Which witnesses a verifier trusts, and how many must have cosigned.

    Attributes:
        verifiers: the trusted witness keys, distinct.
        minimum: cosignatures wanted, ``1 <= minimum <= len(verifiers)``.
    """

    verifiers: tuple[CosignatureVerifier, ...]
    minimum: int

    @classmethod
    def from_keys(cls, vkeys: Sequence[str], minimum: int | None) -> WitnessPolicy | None:
        """The policy of ``--witness-key VKEY``... ``--min-witnesses N`` (None: none given).

        ``minimum`` defaults to 1 when keys are given.

        Raises:
            UsageError: (KeyFormatError for a malformed key) for a minimum without keys,
                a minimum below 1 or above the number of distinct keys, or two keys with
                one name and key ID but different public keys.
        """
        if not vkeys:
            if minimum is not None:
                raise UsageError("--min-witnesses needs the witnesses' keys (--witness-key)")
            return None
        known: dict[tuple[str, int], CosignatureVerifier] = {}
        for vkey in vkeys:
            v = CosignatureVerifier.from_vkey(vkey)
            other = known.setdefault((v.name, v.key_id), v)
            if other.public_key != v.public_key:
                raise KeyFormatError(f"ambiguous witness keys: two keys named {v.label}")
        wanted = 1 if minimum is None else minimum
        if not 1 <= wanted <= len(known):
            raise UsageError(
                f"--min-witnesses {wanted}: want 1..{len(known)} (the distinct witness keys "
                "given)"
            )
        return cls(tuple(known.values()), wanted)


@dataclass(frozen=True)
class WitnessQuorum:
    """How one checkpoint stands against a :class:`WitnessPolicy`.

    Attributes:
        tree_size: the checkpoint's tree size.
        minimum: valid cosignatures wanted.
        keys: trusted witness keys.
        cosigned: the trusted keys whose cosignature verified, each once.
        failed: ``name+hex8`` of trusted keys with a cosignature line that does not verify.
    """

    tree_size: int
    minimum: int
    keys: int
    cosigned: tuple[Cosignature, ...]
    failed: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when at least ``minimum`` trusted keys cosigned and no line of theirs failed."""
        return len(self.cosigned) >= self.minimum and not self.failed

    def describe(self) -> str:
        """One line: what the checkpoint carries against what is wanted."""
        text = (f"checkpoint of tree size {self.tree_size} carries {len(self.cosigned)} valid "
                f"cosignature(s) by the {self.keys} witness key(s) given, want "
                f"{self.minimum}")
        if self.cosigned:
            text += f" (cosigned by {', '.join(c.witness for c in self.cosigned)})"
        if self.failed:
            text += f"; the cosignature of {', '.join(self.failed)} does not verify"
        return text

    def to_json(self) -> dict[str, object]:
        """``{"ok", "minimum", "keys", "cosigned": [{"witness", "timestamp"}], "failed"}``."""
        return {
            "ok": self.ok, "minimum": self.minimum, "keys": self.keys,
            "cosigned": [{"witness": c.witness, "timestamp": c.timestamp}
                         for c in self.cosigned],
            "failed": list(self.failed),
        }


def check_quorum(note: bytes | Note, policy: WitnessPolicy) -> WitnessQuorum:
    """Count the valid cosignatures on a checkpoint's note by the policy's witnesses.

    Lines by other keys (the log's own signature, unknown witnesses) are ignored.

    Args:
        note: the signed checkpoint (bytes, or a parsed :class:`Note`).
        policy: the trusted witnesses and the quorum.

    Returns:
        The :class:`WitnessQuorum` (check ``ok``); nothing is raised for a short quorum.

    Raises:
        MalformedNoteError, CheckpointFormatError: if the note or its text does not parse.
    """
    parsed = parse_note(note) if isinstance(note, bytes) else note
    tree_size = parse_checkpoint(parsed.text).size
    cosigned: list[Cosignature] = []
    failed: list[str] = []
    for verifier in policy.verifiers:
        lines = [s for s in parsed.signatures if verifier.signed_by(s)]
        times = [verifier.verify(parsed.text, s) for s in lines]
        if any(t is None for t in times):
            failed.append(verifier.label)
        elif times:
            cosigned.append(Cosignature(verifier.label, max(t for t in times if t is not None)))
    return WitnessQuorum(tree_size, policy.minimum, len(policy.verifiers), tuple(cosigned),
                         tuple(failed))
