"""Calls of the SDK's other tool kinds: shell, local shell, apply_patch, computer and custom
tool calls run locally; hosted MCP calls and hosted tools' calls run by the provider.

A model response's items of these kinds are recorded as calls, like ``function_call`` items
(:func:`native_call` says how each kind is keyed). Their executions:

- a local tool (shell, local shell, apply_patch, computer, custom) fires ``on_tool_start``
  with the tool object, then ``on_tool_end`` with its output. A custom tool's context names
  its call; the others get a plain run context, so the call started is the first one of
  the agent's latest response for that tool (the SDK runs a kind's calls one after the
  other, in response order) that the SDK would run: not rejected, and approved when the
  tool always needs approval or its callable ``needs_approval`` gated that call
  (:func:`take_started`); the call that ends is the oldest one
  started;
- a hosted MCP call the provider ran after an approval request (``mcp_call`` naming its
  ``approval_request_id``) is the execution of that request's call, its output the result;
  one that needed no approval is recorded as its call and its execution;
- a hosted tool's call (web search, file search, code interpreter, image generation) comes
  back from the provider as one item holding what it asked and what it got: it is recorded
  as its call (keyed by the item's id, needing no approval: the SDK asks for none) and its
  execution, whose result is the provider's (:data:`HOSTED_KINDS`, :func:`provider_run`);
  a provider tool search comes back as two items, its ``tool_search_call`` (keyed by its
  ``call_id``) and its ``tool_search_output`` (the tools it found: the result). The SDK
  does not run a client-executed tool search (it fails the run). A shell call run in the
  provider's container comes back with its ``shell_call_output`` in the same response: it
  is recorded as a shell call whose execution is that output (:data:`PROVIDER_RESULTS`).

The pending calls of a resumed state (its interruptions) are known at the start of a leg, so
a call approved in another process is found too (:func:`pending_native_calls`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import agents

from evidence_ledger.record.writer import Scope

__all__ = [
    "HOSTED_KINDS", "NATIVE_KINDS", "PROVIDER_RESULTS", "ProviderRun", "item_field",
    "native_call", "payload_text", "pending_native_calls", "provider_result", "provider_run",
    "take_started",
]

NATIVE_KINDS = {
    "shell_call": ("ShellTool", "action"),
    "local_shell_call": ("LocalShellTool", "action"),
    "apply_patch_call": ("ApplyPatchTool", "operation"),
    "computer_call": ("ComputerTool", "action"),
    "custom_tool_call": (None, "input"),
    "mcp_approval_request": (None, "arguments"),
}
"""Item type -> (the SDK tool class that runs it, by name; None: the item names its tool),
the field holding what the call asks for, recorded as its arguments."""

HOSTED_KINDS = {
    "web_search_call": ("web_search", "action", "status"),
    "file_search_call": ("file_search", "queries", "results"),
    "code_interpreter_call": ("code_interpreter", "code", "outputs"),
    "image_generation_call": ("image_generation", "action", "result"),
}
"""Item type of a hosted tool's call -> (tool name, the field recorded as its arguments,
the field recorded as its result: for a web search only its status, which is all the item
holds)."""


class ProviderRun(NamedTuple):
    """A call the provider ran, as one response item says."""

    call_id: str
    tool: str
    arguments: str
    result: str | None
    """None: the response holds no result of the call (the provider's tool search returns
    its output as an item of its own)."""
    requested: bool
    """True: the item names an approval request (``call_id`` is that request's id)."""


def provider_run(item: Any, response: list[Any]) -> ProviderRun | None:
    """The :class:`ProviderRun` of a hosted tool's call or a hosted MCP call (``mcp_call``:
    its output, or its error when it failed), ``item`` of the model response ``response``
    (its output items); None for any other item. A provider tool search
    (``tool_search_call``, keyed by its ``call_id``) has for result the ``tools`` of the
    ``tool_search_output`` with that call id in ``response``."""
    kind, item_id = item_field(item, "type"), item_field(item, "id")
    if kind == "tool_search_call":
        call_id = item_field(item, "call_id") or item_id
        if not isinstance(call_id, str):
            return None
        return ProviderRun(call_id, "tool_search", payload_text(item_field(item, "arguments")),
                           provider_result(response, kind, call_id), False)
    if kind == "mcp_call":
        request = item_field(item, "approval_request_id")
        error = item_field(item, "error")
        return ProviderRun(
            request if isinstance(request, str) else str(item_id),
            str(item_field(item, "name") or ""), str(item_field(item, "arguments") or ""),
            payload_text(item_field(item, "output") if error is None else error),
            isinstance(request, str))
    if kind not in HOSTED_KINDS or not isinstance(item_id, str):
        return None
    tool, asked, got = HOSTED_KINDS[kind]
    return ProviderRun(item_id, tool, payload_text(item_field(item, asked)),
                       payload_text(item_field(item, got)), False)


PROVIDER_RESULTS = {
    "tool_search_call": ("tool_search_output", "tools"),
    "shell_call": ("shell_call_output", "output"),
}
"""Item type of a call the provider may run and answer with an item of its own in the same
response -> (that item's type, its field recorded as the result): the provider's tool
search, and a shell call run in a hosted container (a ``ShellTool`` whose ``environment``
is the provider's)."""


def provider_result(response: list[Any], kind: str, call_id: str) -> str | None:
    """The result of the call ``call_id`` (an item of type ``kind``) that the provider
    returned in ``response`` (a model response's output items; see
    :data:`PROVIDER_RESULTS`), as recorded; None if it returned none."""
    result_type, field = PROVIDER_RESULTS.get(kind, (None, ""))
    found = next((o for o in response if result_type is not None
                  and item_field(o, "type") == result_type
                  and item_field(o, "call_id") == call_id), None)
    return None if found is None else payload_text(item_field(found, field))


Pending = dict[tuple[Scope, str, str], list[tuple[str, str]]]
"""Per ``(scope, agent name, tool name)``: ``(call_id, arguments)`` of the calls of the
agent's latest response that its tool has not run yet."""


def item_field(obj: Any, name: str) -> Any:
    """Field ``name`` of a response item, a mapping or an object (None if absent)."""
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def payload_text(value: Any) -> str:
    """A call's payload or a tool's output as the string recorded for it: a string as it is,
    anything else as JSON (a pydantic model by its JSON dump; unknown values by ``str``)."""
    if isinstance(value, str):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(mode="json", exclude_none=True)
    return json.dumps(value, default=str)


def _tool_name(agent: Any, kind: str, item: Any) -> str:
    cls_name, _ = NATIVE_KINDS[kind]
    if cls_name is None:
        return str(item_field(item, "name") or "")
    cls = getattr(agents, cls_name, None)
    tool = next((t for t in getattr(agent, "tools", ()) if cls and isinstance(t, cls)), None)
    return str(getattr(tool, "name", None) or kind.removesuffix("_call"))


def native_call(agent: Any, item: Any) -> tuple[str, str, str, bool | None] | None:
    """``(call_id, tool name, arguments, needs_approval)`` of a response item of a kind in
    :data:`NATIVE_KINDS` (``needs_approval``: the tool's setting when it is a bool, True for
    an MCP approval request, else None); None for any other item."""
    kind = item_field(item, "type")
    if kind not in NATIVE_KINDS:
        return None
    call_id = item_field(item, "id" if kind == "mcp_approval_request" else "call_id")
    if not isinstance(call_id, str):
        return None
    name = _tool_name(agent, kind, item)
    if kind == "mcp_approval_request":
        policy: Any = True
    else:
        tool = next((t for t in getattr(agent, "tools", ()) if getattr(t, "name", None) == name),
                    None)
        policy = getattr(tool, "needs_approval", None)
    return (call_id, name, payload_text(item_field(item, NATIVE_KINDS[kind][1])),
            policy if isinstance(policy, bool) else None)


def pending_native_calls(state: Any) -> Pending:
    """The native calls a paused ``RunState`` waits on (its interruptions), as
    :data:`Pending` at top-level scope; empty if the SDK cannot say."""
    try:
        items = state.get_interruptions()
    except Exception:
        return {}
    pending: Pending = {}
    for item in items:
        agent = getattr(item, "agent", None)
        found = native_call(agent, getattr(item, "raw_item", None))
        if found is not None and agent is not None:
            call_id, tool, arguments, _ = found
            pending.setdefault(((), agent.name, tool), []).append((call_id, arguments))
    return pending


def take_started(
    pending: Pending, scope: Scope, agent: Any, tool: Any, context: Any,
    gated: Mapping[tuple[Scope, str], bool],
) -> tuple[str, str] | None:
    """The ``(call_id, arguments)`` of the call ``tool`` starts for ``agent`` (see the
    module docstring), removed from ``pending``; None if there is none. ``gated``: what a
    callable ``needs_approval`` decided per ``(scope, call_id)`` in this leg (a call it
    gated runs only once approved)."""
    calls = pending.get((scope, agent.name, tool.name))
    if not calls:
        return None
    named = getattr(context, "tool_call_id", None)
    always = getattr(tool, "needs_approval", None) is True
    approved = getattr(context, "is_tool_approved", None)
    for index, (call_id, arguments) in enumerate(calls):
        if named is not None:
            if call_id != named:
                continue
        elif callable(approved):
            status = approved(tool.name, call_id)
            needs = always or gated.get((scope, call_id)) is True
            if status is False or (needs and status is not True):
                continue
        del calls[index]
        return call_id, arguments
    return None
