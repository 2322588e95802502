"""Record runs of the OpenAI Agents SDK (``openai-agents`` 0.20 - 0.24) into a ledger.

Usage::

    recorder = Recorder("./.evidence")
    result = await recorder.run(agent, "hello", session=SQLiteSession("s1", "chat.db"))
    if result.interruptions:
        state = result.to_state()      # or RunState.from_json(agent, json) in another process
        for item in state.get_interruptions():
            recorder.approve(state, item, approver="alice", reason="checked")
        result = await recorder.run(agent, state, session=SQLiteSession("s1", "chat.db"))

:meth:`Recorder.run` and :meth:`Recorder.run_streamed` take the arguments of
``Runner.run`` / ``Runner.run_streamed``. Before each run they :func:`attach` recording
to the tools and guardrails of the starting agent (of the state's current agent too, on a
resume) and of every agent reachable from it through ``Agent.as_tool`` or ``handoffs``,
give the run :class:`~evidence_ledger.record.integrations.hooks.RecordingRunHooks`
(wrapping the ``hooks`` argument), make sure agent-tool runs get them too
(:mod:`evidence_ledger.record.integrations.nested_runs`), and wrap the ``session`` argument
with :func:`recorded_session`.
What is recorded, and from where:

- ``call``: each ``function_call`` in a model response (``on_llm_end`` run hook), and
  each call of another kind (shell, apply_patch, computer, custom, hosted MCP approval
  request: :mod:`evidence_ledger.record.integrations.native_calls`);
- ``tool_policy``: each per-call result of a callable ``needs_approval`` (wrapped);
- ``decision``: :meth:`Recorder.approve` / :meth:`Recorder.reject`, which apply it too
  (``RunState.approve`` / ``reject`` call no callback);
- ``execution``: each finished function tool (``on_tool_end`` run hook; with tool output
  guardrails, the first of them), its result converted the way the SDK converts it for the
  ``function_call_output`` item; a tool of another kind at ``on_tool_end``; a hosted MCP
  call when the provider's ``mcp_call`` comes back;
- ``guardrail``: a tool input guardrail that did not allow a call, a tool output
  guardrail that did not allow a tool's result (wrapped: the SDK fires no hook for
  either; the execution then holds what the tool returned, though the SDK persists the
  guardrail's message or raises), and each extra handoff of a response that the SDK
  ignores (:data:`~evidence_ledger.record.integrations.hooks.IGNORED_HANDOFF`);
- ``session_item``: each item the wrapped session accepted or removed;
- ``run_end``: the end of every leg of a run (``completed``, ``interrupted``, ``failed``);
- ``run_state``: each ``RunState`` the recorder meets (see *Run states* in
  :mod:`evidence_ledger.record.integrations.run_states`).

Durability: ``Recorder(ledger, durability="group")`` (the default) takes no sync on the
agent's path. The evidence of a leg (every entry above that a hook, a wrapped tool or
the wrapped session produces while the leg runs, and the ``loaded`` / ``resume`` run
states of its start) is queued, in the order it was produced, and a flusher thread
(:mod:`evidence_ledger.record.integrations.group_commit`) appends it in groups: what is queued, at
most :data:`~evidence_ledger.record.integrations.group_commit.GROUP_WRITES` writes or what arrived
within :data:`~evidence_ledger.record.integrations.group_commit.GROUP_WINDOW` seconds, as one atomic
group (``writer.atomic()``: one lock, one sync), one group at a time. The guarantee:

- :meth:`Recorder.run` returns, and ``stream_events()`` of :meth:`Recorder.run_streamed`
  ends, only after the leg's evidence and its ``run_end`` are durable;
- :meth:`Recorder.approve` / :meth:`Recorder.reject` append what is still queued, then
  have the SDK apply the decision and record it in one group, durable before they return
  (nothing is recorded if the SDK refuses it); ``to_state()`` records its ``run_state``
  entry durably before returning; so does a session write outside a leg;
  :meth:`Recorder.flush` appends what is queued on demand;
- what is durable is always a prefix, in order, of the evidence produced: a crash in
  the middle of a leg loses at most the tail of that leg not yet appended (at most the
  group being synced and what was queued after it), never an entry acknowledged by the
  return of one of the calls above, and never the ledger's integrity (one group is
  written and synced at a time; a torn group is cut back by the next writer);
- if the flusher cannot append a group (an I/O error, a full disk, a lock time-out), no
  entry of that group is appended and what was queued after it is dropped; every leg
  running then records nothing more (so the prefix rule holds per leg): its next hook
  raises :class:`~evidence_ledger.format.errors.StorageError` into the SDK, and its end raises
  :class:`~evidence_ledger.format.errors.StorageError` after recording its ``run_end`` as
  ``failed`` if
  the storage takes it. A failure is never swallowed: the first durable point above to
  come raises it, and the end of every leg it hit;
- entry times are taken when the evidence is produced, not when it is appended.

``durability="entry"`` appends every entry as its own durable group before its hook
returns (one sync per entry on the agent's path). Use the recorder, not
``recorder.writer`` directly, while a leg runs.

The rest lives in modules of its own: the evidence queue and its flusher
(:mod:`evidence_ledger.record.integrations.group_commit`), the leg being recorded
(:mod:`evidence_ledger.record.integrations.legs`), run ids and run-state lineage
(:mod:`evidence_ledger.record.integrations.run_states`), the run hooks and tool wrappers, with the
scope of nested calls (:mod:`evidence_ledger.record.integrations.hooks`), and the session wrapper
(:mod:`evidence_ledger.record.integrations.recorded_session`), and the runs agent tools start
(:mod:`evidence_ledger.record.integrations.nested_runs`).

The recorder is a guest: the run context (any type) is passed on untouched, and run ids and
run-state ids are kept by the recorder, not in the context, a ``RunState`` or its JSON (see
:mod:`evidence_ledger.record.integrations.run_states`). Agents are left as they are (their
hooks are part of how a ``RunState`` identifies them); the tool and guardrail wrappers keep
the wrapped functions' names and record nothing outside a recorded leg.

Limits: a session write outside a recorded run is recorded with ``run_id=""``; a streamed run
whose events are left before their end (and whose run did not finish) is recorded as ``failed``,
one whose ``stream_events()`` is never called gets no ``run_end``, and one stopped with
``result.cancel()`` is recorded as ``completed``; a tool's execution is recorded at
``on_tool_end`` (or by its output guardrails), or, when a callback after it fails
(``custom_data_extractor``, an ``on_tool_end`` hook), from the output the SDK committed:
when it writes that output to the session, or when a leg (an agent tool's run too) that
resumed a state ends holding it (:mod:`evidence_ledger.record.integrations.published`; a
fresh agent-tool run's such call stays without evidence); two agents with one name in one
graph are recorded by the SDK's ``RunState`` identities ``name``, ``name#2``, ...
(:mod:`evidence_ledger.record.integrations.agent_labels`); a handoff is recorded as its
call and an execution whose result is the transfer message the SDK persists (also when the
SDK runs it in a leg resumed from a ``RunState``); the run states of agents run through
``Agent.as_tool`` are the SDK's own and not recorded (their calls are, under the top-level
run's state); tool guardrails given to an MCP server (not to a tool) are not wrapped, so a
block by one is recorded as an execution whose result is the guardrail's message; a
guardrail or approval rejection of a tool called programmatically (``caller`` type
``program``) with an output schema is persisted by the SDK as ``{"error": message}``, which
the recorded message does not match (``output_provenance``); a call of a tool the agent
lacks that the SDK answers itself is recorded as a block only for an agent without MCP
servers (whose tools the recorder cannot list); decisions an app applies on the run context
(``RunContextWrapper.approve_tool``) or on a state behind the recorder's back are recorded
only where they show (an approval when the SDK starts the call, a rejection when it persists
its message), with approver ``run_context``
(:mod:`~evidence_ledger.record.integrations.context_decisions`).

Guard: ``Recorder(ledger, policy=...)`` holds the tools a policy names to a live, bound
approval in the ledger, judged right before each body runs
(:mod:`~evidence_ledger.record.integrations.guard`, docs/ENFORCEMENT.md), and keeps orphan
outputs out of recorded sessions
(:mod:`~evidence_ledger.record.integrations.session_guard`).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from operator import methodcaller
from typing import Any

from agents import Agent, RunResult, RunResultStreaming, RunState
from agents.items import ToolApprovalItem
from agents.lifecycle import RunHooksBase
from agents.run import get_default_agent_runner
from agents.stream_events import StreamEvent

from evidence_ledger.format.errors import UsageError
from evidence_ledger.policy.model import Policy
from evidence_ledger.record.integrations.agent_labels import (
    agent_label,
    approval_tool,
    graph_labels,
    labelled,
    starting_agent,
)
from evidence_ledger.record.integrations.group_commit import Journal
from evidence_ledger.record.integrations.guard import install_guard
from evidence_ledger.record.integrations.hooks import (
    RecordingRunHooks,
    attach,
    pending_call_owners,
    pending_handoffs,
    pending_response_calls,
    reachable_agents,
)
from evidence_ledger.record.integrations.hosted_guard import (
    answer_resumed_requests,
    check_model_input,
)
from evidence_ledger.record.integrations.legs import Leg, entered
from evidence_ledger.record.integrations.native_calls import pending_native_calls
from evidence_ledger.record.integrations.nested_runs import install_runner
from evidence_ledger.record.integrations.published import committed_executions
from evidence_ledger.record.integrations.recorded_session import is_recorded, recorded_session
from evidence_ledger.record.integrations.run_states import (
    StateInfo,
    meet_state,
    record_state,
    register_state,
    state_entry,
    state_info,
)
from evidence_ledger.record.policy_file import read_policy
from evidence_ledger.record.writer import EvidenceWriter, Scope
from evidence_ledger.storage.ledger_dir import Ledger

__all__ = ["Recorder"]

DURABILITY = ("group", "entry")


def _status(result: RunResult | RunResultStreaming) -> str:
    return "interrupted" if result.interruptions else "completed"


def _finished(result: RunResultStreaming) -> bool:
    """True when a stream left early still ran to its end (the SDK's ``stream_events``,
    closed, waits for its run) without an error."""
    return bool(result.is_complete) and getattr(result, "_stored_exception", None) is None


class Recorder:
    """Records agent runs into a ledger; see the module docstring.

    Args:
        ledger: an :class:`EvidenceWriter`, a :class:`Ledger`, or a ledger directory.
        durability: ``"group"`` (default): evidence of a leg is appended in groups by a
            flusher thread, and is durable when the leg ends; ``"entry"``: every entry
            is durable before its hook returns (see *Durability* in the module docstring).
        policy: a guard policy (a TOML file's path, or a parsed
            :class:`~evidence_ledger.policy.model.Policy`): the tools it names run only on
            a live, bound approval in the ledger
            (:mod:`~evidence_ledger.record.integrations.guard`); each run records the
            policy (a ``policy`` entry) before its first leg's evidence. None: no guard.

    Raises:
        UsageError: if ``durability`` is neither; ``PolicyError`` (a ``UsageError``) if the
            policy file cannot be read or is not a valid policy.
    """

    def __init__(
        self,
        ledger: EvidenceWriter | Ledger | str | os.PathLike[str],
        *,
        durability: str = "group",
        policy: Policy | str | os.PathLike[str] | None = None,
    ) -> None:
        if durability not in DURABILITY:
            raise UsageError(f"durability must be one of {DURABILITY}, not {durability!r}")
        self.policy = policy if isinstance(policy, Policy) or policy is None else read_policy(
            policy)
        self.writer = ledger if isinstance(ledger, EvidenceWriter) else EvidenceWriter(ledger)
        self.durability = durability
        self._journal = Journal.of(self.writer)
        self._group = durability == "group"

    def flush(self) -> None:
        """Make every entry recorded so far durable (``"group"`` queues a leg's evidence).

        Raises:
            StorageError: if evidence queued earlier could not be appended, or this fails.
        """
        self._journal.commit()

    # -- running -----------------------------------------------------------------------

    async def run(self, agent: Agent[Any], input: Any, **kwargs: Any) -> RunResult:
        """``Runner.run(agent, input, **kwargs)``, recorded.

        ``input`` is a string, a list of input items, or a :class:`RunState` to resume.
        Every leg ends with a ``run_end`` entry: ``failed`` when the SDK raises (the
        exception propagates), else ``interrupted`` or ``completed``. Returns once the
        leg's evidence and its ``run_end`` are durable.

        Raises:
            StorageError: if evidence of the leg could not be appended (the leg is then
                recorded as ``failed`` where the storage still takes it).
        """
        frame = self._start(agent, input, kwargs)
        with self._leg(frame):
            result = await get_default_agent_runner().run(agent, input, **kwargs)
        self._finish(frame, _status(result))
        self._derive_states(result, frame)
        return result

    def run_streamed(self, agent: Agent[Any], input: Any, **kwargs: Any) -> RunResultStreaming:
        """``Runner.run_streamed(agent, input, **kwargs)``, recorded.

        The ``run_end`` entry is written when ``stream_events()`` ends, before it returns
        to the caller: ``failed`` when it raises, or when it is left before its end and the
        run did not finish. Closing it (``aclose()``) closes the SDK's stream as well. The leg's
        evidence and its ``run_end`` are durable when ``stream_events()`` ends.

        Raises:
            StorageError: from ``stream_events()``, as :meth:`run`.
        """
        frame = self._start(agent, input, kwargs)
        with self._leg(frame):  # the SDK's run task copies the context variable
            result = get_default_agent_runner().run_streamed(agent, input, **kwargs)
        self._derive_states(result, frame)
        events = result.stream_events
        ends: list[str] = []  # the leg ends once, however often stream_events() is called

        async def recorded_events() -> AsyncIterator[StreamEvent]:
            inner = events()
            ended = failed = False
            try:
                async for event in inner:
                    yield event
                ended = True
            except GeneratorExit:  # left early (aclose): the SDK's run may still finish
                raise
            except BaseException:  # an error, or the reading task was cancelled
                failed = True
                raise
            finally:
                try:
                    close = getattr(inner, "aclose", None)  # an async generator in the SDK
                    if close is not None:
                        await close()  # closed early (aclose): the SDK's cleanup runs
                finally:
                    if not ends:
                        ends.append("ended")
                        self._finish(frame, "failed" if failed else _status(result)
                                     if ended or _finished(result) else "failed")

        result.stream_events = recorded_events  # type: ignore[method-assign]
        return result

    @contextlib.contextmanager
    def _leg(self, frame: Leg) -> Iterator[None]:
        """Run the block inside ``frame``; record ``failed`` if it raises."""
        with entered(frame):
            try:
                yield
            except BaseException:
                self._finish(frame, "failed")
                raise

    def _finish(self, frame: Leg, status: str) -> None:
        """End the leg: its queued evidence and ``run_end``, durable before returning.

        Raises:
            StorageError: if a group of the leg's evidence could not be appended (then
                ``run_end`` says ``failed``), or this last one cannot.
        """
        failure = self._journal.settle(since=frame.since)
        run_end = methodcaller(
            "run_end", run_id=frame.run_id,
            status="failed" if failure is not None else status, run_state=frame.run_state,
        )
        info = state_info(frame.resumed) if frame.resumed is not None else None
        with labelled(frame.labels):
            ended = state_entry(frame.resumed, info, "ended") if info is not None else None
        unreported = committed_executions(frame, frame.resumed)

        def end(writer: EvidenceWriter) -> None:
            for execution in unreported:  # published, though on_tool_end never came
                execution(writer)
            if ended is not None:  # the SDK updates the state it resumes: found by it later
                ended(writer)
            run_end(writer)

        try:
            self._journal.commit(end)
        finally:
            if failure is not None:
                raise failure

    def _start(self, agent: Agent[Any], input: Any, kwargs: dict[str, Any]) -> Leg:
        attach(agent)
        labels = graph_labels(starting_agent(agent, input))
        policy = self.policy
        if policy is not None:
            if getattr(getattr(kwargs.get("run_config"), "tool_execution", None),
                       "pre_approval_tool_input_guardrails", False):
                raise UsageError("a guard policy cannot serve a run whose RunConfig runs tool "
                                 "input guardrails before approval")
            install_guard([*reachable_agents(agent), *reachable_agents(starting_agent(
                agent, input))], policy)
            kwargs["run_config"] = check_model_input(kwargs.get("run_config"))
        answers = getattr(kwargs.get("run_config"), "tool_not_found_behavior",
                          None) == "return_error_to_model"
        install_runner()
        hooks = kwargs.get("hooks")
        if hooks is None or isinstance(hooks, RunHooksBase):  # else the SDK refuses them
            kwargs["hooks"] = RecordingRunHooks(hooks)
        since = self._journal.failures if self._group else None
        session = kwargs.get("session")
        if session is not None and not is_recorded(session):
            kwargs["session"] = recorded_session(self.writer, session)
        if isinstance(input, RunState):
            current = getattr(input, "_current_agent", None)
            if isinstance(current, Agent):  # the SDK resumes with the state's agent
                attach(current)
            with labelled(labels):
                info = self._adopt(input, since)
            self._record_policy(info.run_id, since)
            frame = Leg(self._journal, since, info.run_id, run_state=info.state_id,
                        policy=policy, resumed=input, handoff_calls=pending_handoffs(input),
                        native_calls=pending_native_calls(input),
                        response_calls=pending_response_calls(input), labels=labels,
                        call_owners=pending_call_owners(input),
                        contexts={(): getattr(input, "_context", None)},
                        answers_unknown_tools=answers)
            answer_resumed_requests(frame, input)
            return frame
        run_id = uuid.uuid4().hex
        self._record_policy(run_id, since)
        return Leg(self._journal, since, run_id, labels=labels, policy=policy,
                   contexts={(): kwargs.get("context")}, answers_unknown_tools=answers)

    def _record_policy(self, run_id: str, since: int | None) -> None:
        """Queue the ``policy`` entry of ``run_id`` (once per run and policy), if guarded."""
        if self.policy is not None:
            self._journal.record(methodcaller("policy", run_id=run_id, text=self.policy.text,
                                              time_ns=self.writer.clock()), since)

    # -- run states --------------------------------------------------------------------

    def _derive_states(self, result: RunResult | RunResultStreaming, frame: Leg) -> None:
        """Make ``result.to_state()`` give each state it returns an id of its own, whose
        parent is the state this leg resumed from (so two calls give siblings)."""
        make = result.to_state
        journal = self._journal

        def to_state() -> RunState[Any, Any]:
            state = make()
            info = StateInfo(journal, uuid.uuid4().hex, frame.run_state, frame.run_id)
            register_state(state, info)
            with labelled(frame.labels):
                record_state(state, info, "to_state")
            return state

        result.to_state = to_state  # type: ignore[method-assign]

    def _adopt(self, state: RunState[Any, Any], since: int | None) -> StateInfo:
        """The id and run of ``state``, a leg resumes from: a state object not met before
        is matched or adopted (:func:`meet_state`), then a ``resume`` entry; entries are
        recorded as :meth:`Journal.record` says for ``since``."""
        info, first = meet_state(self._journal, state)
        if first is not None:
            self._journal.record(first, since)
        record_state(state, info, "resume", since=since)
        return info

    # -- decisions ---------------------------------------------------------------------

    def approve(
        self,
        state: RunState[Any, Any],
        item: ToolApprovalItem,
        *,
        approver: str,
        reason: str | None = None,
        always: bool = False,
        signer: Any = None,
    ) -> None:
        """Apply an approval of ``item``'s call to ``state``
        (``state.approve(item, always_approve=always)``) and record the ``approve`` decision.

        ``item`` is what the approver was shown: an interruption (from
        ``result.interruptions`` or ``state.get_interruptions()``), or any approval item
        the SDK takes; its arguments are recorded as what was shown. A call the recorder
        did not see being made (a kind of call it does not record, an item built by hand)
        is recorded first, from ``item``, unless another run made it (the state waits on a
        call its run never made: ``foreign_interruption``): the decision is then recorded
        bound to no call of this run, never refused. ``always=True`` approves the agent's
        tool for the rest of the run. Evidence still queued is appended first; then the SDK
        applies the decision and, if it takes it, the decision is recorded: in one group,
        durable before this returns. An item without a call id is passed to the SDK and not
        recorded.

        Raises:
            UsageError: if ``signer``'s key is not named ``approver`` (nothing is applied).
            StorageError: if evidence queued before the decision could not be appended
                (the decision is then not applied), or the decision's own group could not
                be (the SDK has applied it by then; nothing of it is in the ledger).
            Whatever ``RunState.approve`` raises (nothing is recorded then).
        """
        named = getattr(getattr(signer, "signer", signer), "name", approver)
        if signer is not None and named != approver:
            raise UsageError(f"the key is {named!r}'s, not {approver!r}'s: an approver signs "
                             "with a key of their own name")
        self._decide(state, item, lambda shown: state.approve(shown, always_approve=always),
                     "approve", approver, reason, None, always, signer)

    def reject(
        self,
        state: RunState[Any, Any],
        item: ToolApprovalItem,
        *,
        approver: str,
        reason: str | None = None,
        message: str | None = None,
        always: bool = False,
    ) -> None:
        """Apply a rejection of ``item``'s call to ``state`` and record the ``reject``
        decision, as :meth:`approve` does.

        ``message`` is the text the SDK persists as the call's output; ``None`` leaves it
        to the SDK (a run-level ``tool_error_formatter``, else its default, ``"Tool
        execution was not approved."``), and the decision records no message (the verifier
        then takes any output as the rejection's).

        Raises:
            As :meth:`approve` (``RunState.reject`` for the SDK).
        """
        self._decide(state, item, lambda shown: state.reject(
            shown, always_reject=always, rejection_message=message,
        ), "reject", approver, reason, message, always)

    def revoke(self, call_id: str, *, by: str, reason: str, run_id: str | None = None) -> None:
        """Revoke every approval of ``call_id`` recorded so far (in ``run_id``; None: in every
        run): a ``revocation`` entry, durable before this returns. The guard then denies the
        call's tool, also when a ``RunState`` approved before is resumed, until a new
        approval is recorded.

        Raises:
            StorageError: if the entry cannot be appended.
        """
        self._journal.commit(methodcaller("revocation", call_id=call_id, by=by, reason=reason,
                                          run_id=run_id), join=False)

    def _decide(
        self, state: RunState[Any, Any], item: ToolApprovalItem,
        apply: Callable[[ToolApprovalItem], object], decision: str, approver: str,
        reason: str | None, message: str | None, always: bool, signer: Any = None,
    ) -> None:
        """In one group of its own: the SDK applying the decision (nothing is appended if
        that raises), then the state's first meeting if it is new (matched after the
        decision: by its pending approvals), the call if it was not recorded, the decision,
        and the state's new digest (``decided``, so that its JSON is found when
        restored). The group is durable before this returns."""
        starting = getattr(state, "_starting_agent", None)
        labels = graph_labels(starting) if isinstance(starting, Agent) else {}

        def decided(writer: EvidenceWriter) -> None:
            apply(item)  # first: the SDK judges the very item the app gave, read by us after
            with labelled(labels):  # the agents as the state's runs label them
                info, first = meet_state(self._journal, state, writer.find_state)
                if first is not None:
                    first(writer)
                if item.call_id is not None:
                    scope = _call_scope(writer, info, item, _waiting(state, item))
                    made = writer.decision(
                        run_id=info.run_id, call_id=str(item.call_id), decision=decision,
                        approver=approver, scope=scope, always=always, reason=reason,
                        message=message, arguments=item.arguments,
                        agent=_agent_name(item) or "", tool=approval_tool(item),
                        run_state=info.state_id,
                    )
                    if signer is not None:
                        writer.approval_signature(decision=made,
                                                  signer=getattr(signer, "signer", signer))
                state_entry(state, info, "decided")(writer)

        self._journal.commit(decided, join=False)


def _waiting(state: RunState[Any, Any], item: ToolApprovalItem) -> bool:
    """True when ``state`` waits on a call with ``item``'s call id (never raises: the SDK
    has the say on what it takes)."""
    try:
        return any(i.call_id == item.call_id for i in state.get_interruptions())
    except Exception:
        return False


def _call_scope(
    writer: EvidenceWriter, info: StateInfo, item: ToolApprovalItem, pending: bool
) -> Scope:
    """The scope of ``item``'s call in the run (of the agent's call, then of the one with
    its arguments, then the latest, when the call id is in several scopes: the decision is
    applied already, so nothing may fail here); a call not recorded is recorded now, at
    top level, from ``item`` (``needs_approval`` True if the state was waiting on it, else
    unknown), unless another run recorded it (call id and arguments): the state waits on a
    call its run never made (``foreign_interruption``), and the decision is recorded bound
    to no call of this run."""
    call_id, agent = str(item.call_id), _agent_name(item)
    scopes = writer.call_scopes(info.run_id, call_id, agent, item.arguments)
    if scopes:
        return scopes[-1]
    if writer.made_elsewhere(info.run_id, call_id, item.arguments or ""):
        return ()  # another run's call this state waits on: not made here, not recorded so
    writer.call(
        run_id=info.run_id, call_id=call_id, agent=agent or "", tool=approval_tool(item),
        arguments=item.arguments or "", needs_approval=True if pending else None,
    )
    return ()


def _agent_name(item: ToolApprovalItem) -> str | None:
    """The label of the agent whose tool call ``item`` is (:func:`agent_label`)."""
    agent = getattr(item, "agent", None)
    return agent_label(agent) if agent is not None else None
