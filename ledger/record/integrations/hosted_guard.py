"""The guard's answer to a hosted MCP approval request: a rejection, unless the ledger holds
a live, bound approval (:mod:`~evidence_ledger.record.integrations.guard`).

The provider runs a hosted MCP tool's call, so there is no local body to stop: the last
point the app controls is the ``mcp_approval_response`` the SDK sends back. The guard
judges a request the app approved, for a tool a rule of the policy names, right before the
SDK builds that response, and appends the ``allowed`` or ``denied`` entry durably first:

- approved by the tool's ``on_approval_request`` callback: once the callback's verdict is
  recorded as a ``decision``, the guard judges it; denied in ``enforce`` mode, the SDK
  receives ``{"approve": False, "reason": <the policy's message>}`` in its place
  (:func:`answer_callback`);
- approved on a paused ``RunState`` (``Recorder.approve``, or ``RunState.approve``): when a
  recorded leg resumes from the state, the guard judges each approved hosted MCP request
  it waits on; denied in ``enforce`` mode, it rejects the request on the state
  (``RunState.reject``, with the policy's message where the SDK takes one) before the SDK
  reads it (:func:`answer_resumed_requests`);
- approved any other way the SDK knows (a sticky approval from an earlier request, an
  approval made on the run context before the run): the SDK answers such a request
  itself, with no callback and no pause. A recorded run under a policy gets a
  ``RunConfig.call_model_input_filter`` (after the app's own, if it has one) that passes
  each approving ``mcp_approval_response`` of a request made or resumed in the leg through
  the guard before the model is called; denied in ``enforce`` mode, the provider gets the
  policy's rejection in its place (:func:`check_model_input`). The item the SDK keeps (and
  a session persists) still says what the SDK decided; the ``denied`` entry says what was
  sent.

In ``observe`` mode the verdict is recorded and the approval stands. A request the app
rejected, or has not decided, is left alone: nothing of it runs.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from agents import RunConfig

from evidence_ledger.policy.judge import Verdict
from evidence_ledger.record.integrations.agent_labels import agent_label
from evidence_ledger.record.integrations.context_decisions import context_status
from evidence_ledger.record.integrations.guard import guard_call
from evidence_ledger.record.integrations.legs import CURRENT_LEG, Leg
from evidence_ledger.record.integrations.native_calls import item_field, native_call
from evidence_ledger.record.integrations.wrappers import is_ours, ours

__all__ = ["answer_callback", "answer_resumed_requests", "check_model_input"]


def _judged(frame: Leg, agent: Any, raw: Any) -> Verdict | None:
    """The guard's verdict on the hosted MCP request ``raw`` of ``agent`` in ``frame``,
    appended durably; None when it is not one, or no rule of the policy names its tool."""
    found = native_call(agent, raw)
    if (frame.policy is None or agent is None or found is None
            or item_field(raw, "type") != "mcp_approval_request"):
        return None
    call_id, tool, arguments, _ = found
    name = agent_label(agent)
    rule = frame.policy.rule(name, tool)
    if rule is None:
        return None
    return guard_call(frame, rule, call_id, name, tool, arguments, rejects=True)


def _denied(frame: Leg, call_id: str) -> bool:
    """Whether the guard denies the hosted MCP request ``call_id`` of ``frame`` (judged
    now, unless it was in this leg), in ``enforce`` mode."""
    verdict = frame.guarded.get((frame.scope, call_id))
    owner = frame.call_owners.get((frame.scope, call_id))
    if verdict is None and owner is not None:
        verdict = _judged(frame, owner[0], owner[1])
    return verdict is not None and not verdict.allowed and _enforced(frame, owner)


def _enforced(frame: Leg, owner: tuple[Any, Any, str] | None) -> bool:
    rule = None if owner is None or frame.policy is None else frame.policy.rule(
        agent_label(owner[0]), owner[2])
    return rule is not None and rule.mode == "enforce"


def answer_callback(frame: Leg, call_id: str, approved: bool, answer: Any) -> Any:
    """What the SDK gets from a hosted MCP tool's ``on_approval_request`` callback that
    answered ``answer`` (``approved``: as the SDK reads it) on the request ``call_id`` of
    ``frame``: ``answer``, or the policy's rejection when the guard denies the call.

    Raises:
        StorageError: if the guard's entry cannot be appended (the SDK then fails the run:
            nothing is approved on a verdict that could be lost).
    """
    if not approved or frame.policy is None or not _denied(frame, call_id):
        return answer
    return {"approve": False, "reason": frame.policy.message}


def answer_resumed_requests(frame: Leg, state: Any) -> None:
    """Judge each hosted MCP request the paused ``state`` waits on that its context
    approves, as ``frame`` (the leg resuming from it) starts; reject on ``state`` each one
    the guard denies in ``enforce`` mode.

    Raises:
        StorageError: if a guard entry cannot be appended.
    """
    if frame.policy is None:
        return
    try:
        items = list(state.get_interruptions())
    except Exception:  # a state that cannot say what it waits on has no request to answer
        return
    context = getattr(state, "_context", None)
    for item in items:
        agent, raw = getattr(item, "agent", None), getattr(item, "raw_item", None)
        request = item_field(raw, "id")
        if item_field(raw, "type") != "mcp_approval_request" or not isinstance(request, str):
            continue
        approved = context_status(context, (item_field(raw, "name") or "",), request, agent,
                                  raw)
        if approved is True and _denied(frame, request):
            _reject(state, item, frame.policy.message)


def check_model_input(run_config: Any) -> Any:
    """A copy of ``run_config`` (a ``RunConfig``; None: the SDK's default) whose
    ``call_model_input_filter`` runs the app's own first, if any, then passes each item of
    the model's input through :func:`_checked_item`; ``run_config`` itself when its filter
    is that one already."""
    config = run_config if run_config is not None else RunConfig()
    app_filter = config.call_model_input_filter
    if app_filter is not None and is_ours(app_filter):
        return config

    async def check(data: Any) -> Any:
        model_data = data.model_data
        if app_filter is not None:
            model_data = app_filter(data)
            if inspect.isawaitable(model_data):
                model_data = await model_data
        frame = CURRENT_LEG.get()
        if frame is None or frame.policy is None:
            return model_data
        return dataclasses.replace(model_data, input=[
            _checked_item(frame, item) for item in model_data.input])

    return dataclasses.replace(config, call_model_input_filter=ours(check))


def _checked_item(frame: Leg, item: Any) -> Any:
    """``item`` of the model's input, or, for an approving ``mcp_approval_response`` of a
    request of ``frame`` the guard denies, the policy's rejection in its place."""
    if item_field(item, "type") != "mcp_approval_response" or not item_field(item, "approve"):
        return item
    request = item_field(item, "approval_request_id")
    if not isinstance(request, str) or frame.policy is None or not _denied(frame, request):
        return item
    answer = dict(item) if isinstance(item, dict) else item.model_dump(exclude_none=True)
    return {**answer, "approve": False, "reason": frame.policy.message}


def _reject(state: Any, item: Any, message: str) -> None:
    """``state.reject(item)``, with ``message`` as the rejection where the SDK takes one
    (0.22 on)."""
    if "rejection_message" in inspect.signature(state.reject).parameters:
        state.reject(item, rejection_message=message)
    else:
        state.reject(item)
