"""What a ledger says about calls and sessions, indexed for repairs: its ``call`` entries
by ``call_id``, the runs whose ``session_item`` put each output in each session, and the
repairs it already records."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from evidence_ledger.format.entries import Entry
from evidence_ledger.sessions.scan import FUNCTION_CALL_OUTPUT
from evidence_ledger.storage.ledger_dir import Ledger

__all__ = ["Evidence", "RecordedCall", "load_evidence"]


@dataclass(frozen=True)
class RecordedCall:
    """A ``call`` entry, as a repair needs it.

    Attributes:
        run_id, scope, call_id: the call's identity.
        agent, tool: who called what.
        args_digest: 32-byte arguments digest.
        args_payload: 32-byte digest of the raw arguments payload.
        entry_hash: 32-byte hash of the ``call`` entry.
        seq: its leaf index.
    """

    run_id: str
    scope: tuple[str, ...]
    call_id: str
    agent: str
    tool: str
    args_digest: bytes
    args_payload: bytes
    entry_hash: bytes
    seq: int


@dataclass
class Evidence:
    """What a ledger says about calls and sessions, indexed for repairs (pure).

    Attributes:
        calls: call_id -> recorded calls with that id, in log order.
        output_runs: (session_id, call_id) -> run ids of recorded ``session_item`` adds
            of a ``function_call_output`` (tells apart calls of several runs).
        repair_ids: ``repair_id`` of every ``session_repair`` entry.
    """

    calls: dict[str, list[RecordedCall]] = field(default_factory=dict)
    output_runs: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    repair_ids: set[str] = field(default_factory=set)

    @classmethod
    def from_entries(cls, entries: Iterable[tuple[Entry, bytes]]) -> Evidence:
        """Index decoded ``(entry, entry_hash)`` pairs in log order."""
        evidence = cls()
        for entry, hash_ in entries:
            b = entry.body
            if entry.kind == "call":
                evidence.calls.setdefault(b["call_id"], []).append(RecordedCall(
                    b["run_id"], tuple(b["scope"]), b["call_id"], b["agent"], b["tool"],
                    b["args_digest"], b["args_payload"], hash_, entry.seq,
                ))
            elif (entry.kind == "session_item" and b["op"] == "add"
                  and b["item_type"] == FUNCTION_CALL_OUTPUT and b["call_id"] is not None):
                evidence.output_runs.setdefault((b["session_id"], b["call_id"]), set()).add(
                    b["run_id"]
                )
            elif entry.kind == "session_repair":
                evidence.repair_ids.add(b["repair_id"])
        return evidence


def load_evidence(ledger: Ledger) -> Evidence:
    """Read ``ledger`` once into an :class:`Evidence` index.

    Raises:
        UsageError: if the directory holds no ledger.
        EvidenceError: if the log is damaged (run ``verify``).
    """
    ledger.require_exists()
    return Evidence.from_entries(ledger.entries())
