"""Audit a ledger's checkpoints against its log, for the ``verify`` command.

:func:`check_checkpoints` returns plain :class:`CheckpointFinding` values (nothing is printed
or raised for a violation). Rules:

``checkpoint_format``
    a stored checkpoint file that is not a well-formed signed note or checkpoint, or
    not a regular file (a symlink, FIFO or device: never read), or an unexpected file
    in ``checkpoints/``.
``checkpoint_signature``
    a stored checkpoint not signed by any given verifier key, or carrying a signature
    by a given key that fails (only checked when verifier keys are given).
``checkpoint_origin``
    a stored checkpoint whose origin differs from the first one's, or is not the name
    of the key that signed it.
``checkpoint_missing``
    a gap in the checkpoint numbers: a stored checkpoint was deleted.
``checkpoint_size``
    a stored checkpoint for more entries than the log holds: entries were removed
    after it was signed.
``checkpoint_root``
    the root recomputed from the log at a checkpoint's size differs from the signed
    one: the log was changed after the checkpoint was signed.
``checkpoint_consistency``
    checkpoint ``k + 1`` does not extend checkpoint ``k``: its tree size is smaller,
    or it has another root for the same size (a fork).
``trusted_checkpoint``
    a trusted checkpoint text that does not verify or parse, or names another origin.
``append_only``
    the ledger was rolled back below a trusted checkpoint (fewer entries than its
    size) or forked from it (another root at its size).
``witness_quorum``
    (only with a witness policy) the latest stored checkpoint carries fewer valid
    cosignatures by the given witness keys than wanted, or a failing one, or there is no
    stored checkpoint to carry them. Older checkpoints need none: the latest one commits
    to every entry before it, and the log is checked to extend the older ones.

Two checkpoints whose roots both equal roots recomputed from the same log are
consistent by construction (RFC 9162 §2.1.4: a consistency proof exists between any
two prefixes of one log), so ``checkpoint_consistency`` only flags what the log
cannot explain. A rolled-back ledger whose later checkpoints were deleted too leaves
no trace inside the ledger directory: that is what trusted checkpoints, kept
elsewhere, are for.

Roots are recomputed from ``log.bin`` in one streaming pass (never from the derived
hash store in ``tree/``, which could predate a tampered log).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.format.framing import Damage, TornTail
from evidence_ledger.storage.checkpoint_store import CheckpointStore
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.checkpoint import Checkpoint, parse_checkpoint, verify_checkpoint
from evidence_ledger.tlog.cosignature import WitnessPolicy, check_quorum
from evidence_ledger.tlog.merkle import EMPTY_ROOT, CompactRange, leaf_hash
from evidence_ledger.tlog.note import MalformedNoteError, NoteError, Verifier, open_note, parse_note
from evidence_ledger.verify.findings import CHECKPOINT_RULES, WITNESS_QUORUM, Finding

__all__ = [
    "RULES",
    "CheckpointFinding",
    "LogRoots",
    "RootRecorder",
    "check_checkpoints",
    "checkpoint_sizes",
    "recompute_roots",
]

RULES = CHECKPOINT_RULES
"""Every rule name :func:`check_checkpoints` can report (see the module docstring)."""


@dataclass(frozen=True)
class CheckpointFinding:
    """One checkpoint violation.

    Attributes:
        rule: one of :data:`RULES`.
        detail: one line, saying what was found and what was wanted.
        checkpoint: number of the stored checkpoint concerned (1-based, the file
            ``checkpoints/<number:08d>.note``); None for a trusted checkpoint or a stray
            file.
        tree_size: the tree size the finding is about, when known.
    """

    rule: str
    detail: str
    checkpoint: int | None = None
    tree_size: int | None = None

    def to_finding(self) -> Finding:
        """This finding as a verify-report :class:`evidence_ledger.verify.findings.Finding`
        (``seq`` None:
        a checkpoint violation names a tree size, not one entry)."""
        return Finding(rule=self.rule, seq=None, detail=self.detail)


class LogRoots(Protocol):
    """Roots of the log's tree at the sizes the audit asks for."""

    @property
    def size(self) -> int:
        """Number of readable entries in the log."""
        ...

    def root(self, size: int) -> bytes:
        """MTH(D[0:size]), 32 bytes, for ``0 <= size <= self.size``."""
        ...


