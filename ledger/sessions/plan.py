"""Planning the repair of a store's orphan outputs from the ledger's evidence (pure).

Repair (:func:`plan_repair`, :func:`apply_store_repair`): for each orphan output, the
``call`` entries with that ``call_id`` are looked up in the ledger (several runs: the one
whose recorded ``session_item`` put this output in this session). The item inserted
before the (first) orphan output is ``{"arguments": <exact raw arguments from the
payload store>, "call_id": ..., "name": <recorded tool>, "type": "function_call"}``.
A repair is refused (:class:`Refusal`) when no call is recorded, when it is ambiguous,
or when its arguments payload is missing (redacted) or does not match its digest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evidence_ledger.format import digests
from evidence_ledger.sessions.evidence import Evidence, RecordedCall
from evidence_ledger.sessions.scan import FUNCTION_CALL, ORPHAN_OUTPUT, SessionFinding, scan_items
from evidence_ledger.sessions.stores import MESSAGES_TABLE, SessionItems, StoreContents

__all__ = [
    "Insertion",
    "Refusal",
    "RepairPlan",
    "SessionPlan",
    "plan_repair",
    "plan_session",
    "synthesised_call",
]


def synthesised_call(call: RecordedCall, arguments: str) -> dict[str, Any]:
    """The ``function_call`` item rebuilt from a recorded call and its raw ``arguments``.

    Fields as the Responses API takes them as input: ``arguments``, ``call_id``,
    ``name``, ``type``. No item ``id`` or ``status`` is invented (the ledger does not
    record them; both are optional in model input).
    """
    return {"arguments": arguments, "call_id": call.call_id, "name": call.tool,
            "type": FUNCTION_CALL}


@dataclass(frozen=True)
class Insertion:
    """One ``function_call`` to insert.

    Attributes:
        session_id: the session.
        call_id: the orphan output's call_id.
        before_index: index of the (first) orphan output in the history as read.
        before_row: its SQLite row id / dump line, or None.
        position: index of the inserted item in the repaired history.
        item: the synthesised ``function_call`` (:func:`synthesised_call`).
        call: the recorded call it was rebuilt from.
    """

    session_id: str
    call_id: str
    before_index: int
    before_row: int | None
    position: int
    item: dict[str, Any]
    call: RecordedCall


@dataclass(frozen=True)
class Refusal:
    """An orphan output the ledger's evidence cannot repair.

    Attributes:
        session_id, call_id: where.
        index, row: the orphan output's position (see :class:`SessionFinding`).
        reason: one sentence.
    """

    session_id: str
    call_id: str
    index: int
    row: int | None
    reason: str


@dataclass
class SessionPlan:
    """The repair of one session.

    Attributes:
        session: the history as read.
        insertions: ordered by position.
        refusals: orphan outputs left as they are, and why.
        other_findings: findings a repair does not address (dangling calls, duplicates,
            outputs before their calls).
    """

    session: SessionItems
    insertions: list[Insertion] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    other_findings: list[SessionFinding] = field(default_factory=list)

    def repaired_items(self) -> list[Any]:
        """The history after the insertions."""
        before = {ins.before_index: ins.item for ins in self.insertions}
        out: list[Any] = []
        for i, item in enumerate(self.session.items):
            if i in before:
                out.append(before[i])
            out.append(item)
        return out


@dataclass
class RepairPlan:
    """The repair of a store.

    Attributes:
        store: the store's name: absolute path of the file, or ``session:<Class>``.
        format: ``"sqlite"``, ``"jsonl"`` or ``"session"``.
        sessions: one plan per session read.
        messages_table: the SQLite table (SQLite only).
    """

    store: str
    format: str
    sessions: list[SessionPlan]
    messages_table: str = MESSAGES_TABLE

    @property
    def insertions(self) -> list[Insertion]:
        """Every insertion, session by session."""
        return [i for s in self.sessions for i in s.insertions]

    @property
    def refusals(self) -> list[Refusal]:
        """Every refusal, session by session."""
        return [r for s in self.sessions for r in s.refusals]

    def to_json(self) -> dict[str, Any]:
        """The plan's part of the ``repair-session --json`` document
        (``schemas/repair-plan.schema.json``): insertions, refusals, and findings left
        as they are; digests and entry hashes as ``sha256:<hex>``."""
        return {
            "store": self.store,
            "store_format": self.format,
            "insertions": [{
                "session_id": i.session_id, "call_id": i.call_id,
                "before_index": i.before_index, "before_row": i.before_row,
                "position": i.position, "tool": i.call.tool, "arguments": i.item["arguments"],
                "call_seq": i.call.seq, "call_entry_hash": "sha256:" + i.call.entry_hash.hex(),
                "run_id": i.call.run_id,
            } for i in self.insertions],
            "refusals": [{
                "session_id": r.session_id, "call_id": r.call_id, "index": r.index,
                "row": r.row, "reason": r.reason,
            } for r in self.refusals],
            "left_as_is": [f.to_json() for s in self.sessions for f in s.other_findings],
        }


def _pick_call(
    session_id: str, call_id: str, evidence: Evidence
) -> tuple[RecordedCall | None, str]:
    candidates = evidence.calls.get(call_id, [])
    if not candidates:
        return None, f"the ledger records no call with call_id {call_id}"
    if len(candidates) > 1:
        runs = evidence.output_runs.get((session_id, call_id), set())
        narrowed = [c for c in candidates if c.run_id in runs]
        if len(narrowed) != 1:
            where = ", ".join(f"seq {c.seq} (run {c.run_id})" for c in candidates)
            return None, (
                f"{len(candidates)} recorded calls have call_id {call_id} ({where}) and the "
                f"ledger does not say which one put this output in session {session_id}"
            )
        candidates = narrowed
    return candidates[0], ""


def plan_session(
    session: SessionItems,
    evidence: Evidence,
    get_payload: Callable[[bytes], bytes | None],
) -> SessionPlan:
    """Plan the repair of one session's orphan outputs from ``evidence``.

    Args:
        session: the history (see :class:`SessionItems`).
        evidence: the ledger's index (:func:`load_evidence`).
        get_payload: maps a 32-byte payload digest to the payload bytes, or None when
            absent (e.g. ``PayloadStore.get``); the bytes are re-hashed here.

    Returns:
        A :class:`SessionPlan`; one insertion per orphan ``call_id``, before its first
        output. Never raises.
    """
    plan = SessionPlan(session)
    findings = scan_items(session.session_id, session.items, session.rows)
    shift = 0
    for finding in findings:
        if finding.kind != ORPHAN_OUTPUT:
            plan.other_findings.append(finding)
            continue
        call, reason = _pick_call(session.session_id, finding.call_id, evidence)
        arguments: str | None = None
        if call is not None:
            payload = get_payload(call.args_payload)
            if payload is None:
                reason = (f"the arguments payload of call {finding.call_id} (seq {call.seq}) "
                          "is missing from the payload store (redacted?)")
            elif digests.sha256(payload) != call.args_payload:
                reason = (f"the arguments payload of call {finding.call_id} (seq {call.seq}) "
                          "does not match its digest")
            else:
                try:
                    arguments = payload.decode("utf-8", "surrogatepass")
                except UnicodeDecodeError:
                    reason = (f"the arguments payload of call {finding.call_id} "
                              f"(seq {call.seq}) is not UTF-8 text")
        if call is None or arguments is None:
            plan.refusals.append(Refusal(
                session.session_id, finding.call_id, finding.index, finding.row, reason
            ))
            continue
        plan.insertions.append(Insertion(
            session.session_id, finding.call_id, finding.index, finding.row,
            finding.index + shift, synthesised_call(call, arguments), call,
        ))
        shift += 1
    return plan


def plan_repair(
    contents: StoreContents,
    evidence: Evidence,
    get_payload: Callable[[bytes], bytes | None],
) -> RepairPlan:
    """Plan the repair of every session read from a store (see :func:`plan_session`)."""
    return RepairPlan(
        str(contents.path.resolve()), contents.format,
        [plan_session(s, evidence, get_payload) for s in contents.sessions],
        contents.messages_table,
    )
