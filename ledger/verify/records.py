"""Verify a ledger: integrity of every record, the Merkle root, and the evidence rules.

Pure core: it takes the log's scan items (record bytes and integers) and a function
that says whether a payload matches its digest, and returns a :class:`Report`. The
caller does the I/O (see :func:`evidence_ledger.verify.audit.verify_ledger`).

``integrity`` covers: frame CRCs, canonical encoding, body shapes, contiguous ``seq``,
``prev`` links, ``refs`` naming earlier calls, and payload digests.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evidence_ledger.format.digests import PayloadStatus
from evidence_ledger.format.entries import PAYLOAD_FIELDS, ZERO_HASH, Entry, decode_entry
from evidence_ledger.format.errors import EncodingError, UsageError
from evidence_ledger.format.framing import Damage, Record, ScanItem, TornTail
from evidence_ledger.tlog import merkle
from evidence_ledger.tlog.entry_batch import read_entries
from evidence_ledger.verify.findings import (
    GUARD_RULES,
    INTEGRITY,
    PAYLOAD_MISSING,
    RULES,
    Finding,
)
from evidence_ledger.verify.guard_audit import GuardAudit
from evidence_ledger.verify.rules import CallKey, CallState, RuleEngine
from evidence_ledger.verify.spill import Spill, SpilledHashes

REPORT_FORMAT_VERSION = 1
BATCH = 1024
"""Records read (hashed and decoded) in one call before they are checked in order."""


@dataclass
class Report:
    """The verdict over a ledger (see ``schemas/verify-report.schema.json``).

    Attributes:
        tree_size: number of entries (leaves) read.
        root_hash: RFC 9162 root hash over them, 32 bytes.
        violations: findings ordered by seq.
        notices: one-line remarks that are not violations (torn tail, missing payload).
        calls: per-call state the rules built (call identity -> :class:`CallState`, in
            log order; read back from a temporary file for a verified log, see
            :class:`~evidence_ledger.verify.rules.RuleEngine`).
        rules: names of the rules run.
        roots: tree size -> root hash (32 bytes) for the sizes asked for, and 0.
    """

    tree_size: int = 0
    root_hash: bytes = merkle.EMPTY_ROOT
    violations: list[Finding] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    calls: Mapping[CallKey, CallState] = field(default_factory=dict)
    rules: tuple[str, ...] = RULES
    roots: dict[int, bytes] = field(default_factory=lambda: {0: merkle.EMPTY_ROOT})

    @property
    def size(self) -> int:
        """Tree size (as :class:`evidence_ledger.verify.checkpoint_audit.LogRoots` names it)."""
        return self.tree_size

    def root(self, size: int) -> bytes:
        """Root hash at ``size``, 32 bytes, for the sizes asked for in ``roots_at``.

        Raises:
            UsageError: if that size was not asked for or not reached.
        """
        try:
            return self.roots[size]
        except KeyError:
            raise UsageError(f"no root recorded at tree size {size}") from None

    @property
    def ok(self) -> bool:
        """True when no rule was violated."""
        return not self.violations

    def to_json(self) -> dict[str, object]:
        """The ``--json`` output (schemas/verify-report.schema.json)."""
        return {
            "format_version": REPORT_FORMAT_VERSION,
            "ok": self.ok,
            "tree_size": self.tree_size,
            "root_hash": base64.b64encode(self.root_hash).decode("ascii"),
            "rules": list(self.rules),
            "notices": list(self.notices),
            "violations": [v.to_json() for v in self.violations],
        }


def _named(body: dict[str, Any]) -> str:
    """`` of call C (run R)``, `` (run R)`` or "": the call or run an entry's body names, for
    the detail of an integrity finding about its payload. In the detail, not the finding's
    identity: an integrity finding stays with the entry (a bundle's verdict claims it for
    every bundled entry, whichever call the entry names)."""
    run_id, call_id = body.get("run_id"), body.get("call_id")
    run = f"run {run_id}" if isinstance(run_id, str) and run_id else ""
    if isinstance(call_id, str) and call_id:
        return f" of call {call_id}" + (f" ({run})" if run else "")
    return f" ({run})" if run else ""


def verify_records(
    items: Iterable[ScanItem],
    payload_check: Callable[[bytes], PayloadStatus] | None = None,
    roots_at: Iterable[int] = (),
    read_payload: Callable[[bytes], bytes | None] | None = None,
) -> Report:
    """Verify a log given as scan items, in order.

    Args:
        items: :class:`Record` items, then at most one :class:`Damage` or
            :class:`TornTail` (as :meth:`evidence_ledger.storage.log_store.FileLogStore.scan`
            yields them).
        payload_check: maps a 32-byte payload digest to a :class:`PayloadStatus`;
            None skips payload checks. With it, a payload that is missing and that no
            ``redaction`` entry erased is a ``payload_missing`` violation at the first
            seq naming it (lost evidence), and the rule is listed as run.
        roots_at: tree sizes whose root hashes to keep in :attr:`Report.roots` (those of
            stored and trusted checkpoints), taken in the same pass.
        read_payload: a payload's bytes by digest (None when gone): with it the guard
            audit's rules (:mod:`evidence_ledger.verify.guard_audit`) run too.

    Returns:
        A :class:`Report`; never raises on bad input (damage becomes findings).

    Memory: flat in the size of the log. The rule state of runs that ended (or that no
    entry touched lately), sessions likewise, and the hashes of call entries go to a
    temporary file (:class:`~evidence_ledger.verify.spill.Spill`) that the report's
    :attr:`Report.calls` reads; what stays grows with the findings, the missing and
    redacted payloads, and the call items awaiting their outputs.
    """
    report = Report()
    wanted = frozenset(roots_at)
    spill = Spill()
    engine = RuleEngine(spill)
    guard = GuardAudit(read_payload) if read_payload is not None else None
    tree = merkle.CompactRange()
    integrity: list[Finding] = []
    prev = ZERO_HASH
    prev_broken = False
    known_calls = SpilledHashes(spill)
    missing: dict[bytes, int] = {}  # payload digest -> first seq naming it
    redacted: set[bytes] = set()
    erasing: set[bytes] = set()  # payloads a redaction cut short left marked

    def broken(seq: int | None, detail: str) -> None:
        integrity.append(Finding(INTEGRITY, seq, detail))

    def check(item: Record, entry: Entry | None, this_hash: bytes) -> None:
        nonlocal prev, prev_broken
        seq = item.index
        damaged = not item.crc_ok
        if damaged:
            broken(seq, "record fails its CRC-32 (bytes changed)")
        if entry is None:
            if not damaged:
                try:
                    decode_entry(item.data)  # for the reason it refuses the bytes
                except EncodingError as exc:
                    broken(seq, f"entry does not decode: {exc}")
            prev, prev_broken = this_hash, True
            return
        if entry.seq != seq:
            broken(seq, f"entry says seq {entry.seq}, it stands at {seq}")
        elif entry.prev != prev and not prev_broken and not damaged:
            broken(seq, "prev does not match the hash of the previous entry")
        for ref in entry.refs:
            if ref not in known_calls:
                broken(seq, f"ref {ref.hex()[:16]}… names no earlier call entry")
        if payload_check is not None:
            for name in PAYLOAD_FIELDS:
                digest = entry.body.get(name)
                if isinstance(digest, bytes):
                    status = payload_check(digest)
                    if status is PayloadStatus.MISMATCH:
                        broken(seq, f"payload {name} sha256:{digest.hex()}{_named(entry.body)} "
                               "does not match its digest")
                    elif status is PayloadStatus.MISSING:
                        missing.setdefault(digest, seq)
                    elif status is PayloadStatus.ERASING:
                        erasing.add(digest)
        if entry.kind == "call":
            known_calls.add(this_hash)
        elif entry.kind == "redaction":
            redacted.add(entry.body["digest"])
        prev, prev_broken = this_hash, damaged
        if not damaged and entry.seq == seq:  # the rules read only entries where they claim
            engine.feed(entry)
            if guard is not None:
                guard.feed(entry, this_hash)

    def flush() -> None:
        if not batch:
            return
        for item, (entry, this_hash) in zip(
                batch, read_entries([r.data for r in batch], tree), strict=True):
            check(item, entry, this_hash)
        if tree.size in wanted:
            report.roots[tree.size] = tree.root()
        batch.clear()

    batch: list[Record] = []  # records read, not yet checked: up to BATCH, cut at a wanted root
    for item in items:
        if isinstance(item, Record):
            batch.append(item)
            if len(batch) >= BATCH or item.index + 1 in wanted:
                flush()
            continue
        flush()
        if isinstance(item, TornTail):
            after = f"after seq {tree.size - 1}" if tree.size else "before the first entry"
            report.notices.append(
                f"torn tail: {item.length} bytes at offset {item.offset}, {after} (a crash "
                "mid-append; the next writer cuts it back and keeps the bytes in torn/)"
            )
        elif isinstance(item, Damage):
            broken(item.index, f"{item.reason}; nothing after offset {item.offset} can be read")
    flush()

    if erasing:
        report.notices.append(
            f"{len(erasing)} payload(s) overwritten by a redaction cut short before it was "
            "recorded or finished (run the same redact again to finish it): "
            + ", ".join(f"sha256:{d.hex()}" for d in sorted(erasing)))
    erased = [d for d in missing if d in redacted]
    if erased:
        report.notices.append(f"{len(erased)} payload(s) redacted (entries and proofs unaffected)")
    lost = [
        Finding(
            PAYLOAD_MISSING, seq, f"payload sha256:{digest.hex()} (named by seq {seq}) is "
            "missing and no redaction entry erased it: evidence was lost",
        )
        for digest, seq in missing.items() if digest not in redacted
    ]
    if payload_check is not None:
        report.rules = (*RULES, PAYLOAD_MISSING)
    guard_findings: list[Finding] = []
    if guard is not None:
        report.rules = (*report.rules, *GUARD_RULES)
        guard_findings = guard.findings
        report.notices.extend(guard.notices)
    report.tree_size = tree.size
    report.root_hash = tree.root()
    report.violations = sorted(
        integrity + lost + engine.findings + guard_findings, key=lambda f: (f.seq is None, f.seq)
    )
    report.notices = report.notices + engine.notices + engine.closing_notices()
    report.calls = engine.calls
    return report