class RootRecorder:
    """Feed the log's entries in order; remembers MTH(D[0:s]) for each wanted ``s``.

    O(log n) memory (a :class:`~evidence_ledger.tlog.merkle.CompactRange`), two hashes per entry.
    Implements :class:`LogRoots` for the wanted sizes.

    Args:
        wanted: tree sizes whose roots to keep.

    Attributes:
        stop_reason: why the log could not be read further (None if it was read to
            the end).
    """

    def __init__(self, wanted: Iterable[int]) -> None:
        self._wanted = frozenset(wanted)
        self._range = CompactRange()
        self._roots: dict[int, bytes] = {0: EMPTY_ROOT}
        self.stop_reason: str | None = None

    @property
    def size(self) -> int:
        """Entries fed so far."""
        return self._range.size

    def add_leaf_hash(self, leaf: bytes) -> None:
        """Feed the next 32-byte leaf hash."""
        self._range.append(leaf)
        if self._range.size in self._wanted:
            self._roots[self._range.size] = self._range.root()

    def add_entry(self, data: bytes) -> None:
        """Feed the next entry's bytes (leaf hash SHA-256(0x00 || data))."""
        self.add_leaf_hash(leaf_hash(data))

    def root(self, size: int) -> bytes:
        """The recorded root at ``size`` (32 bytes).

        Raises:
            UsageError: if ``size`` was not wanted or not reached.
        """
        try:
            return self._roots[size]
        except KeyError:
            raise UsageError(f"no root recorded at tree size {size}") from None


def recompute_roots(ledger: Ledger, sizes: Iterable[int]) -> RootRecorder:
    """Read ``log.bin`` once and record the roots at ``sizes``.

    Stops before a torn tail, or at the first damaged record (then ``stop_reason``
    says where).
    """
    recorder = RootRecorder(sizes)
    for item in ledger.scan():
        if isinstance(item, TornTail):
            break
        if isinstance(item, Damage):
            recorder.stop_reason = f"log damaged at seq {item.index}: {item.reason}"
            break
        if not item.crc_ok:
            recorder.stop_reason = f"log damaged at seq {item.index}: record fails its CRC-32"
            break
        recorder.add_entry(item.data)
    return recorder


def checkpoint_sizes(
    ledger_dir: Ledger | str | os.PathLike[str] | None,
    trusted_checkpoint_texts: Sequence[bytes] = (),
) -> set[int]:
    """Tree sizes of every stored and trusted checkpoint that parses (unverified).

    Use it to build a :class:`RootRecorder` before your own pass over the log, then
    pass the recorder as ``tree`` to :func:`check_checkpoints`.
    """
    ledger = ledger_dir if isinstance(ledger_dir, Ledger) else Ledger(ledger_dir)
    store = CheckpointStore(ledger)
    texts = []
    for number, path in store.files()[0]:
        with contextlib.suppress(EvidenceError):  # check_checkpoints reports it
            texts.append(store.read(number, path).data)
    sizes: set[int] = set()
    for data in [*texts, *trusted_checkpoint_texts]:
        try:
            sizes.add(parse_checkpoint(parse_note(data).text).size)
        except EvidenceError:
            continue
    return sizes


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


@dataclass(frozen=True)
class _Parsed:
    number: int
    checkpoint: Checkpoint


def _open(data: bytes, verifiers: Sequence[Verifier]) -> tuple[Checkpoint, list[str]]:
    """Parse (and verify, when keys are given) one signed checkpoint.

    Returns the checkpoint and the names of the keys whose signature verified.
    """
    if verifiers:
        note = open_note(data, verifiers)
        return parse_checkpoint(note.text), sorted({s.name for s in note.verified})
    return parse_checkpoint(parse_note(data).text), []


def _against_log(cp: Checkpoint, roots: LogRoots) -> tuple[bool, bytes | None]:
    """How the log stands against checkpoint ``cp``: (shorter than it, or the differing
    root recomputed at its size; None when the log extends it)."""
    if cp.size > roots.size:
        return True, None
    root = roots.root(cp.size)
    return False, None if root == cp.root else root


