"""Checkpoints: signed tree heads in the c2sp.org/tlog-checkpoint format, and their store.

A checkpoint is a C2SP signed note (:mod:`ledger.note`) whose text is::

    <origin>\\n                  non-empty; here, the name of the log's key
    <tree size>\\n               ASCII decimal, no leading zeros ("0" for the empty tree)
    <base64 root hash>\\n        standard base64 of the 32-byte RFC 9162 root
    [<extension line>\\n ...]    optional, each non-empty

Every checkpoint the ledger signs is kept, append-only, in ``<ledger>/checkpoints/``::

    00000001.note, 00000002.note, ...   the signed notes, numbered from 1, never
                                        rewritten (created by link(2): no overwrite)
    .lock                               flock held while a checkpoint is added

The origin of a ledger's checkpoints is the name of the first key that signed one;
a new checkpoint is signed only if the ledger still extends the latest stored one
(the log must never sign two inconsistent checkpoints, c2sp.org/tlog-checkpoint).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import EvidenceError, StorageError, UsageError
from .fsutil import file_lock, fsync_path
from .log import Ledger
from .merkle import HASH_SIZE
from .note import OpenedNote, Signer, Verifier, open_note, parse_note, sign_note
from .tree_store import TreeStore

__all__ = [
    "CHECKPOINT_DIR",
    "Checkpoint",
    "CheckpointFormatError",
    "CheckpointOriginError",
    "CheckpointStore",
    "StoredCheckpoint",
    "VerifiedCheckpoint",
    "create_checkpoint",
    "parse_checkpoint",
    "verify_checkpoint",
]

CHECKPOINT_DIR = "checkpoints"
LOCK_NAME = ".lock"
NAME_RE = re.compile(r"([0-9]{8,})\.note")
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
        NoteError: (from :func:`ledger.note.open_note`) malformed note, bad or no
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


@dataclass(frozen=True)
class StoredCheckpoint:
    """One file in ``<ledger>/checkpoints/``.

    Attributes:
        number: its number (1-based, from the file name).
        path: the file.
        data: its bytes (a signed note, not yet verified).
    """

    number: int
    path: Path
    data: bytes


class CheckpointStore:
    """The append-only checkpoints of one ledger (see the module docstring).

    Args:
        ledger: the ledger or its directory.
    """

    def __init__(self, ledger: Ledger | str | os.PathLike[str] | None = None) -> None:
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self.directory = self.ledger.directory / CHECKPOINT_DIR

    def files(self) -> tuple[list[tuple[int, Path]], list[Path]]:
        """``([(number, path), ...] sorted by number, [other visible files])``."""
        numbered: list[tuple[int, Path]] = []
        strays: list[Path] = []
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            raise EvidenceError(f"cannot list {self.directory}: {exc.strerror}") from exc
        for name in names:
            if name.startswith("."):
                continue
            match = NAME_RE.fullmatch(name)
            if match and name == f"{int(match.group(1)):08d}.note":
                numbered.append((int(match.group(1)), self.directory / name))
            else:
                strays.append(self.directory / name)
        numbered.sort()
        return numbered, strays

    def read(self, number: int, path: Path) -> StoredCheckpoint:
        """Read one checkpoint file.

        Raises:
            EvidenceError: if it cannot be read.
        """
        try:
            return StoredCheckpoint(number, path, path.read_bytes())
        except OSError as exc:
            raise EvidenceError(f"cannot read {path}: {exc.strerror}") from exc

    def all(self) -> list[StoredCheckpoint]:
        """Every stored checkpoint, by number."""
        return [self.read(n, p) for n, p in self.files()[0]]

    def latest(self) -> StoredCheckpoint | None:
        """The checkpoint with the highest number, or None."""
        numbered = self.files()[0]
        return self.read(*numbered[-1]) if numbered else None

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the checkpoint store's flock.

        Raises:
            StorageError: if the directory or lock file cannot be created.
        """
        with file_lock(self.directory / LOCK_NAME):
            yield

    def append(self, data: bytes) -> StoredCheckpoint:
        """Store ``data`` as the next checkpoint, durably; the lock must be held.

        Raises:
            StorageError: if it cannot be written (nothing is stored then).
        """
        numbered = self.files()[0]
        number = numbered[-1][0] + 1 if numbered else 1
        path = self.directory / f"{number:08d}.note"
        tmp = self.directory / f".tmp-{os.getpid()}-{number}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o444)
            os.link(tmp, path)  # fails rather than overwrite
            os.unlink(tmp)
            fsync_path(self.directory)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise StorageError(f"cannot store checkpoint {path}: {exc}") from exc
        return StoredCheckpoint(number, path, data)


def create_checkpoint(
    ledger: Ledger | str | os.PathLike[str] | None, signers: Sequence[Signer]
) -> StoredCheckpoint:
    """Sign the ledger's current tree head with every signer and store it.

    The origin is the first signer's name (and must match the origin of the stored
    checkpoints). Refuses to sign unless the tree extends the latest stored checkpoint.

    Args:
        ledger: the ledger or its directory.
        signers: one or more keys; one signature line each, in order.

    Returns:
        The stored checkpoint; ``data`` is the signed note exactly as stored.

    Raises:
        UsageError: if there is no ledger, no key, or the origin differs from the
            stored checkpoints'.
        EvidenceError: if the log is damaged, or does not extend the latest checkpoint
            (rolled back or rewritten), or that checkpoint is unreadable.
        StorageError: if the checkpoint cannot be written.
    """
    if not signers:
        raise UsageError("at least one --key is needed to sign a checkpoint")
    origin = signers[0].name
    store = CheckpointStore(ledger)
    with store.lock():
        tree = TreeStore(store.ledger).update()
        latest = store.latest()
        if latest is not None:
            try:
                previous = parse_checkpoint(parse_note(latest.data).text)
            except EvidenceError as exc:
                raise EvidenceError(
                    f"latest checkpoint {latest.path} is unreadable ({exc}); run verify"
                ) from exc
            if previous.origin != origin:
                raise UsageError(
                    f"the ledger's checkpoints have origin {previous.origin!r}; the first "
                    f"key is named {origin!r}"
                )
            if previous.size > tree.size or tree.root(previous.size) != previous.root:
                raise EvidenceError(
                    f"refusing to sign: the ledger ({tree.size} entries) does not extend "
                    f"checkpoint {latest.number} (tree size {previous.size}); "
                    "it was rolled back or rewritten (run verify)"
                )
        body = Checkpoint(origin, tree.size, tree.root()).to_text()
        return store.append(sign_note(body, signers))
