"""Decisions made by the app's approval callbacks.

A shell, apply_patch or custom tool may carry an ``on_approval`` callback, and a hosted MCP
tool an ``on_approval_request`` one: the SDK calls it when one of the tool's calls needs
approval and none is known, and applies what it returns (``{"approve": True}``, or
``False`` with a ``reason`` given to the model as the rejection message) on the run
context. Each such callback is wrapped once, in place (:func:`wrap_approval_callbacks`; a
wrapper of the same kind and name, see
:func:`~evidence_ledger.record.integrations.wrappers.observed`), and its verdict in a
recorded leg becomes a ``decision`` entry bound to the call and its arguments, with
approver ``callback:<the callback's qualified name>``. A verdict the SDK does not apply
records nothing (the call then stays pending, or the SDK fails): for a local tool, anything
but a mapping with a boolean ``approve``; for a hosted MCP tool, a result whose
``["approve"]`` cannot be read (the SDK reads it so, and approves on a truthy value). Under
a guard policy, a hosted MCP request the callback approved is judged by the guard next,
which may answer a rejection in its place
(:mod:`~evidence_ledger.record.integrations.hosted_guard`).
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import methodcaller
from typing import Any

from evidence_ledger.record.integrations.agent_labels import agent_label
from evidence_ledger.record.integrations.hosted_guard import answer_callback
from evidence_ledger.record.integrations.legs import CURRENT_LEG
from evidence_ledger.record.integrations.native_calls import native_call
from evidence_ledger.record.integrations.wrappers import answered, is_ours, ours

__all__ = ["wrap_approval_callbacks"]

CALLBACKS = {"on_approval": False, "on_approval_request": True}
"""Tool attribute holding an approval callback -> True when it is a hosted MCP tool's
(called with an ``MCPToolApprovalRequest``; else with the run context and the
``ToolApprovalItem``)."""


def wrap_approval_callbacks(tool: Any) -> None:
    """Wrap ``tool``'s approval callback (see the module docstring), once; a tool without
    one is left as it is."""
    for name, hosted in CALLBACKS.items():
        callback = getattr(tool, name, None)
        if callable(callback) and not is_ours(callback):
            setattr(tool, name, ours(answered(callback, _recorder(callback, hosted))))


def _recorder(callback: Any, hosted: bool) -> Any:
    """What records the verdict of ``callback`` and gives the SDK its answer (``answer`` of
    :func:`answered`): the verdict itself, or for a hosted MCP request the app approved,
    the guard's rejection when it denies the call
    (:func:`~evidence_ledger.record.integrations.hosted_guard.answer_callback`)."""
    name = getattr(callback, "__qualname__", None) or type(callback).__qualname__
    approver = f"callback:{name}"

    def record(args: tuple[Any, ...], verdict: Any) -> Any:
        frame = CURRENT_LEG.get()
        if frame is None:
            return verdict
        if hosted:  # as the SDK reads it: verdict["approve"], truthy approves
            try:
                approved = bool(verdict["approve"])
                reason = verdict.get("reason")
            except Exception:  # the SDK fails reading it too: it applies nothing
                return verdict
            agent, raw = None, getattr(args[0], "data", None) if args else None
        elif isinstance(verdict, Mapping) and isinstance(verdict.get("approve"), bool):
            item = args[1] if len(args) > 1 else None
            agent, raw = getattr(item, "agent", None), getattr(item, "raw_item", None)
            approved, reason = verdict["approve"], verdict.get("reason")
        else:
            return verdict
        found = native_call(agent, raw)
        if found is None:
            return verdict
        call_id, tool, arguments, _ = found
        reason = reason if isinstance(reason, str) and reason else None
        frame.record(methodcaller(
            "decision", run_id=frame.run_id, call_id=call_id,
            decision="approve" if approved else "reject", approver=approver,
            scope=frame.scope, reason=reason, message=None if approved else reason,
            arguments=arguments, agent=agent_label(agent) if agent is not None else None,
            tool=tool, run_state=frame.run_state, time_ns=frame.journal.writer.clock(),
        ))
        return answer_callback(frame, call_id, approved, verdict) if hosted else verdict

    return record