def _witness_findings(store: CheckpointStore, numbered: Sequence[tuple[int, Path]],
                      witnesses: WitnessPolicy) -> list[CheckpointFinding]:
    """The ``witness_quorum`` finding of the latest stored checkpoint, if it falls short."""
    if not numbered:
        return [CheckpointFinding(
            WITNESS_QUORUM, "no stored checkpoint carries cosignatures: sign one with "
            "`evidence-ledger checkpoint --witness URL=VKEY`")]
    number, path = numbered[-1]
    try:
        quorum = check_quorum(store.read(number, path).data, witnesses)
    except EvidenceError as exc:  # reported as checkpoint_format above
        return [CheckpointFinding(WITNESS_QUORUM, f"checkpoint {number} unreadable: {exc}",
                                  checkpoint=number)]
    if quorum.ok:
        return []
    return [CheckpointFinding(WITNESS_QUORUM, f"checkpoint {number}: {quorum.describe()}",
                              checkpoint=number, tree_size=quorum.tree_size)]


def check_checkpoints(
    ledger_dir: Ledger | str | os.PathLike[str] | None,
    verifier_keys: Sequence[str],
    trusted_checkpoint_texts: Sequence[bytes],
    tree: LogRoots | None = None,
    witnesses: WitnessPolicy | None = None,
) -> list[CheckpointFinding]:
    """Check every stored checkpoint, and the trusted ones, against the log.

    For each stored checkpoint (``<ledger>/checkpoints/<n>.note``, in number order):
    it parses as a C2SP signed note and tlog-checkpoint; when ``verifier_keys`` are
    given, at least one of them signed it and its origin is a signing key's name;
    all share one origin; its root equals the root recomputed from the log at its
    size; it extends the previous checkpoint. Numbers must have no gaps. Each trusted
    checkpoint must verify the same way, name the ledger's origin, and the ledger must
    extend it (rule ``append_only``).

    Args:
        ledger_dir: the ledger or its directory.
        verifier_keys: verifier key strings (``name+hex8+base64``); when empty,
            signatures are not checked (no finding is made about them).
        trusted_checkpoint_texts: signed checkpoints kept outside the ledger (e.g. by
            a witness or an earlier run), as bytes.
        tree: roots of the log's tree; by default recomputed from ``log.bin`` in one
            pass (see :func:`recompute_roots`). Pass a :class:`RootRecorder` fed during
            your own pass over the log to avoid a second read.
        witnesses: the witness keys and quorum the latest stored checkpoint must meet
            (rule ``witness_quorum``); None: cosignatures are not checked.

    Returns:
        ``list[CheckpointFinding]``, empty when everything checks out: stored checkpoints first
        (by number), then trusted ones (by position). Each ``CheckpointFinding`` is
        ``(rule: str, detail: str, checkpoint: int | None, tree_size: int | None)``.

    Raises:
        UsageError: if there is no ledger, or a verifier key string is malformed
            (:class:`~evidence_ledger.tlog.note.KeyFormatError`).
        EvidenceError: if the checkpoint directory or the log cannot be read.
    """
    ledger = ledger_dir if isinstance(ledger_dir, Ledger) else Ledger(ledger_dir)
    ledger.require_exists()
    verifiers = [Verifier.from_vkey(k) for k in verifier_keys]
    store = CheckpointStore(ledger)
    numbered, strays = store.files()
    findings: list[CheckpointFinding] = []

    for path in strays:
        findings.append(
            CheckpointFinding(
                "checkpoint_format", f"unexpected file {path.name} in {store.directory}"
            )
        )
    expected = 1
    for number, _ in numbered:
        if number != expected:
            missing = f"{expected}" if number == expected + 1 else f"{expected}..{number - 1}"
            findings.append(
                CheckpointFinding(
                    "checkpoint_missing",
                    f"checkpoint {missing} missing before checkpoint {number}: "
                    "stored checkpoints were deleted",
                    checkpoint=expected,
                )
            )
        expected = number + 1

    parsed: list[_Parsed] = []
    origin: str | None = None
    for number, path in numbered:
        try:
            stored = store.read(number, path)
        except EvidenceError as exc:  # not a regular file, too large, unreadable
            findings.append(CheckpointFinding("checkpoint_format", str(exc), checkpoint=number))
            continue
        try:
            cp, signed_by = _open(stored.data, verifiers)
        except MalformedNoteError as exc:
            findings.append(
                CheckpointFinding("checkpoint_format", f"{path.name}: {exc}", checkpoint=number)
            )
            continue
        except NoteError as exc:
            findings.append(
                CheckpointFinding("checkpoint_signature", f"{path.name}: {exc}", checkpoint=number)
            )
            continue
        except EvidenceError as exc:
            findings.append(
                CheckpointFinding("checkpoint_format", f"{path.name}: {exc}", checkpoint=number)
            )
            continue
        if origin is None:
            origin = cp.origin
        if cp.origin != origin:
            findings.append(
                CheckpointFinding(
                    "checkpoint_origin",
                    f"{path.name}: origin {cp.origin!r}, want {origin!r} (the first checkpoint's)",
                    checkpoint=number,
                    tree_size=cp.size,
                )
            )
            continue
        if signed_by and cp.origin not in signed_by:
            findings.append(
                CheckpointFinding(
                    "checkpoint_origin",
                    f"{path.name}: origin {cp.origin!r} is not the name of a key that "
                    f"signed it ({', '.join(signed_by)})",
                    checkpoint=number,
                    tree_size=cp.size,
                )
            )
            continue
        parsed.append(_Parsed(number, cp))

    if witnesses is not None:
        findings.extend(_witness_findings(store, numbered, witnesses))

    trusted: list[tuple[int, Checkpoint]] = []
    for position, text in enumerate(trusted_checkpoint_texts, 1):
        where = f"trusted checkpoint {position}"
        try:
            if verifiers:
                cp = verify_checkpoint(text, verifiers).checkpoint
            else:
                cp = parse_checkpoint(parse_note(text).text)
        except EvidenceError as exc:
            findings.append(CheckpointFinding("trusted_checkpoint", f"{where}: {exc}"))
            continue
        if origin is not None and cp.origin != origin:
            findings.append(
                CheckpointFinding(
                    "trusted_checkpoint",
                    f"{where}: origin {cp.origin!r}, want {origin!r} (this ledger's)",
                    tree_size=cp.size,
                )
            )
            continue
        trusted.append((position, cp))

    if not parsed and not trusted:
        return findings
    roots: LogRoots
    if tree is None:
        sizes = {p.checkpoint.size for p in parsed} | {cp.size for _, cp in trusted}
        roots = recompute_roots(ledger, sizes)
    else:
        roots = tree
    readable = f"the log has {roots.size} readable entries"
    stop_reason = getattr(roots, "stop_reason", None)
    if stop_reason:
        readable += f" ({stop_reason})"

    for p in parsed:
        cp, name = p.checkpoint, f"checkpoint {p.number}"
        short, root = _against_log(cp, roots)
        if short:
            findings.append(
                CheckpointFinding(
                    "checkpoint_size",
                    f"{name} signs tree size {cp.size} but {readable}: entries were "
                    "removed after it was signed",
                    checkpoint=p.number,
                    tree_size=cp.size,
                )
            )
        elif root is not None:
            findings.append(
                CheckpointFinding(
                    "checkpoint_root",
                    f"{name}: root at tree size {cp.size} recomputed from the log is "
                    f"{_b64(root)}, signed root is {_b64(cp.root)}: the log changed after "
                    "it was signed",
                    checkpoint=p.number,
                    tree_size=cp.size,
                )
            )

    for prev, cur in itertools.pairwise(parsed):
        a, b = prev.checkpoint, cur.checkpoint
        if b.size < a.size:
            detail = (
                f"checkpoint {cur.number} has tree size {b.size}, smaller than checkpoint "
                f"{prev.number}'s {a.size}: the log went backwards"
            )
        elif b.size == a.size and b.root != a.root:
            detail = (
                f"checkpoints {prev.number} and {cur.number} sign two roots for tree size "
                f"{a.size}: a fork"
            )
        else:
            continue
        findings.append(
            CheckpointFinding(
                "checkpoint_consistency", detail, checkpoint=cur.number, tree_size=b.size
            )
        )

    for position, cp in trusted:
        where = f"trusted checkpoint {position}"
        short, root = _against_log(cp, roots)
        if short:
            findings.append(
                CheckpointFinding(
                    "append_only",
                    f"ledger rolled back below {where}: it signs tree size {cp.size} but "
                    f"{readable}",
                    tree_size=cp.size,
                )
            )
        elif root is not None:
            findings.append(
                CheckpointFinding(
                    "append_only",
                    f"ledger forked from {where}: root at tree size {cp.size} is "
                    f"{_b64(root)}, trusted root is {_b64(cp.root)}",
                    tree_size=cp.size,
                )
            )
    return findings
