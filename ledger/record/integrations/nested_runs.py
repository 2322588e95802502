"""The runs an agent tool (``Agent.as_tool``) starts inside a recorded leg: recorded with the
leg's run hooks, in the tool's scope.

The SDK starts such a run with ``Runner.run`` / ``Runner.run_streamed``, which hand it to the
default agent runner (``agents.run.get_default_agent_runner()``), with the run hooks given to
``as_tool`` (usually none), not the hooks of the run the tool belongs to. So before each leg
the recorder makes the default runner a :class:`RecordingRunner` wrapping whatever runner was
the default (the SDK's extension point for this; an app that sets its own default runner later
is wrapped again at the next leg). It changes nothing of a run but its hooks:

- a run an agent tool of a recorded leg starts (marked by
  :data:`~evidence_ledger.record.integrations.legs.AGENT_TOOL`) gets
  :class:`~evidence_ledger.record.integrations.hooks.RecordingRunHooks` wrapping the hooks it
  was given;
- any other run started inside a recorded leg (a tool that runs an agent of its own) runs
  outside the leg: it is not recorded, as it would not be from a plain app;
- a run outside any recorded leg, and the recorder's own run of a leg, are passed on as
  they are.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any

from agents.run import AgentRunner, get_default_agent_runner, set_default_agent_runner

from evidence_ledger.record.integrations.hooks import RecordingRunHooks
from evidence_ledger.record.integrations.legs import AGENT_TOOL, CURRENT_LEG, entered

__all__ = ["RecordingRunner", "install_runner"]


class RecordingRunner(AgentRunner):
    """A default agent runner that records agent-tool runs of a recorded leg, delegating
    every run to ``inner`` (the runner that was the default)."""

    def __init__(self, inner: AgentRunner) -> None:
        self.inner = inner

    async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        placed, kwargs = _placed(kwargs)
        with placed:
            return await self.inner.run(starting_agent, input, **kwargs)

    def run_streamed(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        placed, kwargs = _placed(kwargs)
        with placed:  # the SDK's run task copies the context variables as they are here
            return self.inner.run_streamed(starting_agent, input, **kwargs)

    def run_sync(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return self.inner.run_sync(starting_agent, input, **kwargs)


def _placed(kwargs: dict[str, Any]) -> tuple[AbstractContextManager[None], dict[str, Any]]:
    """Where a run started now belongs (the leg to run it in) and its arguments: a run
    outside any recorded leg, or the recorder's own run of a leg (its hooks are recording
    ones), as it is; an agent-tool run in the leg with recording hooks (its own agent tools
    mark their runs again); any other run outside the leg."""
    hooks = kwargs.get("hooks")
    if CURRENT_LEG.get() is None or isinstance(hooks, RecordingRunHooks):
        return contextlib.nullcontext(), kwargs
    if AGENT_TOOL.get():
        return entered(CURRENT_LEG.get()), {**kwargs, "hooks": RecordingRunHooks(hooks)}
    return entered(None), kwargs


def install_runner() -> None:
    """Make the default agent runner a :class:`RecordingRunner` (wrapping the current one)
    unless it is one."""
    current = get_default_agent_runner()
    if not isinstance(current, RecordingRunner):
        set_default_agent_runner(RecordingRunner(current))
