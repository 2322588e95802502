"""A repair's durable intent: the marker ``<ledger>/repairs/<repair_id>.json``, written
before a session store changes and removed once the repair's ``session_repair`` entries
are appended; and the markers a crash or failure left in between: listed, reported for
``verify`` (:func:`pending_repair_notices`) and settled by the next ``repair-session``
(:func:`settle_pending`)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence_ledger.format import digests
from evidence_ledger.format.errors import EvidenceError, LedgerError, StorageError
from evidence_ledger.record.writer import EvidenceWriter
from evidence_ledger.sessions.evidence import Evidence, load_evidence
from evidence_ledger.sessions.plan import RepairPlan
from evidence_ledger.sessions.stores import MESSAGES_TABLE, read_store
from evidence_ledger.storage.fsutil import fsync_path, read_regular
from evidence_ledger.storage.ledger_dir import Ledger

__all__ = ["PendingRepair", "pending_repair_notices", "pending_repairs", "settle_pending"]

MARKER_FORMAT_VERSION = 1
REPAIRS_DIR = "repairs"


def _marker_path(ledger: Ledger, repair_id: str) -> Path:
    return ledger.directory / REPAIRS_DIR / f"{repair_id}.json"


def write_marker(ledger: Ledger, repair_id: str, doc: dict[str, Any]) -> Path:
    """Durably write the repair marker ``doc`` for ``repair_id``; returns its path.

    Raises:
        StorageError: if it cannot be written.
    """
    path = _marker_path(ledger, repair_id)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_path(path.parent)
        fsync_path(ledger.directory)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write repair marker {path}: {exc}") from exc
    return path


def remove_marker(path: Path) -> None:
    """Durably remove a repair marker (absent is fine).

    Raises:
        StorageError: if it cannot be removed.
    """
    try:
        path.unlink(missing_ok=True)
        fsync_path(path.parent)
    except OSError as exc:
        raise StorageError(f"cannot remove repair marker {path}: {exc}") from exc


def marker_doc(
    plan: RepairPlan, repair_id: str, by: str, backup: str | None,
    history_digests: dict[str, bytes],
) -> dict[str, Any]:
    """The JSON document of a repair marker: what the repair will insert, where, by whom."""
    return {
        "format_version": MARKER_FORMAT_VERSION,
        "repair_id": repair_id,
        "store": plan.store,
        "format": plan.format,
        "messages_table": plan.messages_table,
        "backup": backup,
        "by": by,
        "history_digests": {k: digests.to_text(v) for k, v in history_digests.items()},
        "insertions": [
            {
                "session_id": i.session_id, "position": i.position, "item": i.item,
                "run_id": i.call.run_id, "scope": list(i.call.scope),
                "call_entry": digests.to_text(i.call.entry_hash),
            }
            for i in plan.insertions
        ],
    }


@dataclass(frozen=True)
class PendingRepair:
    """A repair whose marker is still in ``<ledger>/repairs/``.

    Attributes:
        path: the marker file.
        doc: its JSON content, or None when it cannot be read.
        recorded: True when the ledger already holds its ``session_repair`` entries (the
            crash came between the append and the marker's removal).
    """

    path: Path
    doc: dict[str, Any] | None
    recorded: bool

    @property
    def repair_id(self) -> str:
        """The repair id (the marker's file name without ``.json``)."""
        return self.path.stem


def pending_repairs(ledger: Ledger, evidence: Evidence | None = None) -> list[PendingRepair]:
    """Markers left in ``<ledger>/repairs/``, oldest name first.

    Args:
        ledger: the ledger.
        evidence: its index, if already loaded; else the log is read only when a
            marker exists (a damaged log counts as holding no repair).
    """
    folder = ledger.directory / REPAIRS_DIR
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not paths:
        return []
    if evidence is None:
        try:
            evidence = load_evidence(ledger)
        except LedgerError:
            evidence = Evidence()
    found = []
    for path in paths:
        try:
            data = read_regular(path, _MAX_MARKER)  # never a FIFO or device
            doc = json.loads(data.decode("utf-8")) if len(data) <= _MAX_MARKER else None
            doc = doc if isinstance(doc, dict) else None
        except (OSError, ValueError):
            doc = None
        found.append(PendingRepair(path, doc, path.stem in evidence.repair_ids))
    return found


_MAX_MARKER = 1 << 20
"""Largest repair marker read, in bytes (ours hold a few hundred)."""


def pending_repair_notices(ledger: Ledger | str | os.PathLike[str] | None) -> list[str]:
    """One-line notices for ``verify``: repairs with a marker but no ledger entry.

    A marker is written before a session store is changed and removed once the
    ``session_repair`` entries are appended, so a leftover one means a crash or failure
    in between: the store may hold items the ledger does not record. Cheap when no
    marker exists (one directory check; the log is read only otherwise).

    Returns:
        Notices (possibly none); never raises for unreadable markers.
    """
    book = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
    notices = []
    for pending in pending_repairs(book):
        name = f"{REPAIRS_DIR}/{pending.path.name}"
        if pending.doc is None:
            notices.append(f"session repair marker {name} is unreadable")
            continue
        store, rid = pending.doc.get("store"), pending.repair_id
        if pending.recorded:
            notices.append(f"session repair {rid} is recorded but its marker {name} was "
                           f"left; the next repair-session of {store} removes it")
        elif pending.doc.get("format") == "session":
            history = ", ".join(f"{sid}: {d}" for sid, d in
                                sorted((pending.doc.get("history_digests") or {}).items()))
            notices.append(
                f"session repair {rid} of a {store} object has no session_repair entry "
                f"(marker {name}): its whole-history rewrite may have stopped half-way; the "
                f"history before it is in the payload store ({history})"
            )
        else:
            notices.append(
                f"session repair {rid} of {store} has no session_repair entry (marker "
                f"{name}): the store may hold items the ledger does not record; run "
                f"`evidence-ledger repair-session {store} --ledger {book.directory} --apply "
                "--by NAME` to settle it"
            )
    return notices


def _holds_insertions(doc: dict[str, Any]) -> bool | None:
    """Whether the store named in a marker holds all its insertions (True), none (False)
    or some (None)."""
    contents = read_store(doc["store"], messages_table=doc.get("messages_table") or MESSAGES_TABLE)
    sessions = {s.session_id: s.items for s in contents.sessions}
    held = []
    for ins in doc["insertions"]:
        items, pos = sessions.get(ins["session_id"], []), ins["position"]
        held.append(0 <= pos < len(items) and items[pos] == ins["item"])
    if all(held):
        return True
    return False if not any(held) else None


def settle_pending(
    store: str | os.PathLike[str], writer: EvidenceWriter, *, apply: bool
) -> list[str]:
    """Settle leftover markers of repairs of ``store`` (a SQLite file); one line each.

    A marker whose entries are in the ledger is removed. Otherwise the store is read:
    when it holds every inserted item, the ``session_repair`` entries are appended (time:
    now; ``by`` and evidence from the marker) and the marker removed; when it holds none,
    the change was never committed and the marker is removed. With ``apply=False``
    nothing is written; the lines say what ``apply=True`` would do.

    Raises:
        UsageError: if the store cannot be read (:func:`read_store`).
        EvidenceError: if the store holds only some of a repair's items, or a marker is
            unreadable (both left for a person to look at).
        StorageError: if appending or removing fails.
    """
    target = str(Path(store).resolve())
    lines = []
    for pending in pending_repairs(writer.ledger):
        doc = pending.doc
        if doc is None:
            raise EvidenceError(f"repair marker {pending.path} is unreadable; look at it, "
                                "then move it away")
        if doc.get("store") != target:
            continue
        rid = pending.repair_id
        if pending.recorded:
            lines.append(f"repair {rid}: already recorded; {'removed' if apply else 'will remove'}"
                         " its leftover marker")
            if apply:
                remove_marker(pending.path)
            continue
        held = _holds_insertions(doc)
        if held is None:
            raise EvidenceError(
                f"repair {rid}: the store holds only some of its inserted items (changed "
                f"since?); marker {pending.path} kept, backup {doc.get('backup')}"
            )
        if not held:
            lines.append(f"repair {rid}: never committed to the store; "
                         f"{'dropped' if apply else 'will drop'} its marker")
            if apply:
                remove_marker(pending.path)
            continue
        lines.append(f"repair {rid}: in the store but not in the ledger; "
                     f"{'recorded' if apply else 'will record'} its "
                     f"{len(doc['insertions'])} session_repair entries")
        if apply:
            history = doc.get("history_digests") or {}
            with writer.atomic():
                for ins in doc["insertions"]:
                    hist = history.get(ins["session_id"])
                    writer.session_repair(
                        repair_id=rid, session_id=ins["session_id"], store=target,
                        item=ins["item"], position=ins["position"], run_id=ins["run_id"],
                        scope=ins["scope"], by=doc["by"], backup=doc.get("backup"),
                        history_digest=digests.from_text(hist) if hist else None,
                    )
            remove_marker(pending.path)
    return lines
