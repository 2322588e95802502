"""Carrying out a repair plan on any SDK ``Session`` object.

:func:`repair_session` does for any SDK ``Session`` object what
:func:`~evidence_ledger.sessions.apply_store.apply_store_repair` does for a SQLite file; having no
insert, it rewrites the whole history (``clear_session`` then ``add_items``).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from evidence_ledger.format import digests
from evidence_ledger.format.errors import EvidenceError, UsageError
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.sessions.evidence import load_evidence
from evidence_ledger.sessions.markers import marker_doc, remove_marker, write_marker
from evidence_ledger.sessions.plan import RepairPlan, plan_session
from evidence_ledger.sessions.record import RepairResult, check_plan, record_repair, store_history
from evidence_ledger.sessions.stores import SessionItems
from evidence_ledger.storage.ledger_dir import Ledger

__all__ = ["repair_session"]


async def repair_session(
    session: Any,
    ledger: EvidenceWriter | Ledger | str | os.PathLike[str],
    *,
    by: str,
    apply: bool = False,
    repair_id: str | None = None,
) -> RepairResult:
    """Plan, and with ``apply=True`` carry out, the repair of one SDK ``Session`` object.

    The ``Session`` protocol has no insert, so applying **rewrites the whole history**:
    ``await session.clear_session()`` then ``await session.add_items(repaired)``. That
    pair is not atomic: a crash between the two leaves the session empty. Before it,
    the history is stored in the ledger's payload store (``history_digest`` of the
    entries) and a marker ``<ledger>/repairs/<repair_id>.json`` names it, so the history
    can be put back; :func:`pending_repair_notices` reports the marker until the
    ``session_repair`` entries are appended. Prefer :func:`apply_store_repair` for a
    SQLite file (one transaction). Wrap it with ``recorded_session`` to also record the
    rewrite as ``session_item`` entries (``clear`` then ``add``).

    Args:
        session: has ``session_id``, async ``get_items()``, ``clear_session()`` and
            ``add_items(items)``; must not limit ``get_items`` (``session_settings.limit``).
        ledger: the ledger holding the run's evidence (and receiving the entries).
        by: who runs the repair.
        apply: False (default) only plans.
        repair_id: default a random 32-hex-digit id.

    Returns:
        A :class:`RepairResult` (``entries`` empty when only planned or nothing to do).

    Raises:
        UsageError: if the session limits ``get_items``, or ``by`` is empty.
        EvidenceError: if an orphan output lacks usable evidence (nothing changed), or the
            session does not read back as written (marker kept).
        StorageError: if the ledger cannot be written.
    """
    writer = ledger if isinstance(ledger, EvidenceWriter) else EvidenceWriter(ledger)
    settings = getattr(session, "session_settings", None)
    limit = getattr(settings, "limit", None)
    if limit is not None:
        raise UsageError(f"the session limits get_items to {limit} items; rewriting its "
                         "history would drop the rest")
    evidence = load_evidence(writer.ledger)
    items = list(await session.get_items())
    session_id = str(session.session_id)
    kind = type(session)
    plan = RepairPlan(
        f"session:{kind.__module__}.{kind.__qualname__}", "session",
        [plan_session(SessionItems(session_id, items), evidence, writer.ledger.payloads.get)],
    )
    repair_id = repair_id or uuid.uuid4().hex
    if not apply:
        return RepairResult(plan, repair_id, None, [])
    check_plan(plan, by)
    if not plan.insertions:
        return RepairResult(plan, repair_id, None, [])
    repaired = plan.sessions[0].repaired_items()
    history = store_history(writer, plan.sessions)
    doc = marker_doc(plan, repair_id, by, None, history)
    marker = write_marker(writer.ledger, repair_id, doc)
    cleared = False
    try:
        await session.clear_session()
        cleared = True
        await session.add_items(repaired)
    except BaseException:
        if not cleared:
            remove_marker(marker)
        raise
    if list(await session.get_items()) != repaired:
        raise EvidenceError(
            f"session {session_id} does not read back as written; marker {marker} kept "
            f"(history before the repair: payload {digests.to_text(history[session_id])})"
        )
    entries = record_repair(writer, plan, repair_id, by, None, history, marker)
    return RepairResult(plan, repair_id, None, entries)
