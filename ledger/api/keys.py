"""Checkpoint signing keys, the one way keys are passed to the public API.

A signing key is a :class:`SigningKey`, made by :meth:`SigningKey.generate` or read by
:meth:`SigningKey.load` from a private key file (C2SP signed-note / Go ``sumdb/note``
format, ``PRIVATE+KEY+<name>+<hex8 key ID>+<base64>``, mode 0600). A verifier key is
always its string, ``<name>+<hex8 key ID>+<base64(0x01 || 32-byte Ed25519 public key)>``
(:attr:`SigningKey.verifier_key`), wherever a function takes ``verifier_keys``;
:meth:`SigningKey.generate` also writes it, one line, to the key's ``.vkey`` file
(:meth:`SigningKey.verifier_key_path`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from evidence_ledger.storage.keys import (
    check_new_key_path,
    keygen,
    load_signer,
    verifier_key_path,
)
from evidence_ledger.tlog.cosignature import Cosigner
from evidence_ledger.tlog.note import Signer

__all__ = ["SigningKey", "signing_keys", "verifier_keys"]


class SigningKey:
    """An Ed25519 checkpoint key read from its file.

    Attributes:
        path: the private key file.
        name: the key name, which is the origin of the checkpoints it signs.
        verifier_key: the C2SP verifier key string that checks its signatures.
    """

    def __init__(self, path: Path, signer: Signer) -> None:
        self.path = path
        self._signer = signer
        self.name = signer.name
        self.verifier_key = signer.verifier.vkey

    @classmethod
    def generate(cls, path: str | os.PathLike[str], origin: str) -> SigningKey:
        """Create a new key named ``origin``: write it to ``path`` (a new file, mode 0600)
        and its verifier key to :meth:`verifier_key_path` of ``path`` (a new file, one
        line). Neither is ever overwritten; a failed write leaves neither file.

        Raises:
            UsageError: if ``origin`` is not a valid key name (c2sp.org/signed-note),
                either file exists, or the key would lie inside a ledger directory.
            StorageError: if a file cannot be written.
        """
        keygen(origin, path)
        return cls.load(path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SigningKey:
        """Read the private key file at ``path``.

        Raises:
            UsageError: if it is missing, not a regular file, readable by group or others
                (like ssh, it wants mode 0600), or not a private key.
        """
        return cls(Path(path), load_signer(path))

    @staticmethod
    def check_new_path(path: str | os.PathLike[str]) -> None:
        """Raise :class:`UsageError` unless a new key (and its verifier key file) may be
        written at ``path``."""
        check_new_key_path(path)

    @staticmethod
    def verifier_key_path(path: str | os.PathLike[str]) -> Path:
        """The verifier key file :meth:`generate` writes beside the key file ``path``:
        ``ledger.key`` -> ``ledger.vkey``; a name not ending in ``.key`` gets ``.vkey``
        added (``ledger`` -> ``ledger.vkey``)."""
        return verifier_key_path(path)

    @property
    def public_key_pem(self) -> str:
        """The Ed25519 public key as PEM (SubjectPublicKeyInfo, RFC 8410), for tools that
        take one (securesystemslib, cosign, openssl)."""
        key = Ed25519PublicKey.from_public_bytes(self._signer.verifier.public_key)
        return key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode("ascii")

    @property
    def witness_key(self) -> str:
        """This key's cosignature verifier key (type 0x04, c2sp.org/tlog-cosignature): what
        logs and verifiers name a witness serving with this key by (``--witness``,
        ``--witness-key``). Its key ID differs from :attr:`verifier_key`'s."""
        return Cosigner(self._signer).verifier.vkey

    @property
    def signer(self) -> Signer:
        """The signer the stages below take (internal)."""
        return self._signer

    def __repr__(self) -> str:
        return f"SigningKey({str(self.path)!r}, verifier_key={self.verifier_key!r})"


def verifier_keys(keys: str | Iterable[str]) -> list[str]:
    """``keys`` as a list of C2SP verifier key strings (one string is one key).

    Raises:
        TypeError: for anything but strings (a :class:`SigningKey` names its string as
            ``key.verifier_key``).
    """
    found = [keys] if isinstance(keys, str) or not isinstance(keys, Iterable) else list(keys)
    for key in found:
        if not isinstance(key, str):
            hint = ": pass key.verifier_key" if isinstance(key, SigningKey) else ""
            raise TypeError(f"verifier keys are C2SP key strings, not {type(key).__name__}{hint}")
    return found


def signing_keys(keys: SigningKey | Iterable[SigningKey]) -> list[SigningKey]:
    """``keys`` as a list of :class:`SigningKey` (one key is a list of one).

    Raises:
        TypeError: for anything else (a key file's path: ``SigningKey.load(path)``).
    """
    found = [keys] if not isinstance(keys, Iterable) else list(keys)
    for key in found:
        if not isinstance(key, SigningKey):
            raise TypeError(f"signing keys are SigningKey objects (SigningKey.load(path)), "
                            f"not {type(key).__name__}")
    return found
