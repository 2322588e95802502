"""Decisions an app made on the run context, outside the recorder.

An app may approve or reject a gated call without :meth:`Recorder.approve` / ``reject``: on
the run context itself (``RunContextWrapper.approve_tool`` / ``reject_tool``, say before the
run starts), or with ``RunState.approve`` / ``reject`` on a state it did not give the
recorder. The SDK applies it all the same. The recorder reads such a decision off the context
(``RunContextWrapper.is_tool_approved``, which only reads) when it shows:

- an approval, when the SDK starts a gated call (``on_tool_start``;
  :func:`record_context_approval`);
- a rejection, when the SDK persists to the session the output of a call of the leg that it
  did not start, the message it gave the model in place of running it
  (:func:`context_rejections`; without a session nothing durable shows it).

Each becomes a ``decision`` entry bound to the call (and, for an approval, its arguments),
with approver :data:`~evidence_ledger.format.entries.CONTEXT_APPROVER`, timed when the
recorder saw it (when the app made it is not known), on the run state of the leg. Nothing is
recorded when the ledger holds a decision naming the call id, in any run, or a sticky one on
its tool in its run and scope: a decision recorded on another run state or in another run is
left to the rules (``state_isolation``, ``rejection_respected``, ``approval_binding``),
never covered by one read off the context. ``verify`` names every decision so read in a
notice. Two agents with one name whose sticky decisions share a tool name leave the context
unable to answer by name: nothing is recorded for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agents import ToolApprovalItem

from evidence_ledger.format.entries import CONTEXT_APPROVER
from evidence_ledger.record.integrations.agent_labels import agent_label
from evidence_ledger.record.integrations.group_commit import Write
from evidence_ledger.record.integrations.legs import Leg
from evidence_ledger.record.integrations.native_calls import item_field
from evidence_ledger.record.integrations.published import output_item
from evidence_ledger.record.writer import EvidenceWriter

__all__ = ["context_status", "persisted_decisions", "record_context_approval"]


def context_status(context: Any, names: Iterable[str], call_id: str, agent: Any, raw: Any,
            ) -> bool | None:
    """What ``context`` holds for ``call_id`` under the first of ``names`` it knows: True
    approved, False rejected, None nothing (or the SDK cannot say).

    Where the SDK keys a function call's decision by its agent as well (0.23 on), the
    decision of ``agent`` (the call's own, with ``raw``, its ``function_call`` item) is read,
    as the SDK reads it before running the call (``_approval_records_for_key``, which only
    reads); elsewhere, and for other kinds, by name (``is_tool_approved``), as the SDK does."""
    owned = getattr(context, "_approval_records_for_key", None)
    status_of = getattr(context, "_get_approval_status_for_record", None)
    try:
        if (callable(owned) and callable(status_of) and agent is not None
                and item_field(raw, "type") == "function_call"):
            item = ToolApprovalItem(agent=agent, raw_item=raw)
            found = (status_of(record, call_id) for name in names
                     for record in owned(name, item, call_id=call_id))
            return next((s for s in found if s is not None), None)
        known = getattr(context, "is_tool_approved", None)
        if not callable(known):
            return None
        return next((s for s in (known(n, call_id) for n in names) if s is not None), None)
    except Exception:  # nothing is read off a context that fails to answer
        return None


def _decided(
    frame: Leg, decision: str, call_id: str, agent: str | None, tool: str | None,
    arguments: str | None, message: str | None = None,
) -> Write:
    """What records ``decision`` on ``call_id`` of ``frame``'s run and scope as read off the
    context, now, unless the ledger holds one already (see the module docstring)."""
    now = frame.journal.writer.clock()

    def write(writer: EvidenceWriter) -> None:
        if (writer.find_call(frame.run_id, frame.scope, call_id) is None
                or writer.decided(frame.run_id, frame.scope, call_id, agent, tool or "")):
            return
        writer.decision(
            run_id=frame.run_id, call_id=call_id, decision=decision,
            approver=CONTEXT_APPROVER, scope=frame.scope, message=message,
            arguments=arguments, agent=agent, tool=tool, run_state=frame.run_state,
            time_ns=now,
        )

    return write


def record_context_approval(
    frame: Leg, context: Any, names: tuple[str, ...], call_id: str, agent: Any, raw: Any,
    tool: str, arguments: str,
) -> None:
    """Record the approval ``context`` holds, if any, for the gated call ``call_id`` (its
    item ``raw``, None if unknown) of ``agent``'s ``tool`` (its label as the ledger records
    it) with ``arguments``, which the SDK is starting in ``frame``. ``names``: the names the
    SDK may keep the decision under (the tool's name, then its label), asked in turn."""
    if context_status(context, names, call_id, agent, raw) is True:
        frame.record(_decided(frame, "approve", call_id, agent_label(agent), tool, arguments))


def persisted_decisions(frame: Leg, items: Iterable[Any]) -> list[Write]:
    """What records, before the ``session_item`` entries of ``items`` (the items the SDK is
    persisting), the decisions made outside the recorder that they show; empty when there
    are none (the common case):

    - the output of a call of ``frame``'s scope that the SDK did not start in this leg, the
      run context holding a rejection of it: that rejection, with the output as its message;
    - a hosted MCP ``mcp_approval_response``: the approval or rejection it carries, of the
      request it names."""
    context = frame.contexts.get(frame.scope)
    writes = []
    for item in items:
        if item_field(item, "type") == "mcp_approval_response":
            request, approve = item_field(item, "approval_request_id"), item_field(item, "approve")
            if isinstance(request, str) and isinstance(approve, bool):
                writes.append(_decided(frame, "approve" if approve else "reject", request,
                                       None, None, None))
            continue
        found = output_item(item)
        if found is None or (frame.scope, found[0]) in frame.started:
            continue
        call_id, output = found
        owner = frame.call_owners.get((frame.scope, call_id))
        if owner is None:
            continue
        agent, raw, tool = owner
        if context_status(context, (item_field(raw, "name") or tool, tool), call_id, agent,
                   raw) is False:
            writes.append(_decided(frame, "reject", call_id, agent_label(agent), tool, None,
                                   output if isinstance(output, str) else None))
    return writes
