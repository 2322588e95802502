"""C2SP signed notes with Ed25519 keys (c2sp.org/signed-note, Go ``sumdb/note``).

A signed note is UTF-8 text ending in a newline, a blank line, then one or more
signature lines::

    <text, ending in "\\n">
    "\\n"
    "— " <key name> " " base64(4-byte big-endian key ID || signature) "\\n"   (one or more)

Keys (signature type 0x01, Ed25519, RFC 8032)::

    key ID        = SHA-256(name || 0x0A || 0x01 || 32-byte public key)[:4]  (uint32, BE)
    verifier key  = name "+" hex8(key ID) "+" base64(0x01 || 32-byte public key)
    private key   = "PRIVATE+KEY+" name "+" hex8(key ID) "+" base64(0x01 || 32-byte seed)

Parsing is strict: valid UTF-8, no control characters but newline, the text ends at
the *last* blank line, every line after it is a well-formed signature line (so
trailing garbage, a missing final newline or a signature line moved elsewhere is
malformed), base64 must be canonical standard base64, at most
:data:`MAX_SIGNATURES` signatures and :data:`MAX_NOTE_BYTES` bytes.

Verification follows the spec: signatures by unknown keys (name and key ID not both
those of a given verifier key) are ignored and never count as verified; a signature
by a known key that fails rejects the whole note; a note with no verified signature
is rejected.

Errors: a malformed or unverifiable note raises :class:`NoteError` (an
:class:`~evidence_ledger.format.errors.EvidenceError`, exit 1); a malformed key string raises
:class:`KeyFormatError` (a :class:`~evidence_ledger.format.errors.UsageError`, exit 2).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from evidence_ledger.format.errors import EvidenceError, UsageError

__all__ = [
    "MAX_NOTE_BYTES",
    "MAX_SIGNATURES",
    "SIG_ED25519",
    "InvalidSignatureError",
    "KeyFormatError",
    "MalformedNoteError",
    "Note",
    "NoteError",
    "NoteSignature",
    "OpenedNote",
    "Signer",
    "UnverifiedNoteError",
    "Verifier",
    "format_note",
    "is_valid_name",
    "key_id",
    "open_note",
    "parse_note",
    "parse_vkey",
    "sign_note",
]

SIG_ED25519 = 0x01
"""Signature type byte for Ed25519 (c2sp.org/signed-note)."""
MAX_SIGNATURES = 100
"""Most signature lines a note may carry (the spec asks verifiers to accept 16)."""
MAX_NOTE_BYTES = 1 << 20
"""Largest note accepted, in bytes."""
SIG_PREFIX = "— "  # U+2014 EM DASH, U+0020 SPACE
_HEX8 = re.compile(r"[0-9a-fA-F]{8}")


class NoteError(EvidenceError):
    """A signed note that does not parse or does not verify (exit code 1)."""


class MalformedNoteError(NoteError):
    """Bytes that are not a well-formed signed note."""


class UnverifiedNoteError(NoteError):
    """A well-formed note with no signature by any of the given verifier keys."""


class InvalidSignatureError(NoteError):
    """A signature by a known key (name and key ID match) that fails to verify.

    Attributes:
        name: key name.
        key_id: 32-bit key ID.
    """

    def __init__(self, name: str, key_id: int) -> None:
        super().__init__(f"invalid signature by key {name}+{key_id:08x}")
        self.name = name
        self.key_id = key_id


class KeyFormatError(UsageError):
    """A verifier or private key string that is not well-formed (exit code 2)."""


def is_valid_name(name: str) -> bool:
    """True when ``name`` is a valid key name: non-empty, no Unicode space, no ``+``."""
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def key_id(name: str, public_key: bytes, sig_type: int = SIG_ED25519) -> int:
    """The C2SP key ID: first 4 bytes of SHA-256(name || 0x0A || type || key), as uint32."""
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([sig_type]) + public_key)
    return int.from_bytes(digest.digest()[:4], "big")


def _b64decode(text: str) -> bytes:
    """Canonical standard base64 (RFC 4648 §4), or ValueError."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError("not base64") from exc
    if base64.b64encode(raw).decode("ascii") != text:
        raise ValueError("not canonical base64")
    return raw


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")



def _key_label(vkey: str) -> str:
    """How an error names a key string: never the key material, only its name."""
    name = vkey.split("+", 1)[0]
    return repr(name[:64] + "+…" if "+" in vkey else name[:64])

