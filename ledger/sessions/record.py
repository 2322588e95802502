"""What every way of carrying out a repair plan shares: its preconditions, the session
histories kept in the payload store before the target changes, the ``session_repair``
entries appended after it (then the marker removed), and its :class:`RepairResult`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from evidence_ledger.format.errors import EvidenceError, StorageError, UsageError
from evidence_ledger.record.writer import EvidenceWriter, item_bytes
from evidence_ledger.sessions.markers import remove_marker
from evidence_ledger.sessions.plan import RepairPlan, SessionPlan

__all__ = ["RepairResult"]


@dataclass(frozen=True)
class RepairResult:
    """What a repair did.

    Attributes:
        plan: the plan carried out.
        repair_id: the id shared by its ``session_repair`` entries.
        backup: the backup copy of the store (SQLite), else None.
        entries: entry hashes of the ``session_repair`` entries appended (32 bytes each).
    """

    plan: RepairPlan
    repair_id: str
    backup: Path | None
    entries: list[bytes]


def store_history(writer: EvidenceWriter, plans: Iterable[SessionPlan]) -> dict[str, bytes]:
    """Store each planned session's whole history as one payload, durably; session id
    -> its 32-byte digest (the ``history_digest`` of its repair entries)."""
    with writer.atomic():  # format 2: written and synced as the block ends, under the lock
        history = {p.session.session_id: writer.ledger.payloads.put(item_bytes(p.session.items))
                   for p in plans}
    writer.ledger.payloads.sync()
    return history


def record_repair(
    writer: EvidenceWriter, plan: RepairPlan, repair_id: str, by: str, backup: str | None,
    history: dict[str, bytes], marker: Path,
) -> list[bytes]:
    """Append one ``session_repair`` entry per insertion of ``plan`` in one atomic group,
    then remove the repair ``marker``; returns the entry hashes (32 bytes each).

    Raises:
        StorageError: if the append fails (the marker stays, for ``settle_pending``).
    """
    try:
        with writer.atomic():
            hashes = [
                writer.session_repair(
                    repair_id=repair_id, session_id=ins.session_id, store=plan.store,
                    item=ins.item, position=ins.position, run_id=ins.call.run_id,
                    scope=ins.call.scope, by=by, backup=backup,
                    history_digest=history.get(ins.session_id),
                )
                for ins in plan.insertions
            ]
    except Exception as exc:
        raise StorageError(
            f"session store {plan.store} was repaired but its session_repair entries were not "
            f"appended ({type(exc).__name__}: {exc}); marker {marker} kept: run repair-session "
            "on that store again to record them"
        ) from exc
    remove_marker(marker)
    return hashes


def check_plan(plan: RepairPlan, by: str) -> None:
    """Refuse a repair without a named operator, or whose plan has refusals.

    Raises:
        UsageError: if ``by`` is blank.
        EvidenceError: if an orphan output lacks usable evidence.
    """
    if not by.strip():
        raise UsageError("a repair needs the name of who runs it (--by)")
    if plan.refusals:
        first = plan.refusals[0]
        raise EvidenceError(
            f"refusing to repair: {len(plan.refusals)} orphan output(s) lack usable evidence "
            f"(session {first.session_id}, {first.call_id}: {first.reason}); nothing changed"
        )
