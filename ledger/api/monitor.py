"""A monitor: follows one log's published checkpoints and stops at the first that is not
consistent with the last it saw (``evidence-ledger witness monitor``).

It follows a ledger directory (each new file of its ``checkpoints/``, in order) or one
checkpoint file (read again whenever its bytes change). Each checkpoint must be signed by a
trusted log key and name the log's origin. Against the last one seen, a smaller tree is a
rollback and another root at the same size a fork; a larger tree of a ledger directory must
be proven to extend it: an RFC 9162 consistency proof made from the ledger's ``log.bin``
must lead from the root seen to the new one (a log rewritten under the old checkpoint cannot
give one). A single file carries no proof: a larger tree there is taken as it is, and said so.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.storage.checked_proofs import prove_consistency_checked
from evidence_ledger.storage.checkpoint_store import CheckpointStore
from evidence_ledger.storage.files import read_input
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.tlog.checkpoint import Checkpoint, verify_checkpoint
from evidence_ledger.tlog.note import MAX_NOTE_BYTES, Verifier

__all__ = ["MonitorError", "monitor_checkpoints"]


class MonitorError(EvidenceError):
    """A checkpoint that is not consistent with the last one seen, or not the log's (exit
    code 1)."""


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


class _Monitor:
    def __init__(self, verifiers: Sequence[Verifier], origin: str,
                 ledger: Ledger | None) -> None:
        self.verifiers = verifiers
        self.origin = origin
        self.ledger = ledger
        self.last: Checkpoint | None = None

    def observe(self, note: bytes, where: str) -> str:
        try:
            cp = verify_checkpoint(note, self.verifiers, self.origin).checkpoint
        except EvidenceError as exc:
            raise MonitorError(f"{where}: not a checkpoint of {self.origin} signed by its "
                               f"key: {exc}") from exc
        last, self.last = self.last, cp
        head = f"{where}: tree size {cp.size}, root {_b64(cp.root)}"
        if last is None:
            return f"{head} (the first seen)"
        if cp.size < last.size:
            raise MonitorError(f"{head}: smaller than tree size {last.size} seen before: "
                               "the log was rolled back")
        if cp.size == last.size:
            if cp.root != last.root:
                raise MonitorError(f"{head}: another root than {_b64(last.root)} seen at "
                                   "that size before: a fork")
            return f"{head} (as before)"
        if self.ledger is None:
            return f"{head} (larger than {last.size}; no log here to prove it extends it)"
        if last.size == 0:  # the empty tree: every tree extends it
            return f"{head} (extends the empty tree)"
        try:
            proof = prove_consistency_checked(self.ledger, last.size, cp.size)
        except (UsageError, EvidenceError) as exc:  # a log too short, damaged or rewritten
            raise MonitorError(f"{head}: the log cannot prove it extends tree size "
                               f"{last.size} ({exc})") from exc
        if (proof.root1, proof.root2) != (last.root, cp.root):
            raise MonitorError(f"{head}: the log does not extend the tree of size {last.size} "
                               f"seen before (its root there is {_b64(proof.root1)}, seen "
                               f"{_b64(last.root)}): a fork")
        return f"{head} (extends tree size {last.size}: consistency proof from the log)"


def monitor_checkpoints(
    path: str | os.PathLike[str], log_keys: Sequence[str], origin: str, *,
    interval: float = 2.0, once: bool = False, report: Callable[[str], None] = print,
) -> None:
    """Follow the checkpoints at ``path`` until interrupted (see the module docstring).

    Args:
        path: a ledger directory, or a checkpoint file.
        log_keys: the log's verifier keys (C2SP strings, type 0x01).
        origin: the log's origin.
        interval: seconds between looks.
        once: look once and return (exit 0 when everything there is consistent).
        report: called with one line per checkpoint seen.

    Raises:
        MonitorError: at the first checkpoint not consistent with the last one seen.
        UsageError: for no or a malformed key, or a path that is neither.
        EvidenceError: if the ledger's log is damaged where a proof is made.
    """
    if not log_keys:
        raise UsageError("the monitor needs the log's verifier key (--log ORIGIN=VKEY)")
    verifiers = [Verifier.from_vkey(k) for k in log_keys]
    target = Path(path)
    ledger = Ledger(target) if target.is_dir() else None
    if ledger is not None:
        ledger.require_exists()
    monitor = _Monitor(verifiers, origin, ledger)
    seen_files: set[int] = set()
    last_bytes: bytes | None = None
    while True:
        if ledger is not None:
            store = CheckpointStore(ledger)
            for number, file in store.files()[0]:
                if number not in seen_files:
                    seen_files.add(number)
                    report(monitor.observe(store.read(number, file).data, file.name))
        else:
            data = read_input(target, largest=MAX_NOTE_BYTES, what="signed note")
            if data != last_bytes:
                last_bytes = data
                report(monitor.observe(data, target.name))
        if once:
            return
        time.sleep(interval)