def parse_vkey(vkey: str, sig_type: int, hint: str = "") -> tuple[str, int, bytes]:
    """Parse a C2SP verifier key of an Ed25519 signature type (c2sp.org/signed-note
    §Verifier keys): ``name+hex8(keyid)+base64(sig_type || 32-byte public key)``.

    Args:
        vkey: the key string.
        sig_type: the signature type byte wanted (0x01 note signatures, 0x04
            c2sp.org/tlog-cosignature Ed25519 cosignatures).
        hint: appended to the message for a key of another type (what to pass instead).

    Returns:
        ``(name, key ID, 32-byte public key)``.

    Raises:
        KeyFormatError: if the string is malformed, of another type, or its key ID does not
            match the name and key (never naming the key material).
    """
    if vkey.startswith("PRIVATE+KEY+"):
        raise KeyFormatError(
            "that is a PRIVATE key string (not shown), not a verifier key; pass the "
            "verifier key that keygen printed"
        )
    label = _key_label(vkey)
    parts = vkey.split("+", 2)
    if len(parts) != 3:
        raise KeyFormatError(f"verifier key {label} is not name+keyid+key")
    name, hash16, key64 = parts
    if not is_valid_name(name):
        raise KeyFormatError(f"verifier key {label}: invalid key name {name!r}")
    if not _HEX8.fullmatch(hash16):
        raise KeyFormatError(f"verifier key {label}: key ID {hash16!r} is not 8 hex digits")
    try:
        key = _b64decode(key64)
    except ValueError as exc:
        raise KeyFormatError(f"verifier key {label}: key is {exc}") from exc
    if not key or key[0] != sig_type:
        alg = f"0x{key[0]:02x}" if key else "missing"
        raise KeyFormatError(
            f"verifier key {label}: signature type {alg}, want 0x{sig_type:02x}{hint}"
        )
    if len(key) != 33:
        raise KeyFormatError(
            f"verifier key {label}: Ed25519 key is {len(key) - 1} bytes, want 32"
        )
    got = int(hash16, 16)
    want = key_id(name, key[1:], sig_type)
    if got != want:
        raise KeyFormatError(
            f"verifier key {label}: key ID {got:08x} does not match the key, want {want:08x}"
        )
    return name, want, key[1:]


@dataclass(frozen=True)
class Verifier:
    """An Ed25519 verifier key.

    Attributes:
        name: key name (valid per :func:`is_valid_name`).
        key_id: 32-bit key ID (see :func:`key_id`).
        public_key: 32-byte Ed25519 public key.
    """

    name: str
    key_id: int
    public_key: bytes

    @classmethod
    def from_vkey(cls, vkey: str) -> Verifier:
        """Parse ``name+hex8(keyid)+base64(0x01 || 32-byte public key)``.

        Raises:
            KeyFormatError: if the string is malformed, the type is not Ed25519, or the
                key ID does not match the name and key.
        """
        return cls(*parse_vkey(vkey, SIG_ED25519))

    @property
    def vkey(self) -> str:
        """The verifier key string."""
        return f"{self.name}+{self.key_id:08x}+{_b64(bytes([SIG_ED25519]) + self.public_key)}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True when ``signature`` (64 bytes) is this key's Ed25519 signature of ``message``."""
        # cryptography is imported where a key is used: parsing a note needs none of it
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


