"""The runs an agent tool (``Agent.as_tool``) starts inside a recorded leg: recorded with the
leg's run hooks, in the tool's scope.

The SDK starts such a run with ``Runner.run`` / ``Runner.run_streamed``, which hand it to the
default agent runner (``agents.run.get_default_agent_runner()``), with the run hooks given to
``as_tool`` (usually none), not the hooks of the run the tool belongs to, and with a
``ToolContext`` naming the tool call (every release since 0.20). So before each leg the
recorder makes the default runner a :class:`RecordingRunner` wrapping whatever runner was
the default (the SDK's extension point for this; an app that sets its own default runner
later is wrapped again at the next leg). It changes nothing of a run but its hooks (and,
under a guard policy, what the guard changes: docs/ENFORCEMENT.md):

- a run of the agent of the calling agent's agent tool that a ``ToolContext`` names, given
  that call's ``ToolContext``, runs in a leg in the scope of that call (edge
  ``"<tool name>:<call_id>"``) with
  :class:`~evidence_ledger.record.integrations.hooks.RecordingRunHooks` wrapping the hooks it
  was given;
- any other run started inside a recorded leg (a tool that runs an agent of its own) runs
  outside the leg: it is not recorded, as it would not be from a plain app;
- a run outside any recorded leg, and the recorder's own run of a leg, are passed on as
  they are.

An agent-tool run that resumes its agent's ``RunState`` and ends (or fails) with a call its
tool's hooks never reported gets that call's execution from the output the SDK committed
in that state (:func:`~evidence_ledger.record.integrations.published.committed_executions`).
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from agents import RunState
from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner
from agents.tool_context import ToolContext

from evidence_ledger.record.integrations.hooks import RecordingRunHooks, pending_call_owners
from evidence_ledger.record.integrations.hosted_guard import (
    answer_resumed_requests,
    check_model_input,
)
from evidence_ledger.record.integrations.legs import CURRENT_LEG, entered
from evidence_ledger.record.integrations.published import committed_executions

__all__ = ["RecordingRunner", "install_runner"]


class RecordingRunner(AgentRunner):
    """A default agent runner that records agent-tool runs of a recorded leg, delegating
    every run to ``inner`` (the runner that was the default)."""

    def __init__(self, inner: AgentRunner) -> None:
        self.inner = inner

    async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        placed, kwargs = _placed(starting_agent, kwargs)
        with placed:
            _resuming(input)
            try:
                return await self.inner.run(starting_agent, input, **kwargs)
            finally:
                leg = CURRENT_LEG.get()
                if leg is not None and leg.scope:  # an agent tool's run, in its call's scope
                    for execution in committed_executions(leg, input):
                        leg.record(execution)

    def run_streamed(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        placed, kwargs = _placed(starting_agent, kwargs)
        with placed:  # the SDK's run task copies the context variables as they are here
            _resuming(input)
            return self.inner.run_streamed(starting_agent, input, **kwargs)

    def run_sync(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return self.inner.run_sync(starting_agent, input, **kwargs)


def _placed(
    starting_agent: Any, kwargs: dict[str, Any]
) -> tuple[AbstractContextManager[None], dict[str, Any]]:
    """Where a run started now belongs (the leg to run it in) and its arguments (see the
    module docstring)."""
    leg, hooks = CURRENT_LEG.get(), kwargs.get("hooks")
    if leg is None or isinstance(hooks, RecordingRunHooks):
        return contextlib.nullcontext(), kwargs
    edge = _agent_tool_edge(starting_agent, kwargs.get("context"))
    if edge is None:
        return entered(None), kwargs
    nested = replace(leg, scope=(*leg.scope, edge))
    kwargs = {**kwargs, "hooks": RecordingRunHooks(hooks)}
    if leg.policy is not None:
        kwargs["run_config"] = check_model_input(kwargs.get("run_config"))
    return entered(nested), kwargs


def _resuming(input: Any) -> None:
    """Before an agent-tool run of a guarded leg resumes its agent's ``RunState``
    ``input``: note who made the calls it waits on, in its scope, and let the guard answer
    its hosted MCP requests
    (:func:`~evidence_ledger.record.integrations.hosted_guard.answer_resumed_requests`)."""
    leg = CURRENT_LEG.get()
    if leg is None or not leg.scope or leg.policy is None or not isinstance(input, RunState):
        return
    for (_, call_id), owner in pending_call_owners(input).items():
        leg.call_owners.setdefault((leg.scope, call_id), owner)
    answer_resumed_requests(leg, input)


def _agent_tool_edge(starting_agent: Any, context: Any) -> str | None:
    """The scope edge of the agent-tool call whose ``ToolContext`` is ``context``, when the
    tool it names is one of the calling agent's agent tools and ``starting_agent`` that
    tool's agent (a function tool that runs some agent of its own is none); else None."""
    if not isinstance(context, ToolContext):
        return None
    tools = getattr(getattr(context, "agent", None), "tools", None) or ()
    if not any(getattr(tool, "_agent_instance", None) is starting_agent
               and getattr(tool, "name", None) == context.tool_name for tool in tools):
        return None
    return f"{context.tool_name}:{context.tool_call_id}"


def install_runner() -> None:
    """Make the default agent runner a :class:`RecordingRunner` (wrapping the current one)
    unless it is one."""
    current = get_default_agent_runner()
    if not isinstance(current, RecordingRunner):
        set_default_agent_runner(RecordingRunner(current))
