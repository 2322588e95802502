"""The append-only store of a ledger's signed checkpoints.

Every checkpoint the ledger signs is kept, append-only, in ``<ledger>/checkpoints/``::

    00000001.note, 00000002.note, ...   the signed notes, numbered from 1, never
                                        rewritten (created by link(2): no overwrite)
    .lock                               flock held while a checkpoint is added

The origin of a ledger's checkpoints is the name of the first key that signed one;
a new checkpoint is signed only if the ledger still extends the latest stored one
(the log must never sign two inconsistent checkpoints, c2sp.org/tlog-checkpoint).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import Checkpoint, parse_checkpoint
from .errors import EvidenceError, StorageError, UsageError
from .findings import INTEGRITY
from .fsutil import NotRegularFileError, file_lock, fsync_path, problem, read_regular
from .log import Ledger
from .note import MAX_NOTE_BYTES, Signer, parse_note, sign_note
from .verify import Report, verify_records

__all__ = ["CHECKPOINT_DIR", "CheckpointStore", "StoredCheckpoint", "create_checkpoint"]

CHECKPOINT_DIR = "checkpoints"
LOCK_NAME = ".lock"
NAME_RE = re.compile(r"([0-9]{8,})\.note")


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
        """``([(number, path), ...] sorted by number, [other visible files])``.

        Raises:
            EvidenceError: if ``checkpoints/`` is a symlink or cannot be listed.
        """
        numbered: list[tuple[int, Path]] = []
        strays: list[Path] = []
        if self.directory.is_symlink():  # would lead reads and writes out of the ledger
            raise EvidenceError(f"{self.directory} is a symbolic link: not read or written")
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

        Only a regular file of at most :data:`~ledger.note.MAX_NOTE_BYTES` bytes is read
        (never through a symlink; a FIFO or device is refused unread, so reading never
        blocks or runs on for ever).

        Raises:
            EvidenceError: if it cannot be read, is not a regular file, or is too large.
        """
        try:
            data = read_regular(path, MAX_NOTE_BYTES)
        except OSError as exc:
            if isinstance(exc, NotRegularFileError):
                raise EvidenceError(f"{path} {problem(exc)}: not read") from exc
            raise EvidenceError(f"cannot read {path}: {problem(exc)}") from exc
        if len(data) > MAX_NOTE_BYTES:
            raise EvidenceError(f"{path} is larger than {MAX_NOTE_BYTES} bytes: not a note")
        return StoredCheckpoint(number, path, data)

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
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # a leftover (or a planted symlink): never written through
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as fh:
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
    ledger: Ledger | str | os.PathLike[str] | None,
    signers: Sequence[Signer],
    head: Report | None = None,
) -> StoredCheckpoint:
    """Sign the ledger's current tree head with every signer and store it.

    The origin is the first signer's name (and must match the origin of the stored
    checkpoints). Refuses to sign unless the tree extends the latest stored checkpoint.

    Args:
        ledger: the ledger or its directory.
        signers: one or more keys; one signature line each, in order.
        head: a verifier :class:`~ledger.verify.Report` of this ledger's log, taken just
            before (as :func:`ledger.audit.verify_ledger` gives it, holding the root at
            the latest stored checkpoint's size): its tree head is signed, saving a
            second pass over the log. None (or a report without that root): the head is
            computed from the log here.

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
        latest = store.latest()
        previous = None
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
        # The head is computed from log.bin itself (never from the derived tree/ cache),
        # and only an intact log is signed.
        report = head
        if report is None or (previous is not None and previous.size not in report.roots):
            report = verify_records(
                store.ledger.scan(), roots_at=() if previous is None else (previous.size,)
            )
        broken = [v for v in report.violations if v.rule == INTEGRITY]
        if broken:
            raise EvidenceError(
                f"refusing to sign: the log is damaged at seq {broken[0].seq} "
                f"({broken[0].detail}); run verify"
            )
        if previous is not None and (
            previous.size > report.tree_size or report.root(previous.size) != previous.root
        ):
            raise EvidenceError(
                f"refusing to sign: the ledger ({report.tree_size} entries) does not extend "
                f"checkpoint {latest.number if latest else 0} (tree size {previous.size}); "
                "it was rolled back or rewritten (run verify)"
            )
        body = Checkpoint(origin, report.tree_size, report.root_hash).to_text()
        return store.append(sign_note(body, signers))