class Signer:
    """An Ed25519 signing key with its name.

    Args:
        name: key name (valid per :func:`is_valid_name`).
        seed: 32-byte Ed25519 private key seed (RFC 8032).

    Raises:
        KeyFormatError: if the name is invalid or the seed is not 32 bytes.
    """

    def __init__(self, name: str, seed: bytes) -> None:
        if not is_valid_name(name):
            raise KeyFormatError(f"invalid key name {name!r}: empty, or has a space or '+'")
        if len(seed) != 32:
            raise KeyFormatError(f"Ed25519 seed is {len(seed)} bytes, want 32")
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        self.name = name
        self._seed = seed
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self.public_key = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key_id = key_id(name, self.public_key)

    @classmethod
    def generate(cls, name: str) -> Signer:
        """A new random key named ``name``."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
        )

        seed = Ed25519PrivateKey.generate().private_bytes(
            Encoding.Raw, PrivateFormat.Raw, NoEncryption()
        )
        return cls(name, seed)

    @classmethod
    def from_skey(cls, skey: str) -> Signer:
        """Parse ``PRIVATE+KEY+name+hex8(keyid)+base64(0x01 || 32-byte seed)``.

        Error messages never include the key material.

        Raises:
            KeyFormatError: if the string is malformed, the type is not Ed25519, or the
                key ID does not match the derived public key.
        """
        parts = skey.split("+", 4)
        if len(parts) != 5 or parts[0] != "PRIVATE" or parts[1] != "KEY":
            raise KeyFormatError("not a private key (want PRIVATE+KEY+name+keyid+key)")
        name, hash16, key64 = parts[2], parts[3], parts[4]
        if not is_valid_name(name):
            raise KeyFormatError(f"private key: invalid key name {name!r}")
        if not _HEX8.fullmatch(hash16):
            raise KeyFormatError("private key: key ID is not 8 hex digits")
        try:
            key = _b64decode(key64)
        except ValueError as exc:
            raise KeyFormatError(f"private key for {name}: key is {exc}") from exc
        if len(key) != 33 or key[0] != SIG_ED25519:
            raise KeyFormatError(f"private key for {name}: not an Ed25519 key (0x01 || 32 bytes)")
        signer = cls(name, key[1:])
        if int(hash16, 16) != signer.key_id:
            raise KeyFormatError(
                f"private key for {name}: key ID {hash16} does not match the key, "
                f"want {signer.key_id:08x}"
            )
        return signer

    @property
    def skey(self) -> str:
        """The private key string (secret)."""
        key = _b64(bytes([SIG_ED25519]) + self._seed)
        return f"PRIVATE+KEY+{self.name}+{self.key_id:08x}+{key}"

    @property
    def verifier(self) -> Verifier:
        """The matching :class:`Verifier`."""
        return Verifier(self.name, self.key_id, self.public_key)

    def sign(self, message: bytes) -> bytes:
        """Ed25519 signature of ``message`` (64 bytes, deterministic)."""
        return self._key.sign(message)


@dataclass(frozen=True)
class NoteSignature:
    """One signature line.

    Attributes:
        name: key name.
        key_id: 32-bit key ID (first 4 bytes of the decoded signature, big-endian).
        signature: the signature bytes after the key ID (64 for Ed25519).
    """

    name: str
    key_id: int
    signature: bytes

    @property
    def line(self) -> str:
        """The signature line, ``"— name base64(keyid || sig)\\n"``."""
        raw = self.key_id.to_bytes(4, "big") + self.signature
        return f"{SIG_PREFIX}{self.name} {_b64(raw)}\n"


@dataclass(frozen=True)
class Note:
    """A parsed (not yet verified) signed note.

    Attributes:
        text: the note text, ending in a newline, without the separating blank line.
        signatures: the signature lines, in order.
    """

    text: str
    signatures: tuple[NoteSignature, ...]


@dataclass(frozen=True)
class OpenedNote:
    """A note with at least one verified signature.

    Attributes:
        text: the note text (see :class:`Note`); trust it only because of ``verified``.
        verified: signatures by given verifier keys that verified (deduplicated).
        unverified: signatures by unknown keys, ignored (deduplicated).
    """

    text: str
    verified: tuple[NoteSignature, ...]
    unverified: tuple[NoteSignature, ...]


def _check_text(text: str) -> None:
    for ch in text:
        if ch < " " and ch != "\n":
            raise MalformedNoteError(
                f"malformed note: control character U+{ord(ch):04X} (only newline is allowed)"
            )


def parse_note(data: bytes) -> Note:
    """Parse a signed note's structure (C2SP signed-note §Format); checks no signature.

    Args:
        data: the note bytes, UTF-8, at most :data:`MAX_NOTE_BYTES`.

    Raises:
        MalformedNoteError: for anything but a well-formed note.
    """
    if len(data) > MAX_NOTE_BYTES:
        raise MalformedNoteError(f"malformed note: {len(data)} bytes, want <= {MAX_NOTE_BYTES}")
    if not data.strip():
        raise MalformedNoteError("malformed note: the file is empty (not a signed note)")
    try:
        msg = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedNoteError(f"malformed note: not UTF-8 at byte {exc.start}") from exc
    _check_text(msg)
    split = msg.rfind("\n\n")
    if split < 0:
        raise MalformedNoteError("malformed note: no blank line before the signatures")
    text, block = msg[: split + 1], msg[split + 2 :]
    if not block:
        raise MalformedNoteError("malformed note: no signature lines after the last blank line")
    if not block.endswith("\n"):
        raise MalformedNoteError("malformed note: missing final newline (or trailing garbage)")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNoteError(
            f"malformed note: {len(lines)} signature lines, want <= {MAX_SIGNATURES}"
        )
    signatures = []
    for number, line in enumerate(lines, 1):
        where = f"malformed note: signature line {number}"
        if not line.startswith(SIG_PREFIX):
            raise MalformedNoteError(f"{where} does not start with '— ' ({line[:40]!r})")
        name, sep, b64 = line[len(SIG_PREFIX) :].partition(" ")
        if not sep or not is_valid_name(name):
            raise MalformedNoteError(f"{where}: invalid key name {name!r}")
        try:
            raw = _b64decode(b64)
        except ValueError as exc:
            raise MalformedNoteError(f"{where}: signature is {exc}") from exc
        if len(raw) < 5:
            raise MalformedNoteError(f"{where}: signature is {len(raw)} bytes, want >= 5")
        signatures.append(NoteSignature(name, int.from_bytes(raw[:4], "big"), raw[4:]))
    return Note(text, tuple(signatures))


def format_note(note: Note) -> bytes:
    """The bytes of ``note``: text, blank line, signature lines (inverse of parse_note).

    Raises:
        MalformedNoteError: if the text does not end in a newline or has a control
            character, or there is no signature.
    """
    if not note.text.endswith("\n"):
        raise MalformedNoteError("note text must end with a newline")
    _check_text(note.text)
    if not note.signatures:
        raise MalformedNoteError("a signed note needs at least one signature")
    for sig in note.signatures:
        if not is_valid_name(sig.name):
            raise MalformedNoteError(f"invalid key name {sig.name!r}")
    return (note.text + "\n" + "".join(s.line for s in note.signatures)).encode("utf-8")


def sign_note(text: str, signers: Sequence[Signer]) -> bytes:
    """Sign ``text`` with each signer, in order: one signature line per key.

    Args:
        text: note text, ending in a newline, no control characters but newline.
        signers: one or more keys with distinct (name, key ID).

    Returns:
        The signed note bytes (UTF-8).

    Raises:
        MalformedNoteError: if the text is not valid note text.
        KeyFormatError: if no signer is given or two share a name and key ID.
    """
    if not signers:
        raise KeyFormatError("at least one signing key is needed")
    seen: set[tuple[str, int]] = set()
    for s in signers:
        if (s.name, s.key_id) in seen:
            raise KeyFormatError(f"key {s.name}+{s.key_id:08x} given twice")
        seen.add((s.name, s.key_id))
    message = text.encode("utf-8")
    sigs = tuple(NoteSignature(s.name, s.key_id, s.sign(message)) for s in signers)
    data = format_note(Note(text, sigs))
    if parse_note(data).text != text:  # e.g. text ending in a line that looks like a signature
        raise MalformedNoteError("note text would not parse back unchanged")
    return data


def _verifier_map(verifiers: Sequence[Verifier]) -> dict[tuple[str, int], Verifier]:
    known: dict[tuple[str, int], Verifier] = {}
    for v in verifiers:
        other = known.setdefault((v.name, v.key_id), v)
        if other.public_key != v.public_key:
            raise KeyFormatError(f"ambiguous verifier keys: two keys named {v.name}+{v.key_id:08x}")
    return known


def open_note(data: bytes, verifiers: Sequence[Verifier]) -> OpenedNote:
    """Parse ``data`` and verify its signatures with ``verifiers`` (C2SP signed-note).

    Args:
        data: signed note bytes.
        verifiers: the trusted keys.

    Returns:
        The note with its verified and (ignored) unverified signatures.

    Every signature line by a given key is verified (C2SP: "verifiers MUST verify the
    signature"), not only its first; a line repeated word for word is refused.

    Raises:
        MalformedNoteError: if the note is not well-formed, or repeats a signature line of
            a given key.
        InvalidSignatureError: if a signature by a given key does not verify.
        UnverifiedNoteError: if no signature is by a given key.
        KeyFormatError: if two verifiers share a name and key ID but not the key.
    """
    note = parse_note(data)
    known = _verifier_map(verifiers)
    message = note.text.encode("utf-8")
    verified: list[NoteSignature] = []
    unverified: list[NoteSignature] = []
    for sig in note.signatures:
        v = known.get((sig.name, sig.key_id))
        if v is None:
            if sig not in unverified:
                unverified.append(sig)
            continue
        if sig in verified:
            raise MalformedNoteError(f"the signature line of {sig.name}+{sig.key_id:08x} "
                                     "is repeated")
        if not v.verify(message, sig.signature):  # every line of a known key: MUST verify
            raise InvalidSignatureError(sig.name, sig.key_id)
        if all((s.name, s.key_id) != (sig.name, sig.key_id) for s in verified):
            verified.append(sig)
    if not verified:
        signed_by = ", ".join(f"{s.name}+{s.key_id:08x}" for s in unverified) or "nobody"
        given = ", ".join(f"{v.name}+{v.key_id:08x}" for v in known.values()) or "none"
        raise UnverifiedNoteError(
            f"note has no signature by a given verifier key (signed by {signed_by}; "
            f"keys given: {given})"
        )
    return OpenedNote(note.text, tuple(verified), tuple(unverified))
