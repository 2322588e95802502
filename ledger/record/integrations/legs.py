"""The leg being recorded: a context variable naming the run id, scope and resumed run
state of the leg the running code belongs to, and the journal its evidence goes to
(queued, or durable at once)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from evidence_ledger.format.errors import UsageError
from evidence_ledger.policy.judge import Verdict
from evidence_ledger.policy.model import Policy
from evidence_ledger.record.integrations.agent_labels import Labels, labelled
from evidence_ledger.record.integrations.group_commit import Journal, Write
from evidence_ledger.record.writer import Scope


@dataclass(frozen=True)
class Leg:
    """The leg of a run being recorded, and the journal its evidence goes to."""

    journal: Journal
    since: int | None  # None: entry durability; else the journal's failures at its start
    run_id: str
    scope: Scope = ()
    run_state: str | None = None  # the state this leg resumed from; None: started fresh
    resumed: Any = field(default=None, compare=False)  # that RunState object
    handoff_calls: dict[tuple[Scope, str], list[tuple[str, str, str]]] = field(
        default_factory=dict, compare=False)
    """Per ``(scope, agent name)``: the function calls of the agent's latest model response
    that name one of its handoffs, as ``(call_id, tool name, arguments)`` (shared by the
    legs :func:`dataclasses.replace` makes for nested scopes)."""
    native_calls: dict[tuple[Scope, str, str], list[tuple[str, str]]] = field(
        default_factory=dict, compare=False)
    """The calls of other tool kinds waiting to run (see
    :data:`~evidence_ledger.record.integrations.native_calls.Pending`; shared like
    ``handoff_calls``)."""

    executed: dict[tuple[Scope, str], int] = field(default_factory=dict, compare=False)
    """``(scope, call_id)`` of each tool call whose execution this leg recorded, with the
    execution's time (ns): a function tool's is recorded once, by the first of a tool
    output guardrail or ``on_tool_end`` to see it (shared like ``handoff_calls``)."""

    started: dict[tuple[Scope, str], tuple[str, str, str]] = field(
        default_factory=dict, compare=False)
    """``(scope, call_id)`` -> ``(agent, tool, arguments)`` as the ledger records them, of
    each call whose tool the SDK started in this leg (``on_tool_start``): one whose
    execution is not recorded is looked for among the outputs the SDK commits (see
    :mod:`~evidence_ledger.record.integrations.published`; shared like
    ``handoff_calls``)."""

    running: dict[tuple[Scope, str, str], list[str]] = field(default_factory=dict,
                                                             compare=False)
    """Per ``(scope, agent name, tool name)`` of a tool of another kind than function: the
    call ids it started and has not ended, oldest first (its ``on_tool_end`` does not name
    the call; shared like ``handoff_calls``)."""

    response_calls: dict[tuple[Scope, str], list[tuple[str, str]]] = field(
        default_factory=dict, compare=False)
    """Per ``(scope, agent name)``: ``(call_id, tool name)`` of the function calls of the
    agent's latest model response (none when it answered in text: the SDK withholds the
    outputs of all of them when an agent output guardrail trips on a final output that came
    from tools; shared like ``handoff_calls``)."""

    gated: dict[tuple[Scope, str], bool] = field(default_factory=dict, compare=False)
    """What a tool's callable ``needs_approval`` decided per ``(scope, call_id)`` in this
    leg (shared like ``handoff_calls``)."""

    call_owners: dict[tuple[Scope, str], tuple[Any, Any, str]] = field(
        default_factory=dict, compare=False)
    """``(scope, call_id)`` -> ``(agent, raw call item, tool as the ledger records it)`` of
    each call a model response of this leg made, or that the state it resumed waits on
    (shared like ``handoff_calls``)."""

    contexts: dict[Scope, Any] = field(default_factory=dict, compare=False)
    """Per scope: the run context (``RunContextWrapper``) the SDK last passed to a run hook
    there; at top level, before any hook, the one the leg was given (the resumed state's,
    or a wrapper passed as ``context``) (shared like ``handoff_calls``)."""

    policy: Policy | None = field(default=None, compare=False)
    """The guard's policy (:mod:`~evidence_ledger.record.integrations.guard`); None: no guard."""

    guarded: dict[tuple[Scope, str], Verdict] = field(default_factory=dict, compare=False)
    """The guard's verdict per ``(scope, call_id)`` judged in this leg (shared like
    ``handoff_calls``)."""

    answers_unknown_tools: bool = False
    """The run's ``RunConfig`` has the SDK answer a call of a tool the agent does not have
    with an error text (``tool_not_found_behavior="return_error_to_model"``) rather than
    fail the run."""

    labels: Labels = field(default_factory=dict, compare=False)
    """The label of each agent of the run's graph (see
    :mod:`~evidence_ledger.record.integrations.agent_labels`), in force while the leg's
    code runs."""

    def record(self, write: Write) -> None:
        """Record evidence of this leg (queued, or durable at once; see ``since``)."""
        self.journal.record(write, self.since)


CURRENT_LEG: ContextVar[Leg | None] = ContextVar("evidence_ledger_frame", default=None)

def current_leg() -> Leg:
    """The leg the running code belongs to.

    Raises:
        UsageError: if no :class:`Leg` is entered (an attached agent run outside the
            recorder).
    """
    frame = CURRENT_LEG.get()
    if frame is None:
        raise UsageError("an attached agent ran outside Recorder.run / Recorder.run_streamed")
    return frame


@contextlib.contextmanager
def entered(frame: Leg | None) -> Iterator[None]:
    """Make ``frame`` the current leg (None: no leg) for the code run inside the ``with``
    block."""
    token = CURRENT_LEG.set(frame)
    try:
        with labelled(frame.labels if frame is not None else {}):
            yield
    finally:
        CURRENT_LEG.reset(token)
