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
to the starting agent and to every agent reachable from it through ``Agent.as_tool`` or
an ``Agent`` listed in ``handoffs`` (call :func:`attach` on the target of a ``Handoff``
object yourself), and wrap the ``session`` argument in a :class:`RecordedSession`.
What is recorded, and from where:

- ``call``: each ``function_call`` in a model response (``on_llm_end`` agent hook);
- ``tool_policy``: each per-call result of a callable ``needs_approval`` (wrapped);
- ``decision``: :meth:`Recorder.approve` / :meth:`Recorder.reject`, which then apply it
  (``RunState.approve`` / ``reject`` call no callback);
- ``execution``: each finished function tool (``on_tool_end`` agent hook), its result
  converted the way the SDK converts it for the ``function_call_output`` item;
- ``guardrail``: a tool input guardrail that did not allow a call (wrapped: the SDK fires
  no hook for it);
- ``session_item``: each item the wrapped session accepted or removed;
- ``run_end``: the end of every leg of a run (``completed``, ``interrupted``, ``failed``);
- ``run_state``: each ``RunState`` the recorder meets (see *Run states* below).

Agent hooks the user set are kept and still called (after recording). Hooks given to
``Runner.run`` do not reach agents run through ``Agent.as_tool``, hence agent hooks.

Run id: a fresh run gets a random id (32 hex digits), stored in the run context under
:data:`RUN_ID_KEY`: a ``None`` context becomes ``{RUN_ID_KEY: run_id}``, a mutable mapping
gets the key added (so use one context mapping per run). The SDK serializes mapping
contexts into ``RunState.to_json()`` and restores them in ``RunState.from_json()``, so a
resumed leg - in this process or another one - finds the same run id there. Other context
types are refused (:class:`~ledger.errors.UsageError`).

Run states: a paused run becomes a ``RunState`` that apps fork, serialise, approve on one
copy and resume in another process, or retry; a ``call_id`` alone does not say which
copy a decision was made on. So every ``RunState`` object the recorder meets gets a
*state id* (32 hex digits) and a ``run_state`` entry per event:

- ``to_state``: ``result.to_state()`` on a result of :meth:`Recorder.run` /
  :meth:`Recorder.run_streamed` (the recorder wraps it) makes a new state whose parent
  is the state the leg resumed from (None for a leg that started fresh): two
  ``to_state()`` calls on one result give two siblings with the same parent;
- ``to_json``: ``state.to_json()`` (and ``to_string()``) of such a state; the output
  carries the state id in its context mapping under :data:`RUN_STATE_KEY`;
- ``loaded``: a state the recorder did not make (one restored with
  ``RunState.from_json`` / ``from_string``, in this process or another, or a copy of
  a state object), met at :meth:`Recorder.approve`, :meth:`Recorder.reject` or a
  resume: it gets a new id, its parent being the id its JSON carried (or the copied
  state's), so two loads of one JSON are siblings too;
- ``resume``: a leg resumed from it.

(``to_json`` events go to the ledger of the recorder that last met the state.)

Each entry holds the run id, the state id, its parent, the SHA-256 of the RFC 8785
JSON of ``to_json()`` at that moment (None if the SDK cannot serialise it) and the
pending interruptions (call_id, tool, agent, scope, arguments digest). Decisions carry
the id of the state they were made on; executions and ``run_end`` entries the id of
the state their leg resumed from (None for a fresh leg). The id is written into the
``to_json()`` output, not into the live context mapping: the SDK gives sibling states
one shared mapping. To do so the recorder registers the object (by identity, weakly),
notes the id in an attribute of the object (``_evidence_ledger_state_id``, so that a
copy names its original), and swaps its class for a subclass of ``RunState`` with the
same name whose ``to_json()`` adds the id and records the event; nothing else about
the state changes.

Scope: a call's identity is ``(run_id, scope, call_id)``. ``scope`` is empty at the top
agent; inside an agent run through ``Agent.as_tool`` it gains the edge
``"<tool name>:<call_id of the tool call>"``, e.g. ``["ask_expert:call_7"]``, one edge per
level of nesting. The edge is set while the agent tool runs (a context variable), so the
nested agent's calls, executions and policies carry it, on resume as well.

Limits: attached agents must run through a recorder (their hooks raise
:class:`~ledger.errors.UsageError` otherwise); a session write outside a recorded run is
recorded with ``run_id=""``; a streamed run whose events are not read to the end is
recorded as ``failed``; handoff calls are recorded as calls but not as executions; the
run states of agents run through ``Agent.as_tool`` are the SDK's own and not recorded
(their calls are, under the top-level run's state).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping, MutableMapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from agents import (
    Agent,
    AgentHooks,
    FunctionTool,
    ItemHelpers,
    ModelResponse,
    RunContextWrapper,
    Runner,
    RunResult,
    RunResultStreaming,
    RunState,
    Session,
    ToolInputGuardrail,
)
from agents.exceptions import UserError
from agents.items import ToolApprovalItem
from agents.stream_events import StreamEvent
from agents.tool import DEFAULT_APPROVAL_REJECTION_MESSAGE, Tool
from agents.tool_context import ToolContext
from agents.tool_guardrails import ToolGuardrailFunctionOutput, ToolInputGuardrailData
from openai.types.responses import ResponseFunctionToolCall

from ..errors import UsageError
from ..log import Ledger
from ..writer import EvidenceWriter, Interruption, Scope

__all__ = [
    "RUN_ID_KEY", "RUN_STATE_KEY", "RecordedSession", "Recorder", "attach", "persisted_output",
    "state_id", "state_run_id",
]

RUN_ID_KEY = "evidence_ledger_run_id"
"""Key of the run id in a mapping run context."""

RUN_STATE_KEY = "evidence_ledger_run_state"
"""Key of the run state id in the context of a serialised ``RunState`` (``to_json()``)."""

_MARK = "_evidence_ledger_attached"


@dataclass(frozen=True)
class _Frame:
    writer: EvidenceWriter
    run_id: str
    scope: Scope = ()
    run_state: str | None = None  # the state this leg resumed from; None: started fresh


_FRAME: ContextVar[_Frame | None] = ContextVar("evidence_ledger_frame", default=None)


def _frame() -> _Frame:
    frame = _FRAME.get()
    if frame is None:
        raise UsageError("an attached agent ran outside Recorder.run / Recorder.run_streamed")
    return frame


@contextlib.contextmanager
def _entered(frame: _Frame) -> Iterator[None]:
    token = _FRAME.set(frame)
    try:
        yield
    finally:
        _FRAME.reset(token)


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _status(result: RunResult | RunResultStreaming) -> str:
    return "interrupted" if result.interruptions else "completed"


def persisted_output(context: ToolContext[Any], tool: FunctionTool, result: Any) -> Any:
    """The ``output`` the SDK puts in the ``function_call_output`` item for ``result``.

    A string stays as it is; a list of content parts (``ToolOutputText`` and friends)
    becomes a list of dicts; a tool with a declared output schema gives compact JSON
    text; anything else becomes ``str(result)``.
    """
    call = context.tool_call or ResponseFunctionToolCall(
        type="function_call", call_id=context.tool_call_id, name=context.tool_name,
        arguments=context.tool_arguments,
    )
    try:
        item = ItemHelpers.tool_call_output_item(
            call, result, output_json_schema=tool.output_json_schema,
            output_type_adapter=getattr(tool, "_output_type_adapter", None),
        )
    except UserError:  # the SDK bypasses the output schema for error messages
        item = ItemHelpers.tool_call_output_item(call, result)
    return item["output"]


class Recorder:
    """Records agent runs into a ledger; see the module docstring.

    Args:
        ledger: an :class:`EvidenceWriter`, a :class:`Ledger`, or a ledger directory.
    """

    def __init__(self, ledger: EvidenceWriter | Ledger | str | os.PathLike[str]) -> None:
        self.writer = ledger if isinstance(ledger, EvidenceWriter) else EvidenceWriter(ledger)

    # -- running -----------------------------------------------------------------------

    async def run(self, agent: Agent[Any], input: Any, **kwargs: Any) -> RunResult:
        """``Runner.run(agent, input, **kwargs)``, recorded.

        ``input`` is a string, a list of input items, or a :class:`RunState` to resume.
        Every leg ends with a ``run_end`` entry: ``failed`` when the SDK raises (the
        exception propagates), else ``interrupted`` or ``completed``.

        Raises:
            UsageError: if the context is not a mapping, or a RunState carries no run id.
        """
        frame = self._start(agent, input, kwargs)
        with self._leg(frame):
            result = await Runner.run(agent, input, **kwargs)
        self.writer.run_end(run_id=frame.run_id, status=_status(result), run_state=frame.run_state)
        self._derive_states(result, frame)
        return result

    def run_streamed(self, agent: Agent[Any], input: Any, **kwargs: Any) -> RunResultStreaming:
        """``Runner.run_streamed(agent, input, **kwargs)``, recorded.

        The ``run_end`` entry is written when ``stream_events()`` ends, before it returns
        to the caller: ``failed`` when it raises or is left before its end.

        Raises:
            UsageError: as :meth:`run`.
        """
        frame = self._start(agent, input, kwargs)
        with self._leg(frame):  # the SDK's run task copies the context variable
            result = Runner.run_streamed(agent, input, **kwargs)
        self._derive_states(result, frame)
        events = result.stream_events

        async def recorded_events() -> AsyncIterator[StreamEvent]:
            status = "failed"
            try:
                async for event in events():
                    yield event
                status = _status(result)
            finally:
                self.writer.run_end(run_id=frame.run_id, status=status, run_state=frame.run_state)

        result.stream_events = recorded_events  # type: ignore[method-assign]
        return result

    @contextlib.contextmanager
    def _leg(self, frame: _Frame) -> Iterator[None]:
        """Run the block inside ``frame``; record ``failed`` if it raises."""
        with _entered(frame):
            try:
                yield
            except BaseException:
                self.writer.run_end(run_id=frame.run_id, status="failed", run_state=frame.run_state)
                raise

    def _start(self, agent: Agent[Any], input: Any, kwargs: dict[str, Any]) -> _Frame:
        attach(agent)
        session = kwargs.get("session")
        if session is not None and not isinstance(session, RecordedSession):
            kwargs["session"] = RecordedSession(self.writer, session)
        if isinstance(input, RunState):
            info = self._adopt(input)
            _record_state(input, info, "resume")
            return _Frame(self.writer, info.run_id, run_state=info.state_id)
        run_id = uuid.uuid4().hex
        context = kwargs.get("context")
        if context is None:
            kwargs["context"] = {RUN_ID_KEY: run_id}
        elif isinstance(context, MutableMapping):
            context[RUN_ID_KEY] = run_id
        else:
            raise UsageError(
                f"the recorder keeps its run id in a mapping run context, not in a "
                f"{type(context).__name__}"
            )
        return _Frame(self.writer, run_id)

    # -- run states --------------------------------------------------------------------

    def _derive_states(self, result: RunResult | RunResultStreaming, frame: _Frame) -> None:
        """Make ``result.to_state()`` give each state it returns an id of its own, whose
        parent is the state this leg resumed from (so two calls give siblings)."""
        make = result.to_state
        writer = self.writer

        def to_state() -> RunState[Any, Any]:
            state = make()
            info = _StateInfo(writer, uuid.uuid4().hex, frame.run_state, frame.run_id)
            _register(state, info)
            _record_state(state, info, "to_state")
            return state

        result.to_state = to_state  # type: ignore[method-assign]

    def _adopt(self, state: RunState[Any, Any]) -> _StateInfo:
        """The id of ``state``; a state not seen before (one restored with
        ``RunState.from_json``) gets one, with the id its JSON carried as parent."""
        info = _state_info(state)
        if info is not None:
            if info.writer is not self.writer:  # its to_json() now records here
                info = replace(info, writer=self.writer)
                _register(state, info)
            return info
        run_id = state_run_id(state)
        context = state._context.context if state._context is not None else None
        parent = getattr(state, _STATE_ATTR, None)  # a copy (copy.copy) of a state we met
        if parent is None and isinstance(context, Mapping):
            parent = context.get(RUN_STATE_KEY)
        info = _StateInfo(
            self.writer, uuid.uuid4().hex, parent if isinstance(parent, str) else None, run_id,
        )
        _register(state, info)
        _record_state(state, info, "loaded")
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
    ) -> None:
        """Record an ``approve`` decision for ``item``'s call, then apply it to ``state``.

        ``item`` is an interruption the approver was shown (from ``result.interruptions``
        or ``state.get_interruptions()``); its arguments are recorded as what was shown.
        ``always=True`` approves the agent's tool for the rest of the run.

        Raises:
            UsageError: if ``state`` has no pending interruption with ``item``'s call id,
                or the call was not recorded in this run (or is ambiguous).
        """
        pending, run_id, scope = self._pending(state, item)
        made_on = self._adopt(state).state_id
        with self.writer.atomic():  # nothing is recorded if the SDK refuses
            self._decision(
                run_id, scope, item, "approve", approver, reason, None, always, made_on,
            )
            state.approve(pending, always_approve=always)

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
        """Record a ``reject`` decision for ``item``'s call, then apply it to ``state``.

        ``message`` is the text the SDK persists as the call's output; ``None`` means the
        SDK's default (``"Tool execution was not approved."``), which is then passed to
        the SDK explicitly so that the recorded and persisted texts agree (a run-level
        ``tool_error_formatter`` is not consulted for these rejections).

        Raises:
            UsageError: as :meth:`approve`.
        """
        pending, run_id, scope = self._pending(state, item)
        made_on = self._adopt(state).state_id
        text = DEFAULT_APPROVAL_REJECTION_MESSAGE if message is None else message
        with self.writer.atomic():
            self._decision(run_id, scope, item, "reject", approver, reason, text, always, made_on)
            state.reject(pending, always_reject=always, rejection_message=text)

    def _pending(
        self, state: RunState[Any, Any], item: ToolApprovalItem
    ) -> tuple[ToolApprovalItem, str, Scope]:
        run_id = state_run_id(state)
        matches = [i for i in state.get_interruptions() if i.call_id == item.call_id]
        if not matches:
            raise UsageError(f"no pending interruption with call_id {item.call_id!r}")
        scopes = self.writer.call_scopes(run_id, str(item.call_id))
        if len(scopes) != 1:
            found = "was not recorded" if not scopes else f"is in {len(scopes)} scopes"
            raise UsageError(f"call {item.call_id!r} of run {run_id} {found}")
        return matches[0], run_id, scopes[0]

    def _decision(
        self, run_id: str, scope: Scope, item: ToolApprovalItem, decision: str,
        approver: str, reason: str | None, message: str | None, always: bool, made_on: str,
    ) -> None:
        self.writer.decision(
            run_id=run_id, call_id=str(item.call_id), decision=decision, approver=approver,
            scope=scope, always=always, reason=reason, message=message,
            arguments=item.arguments, agent=item.agent.name, tool=item.tool_name,
            run_state=made_on,
        )


def attach(agent: Agent[Any]) -> Agent[Any]:
    """Attach recording to ``agent`` and the agents reachable from it, in place.

    Reachable: agents run through ``Agent.as_tool`` and ``Agent`` objects in ``handoffs``.
    Sets a chaining agent hook on each agent and wraps its function tools (agent-as-tool
    scope, callable ``needs_approval``, tool input guardrails). Idempotent; the hooks and
    wrappers record through whichever :class:`Recorder` runs the agent (a tool object
    shared by several agents names the first one in its ``tool_policy`` entries).
    Returns ``agent``.
    """
    todo, seen = [agent], set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if _claim(current):
            current.hooks = _RecordingHooks(current.hooks)
        for tool in current.tools:
            if isinstance(tool, FunctionTool) and _claim(tool):
                _wrap_tool(current, tool)
            nested = getattr(tool, "_agent_instance", None)
            if isinstance(nested, Agent):
                todo.append(nested)
        todo.extend(h for h in current.handoffs if isinstance(h, Agent))
    return agent


def _claim(obj: Agent[Any] | FunctionTool) -> bool:
    """Mark ``obj`` as attached; False if it already was."""
    if getattr(obj, _MARK, False):
        return False
    setattr(obj, _MARK, True)
    return True


def _wrap_tool(agent: Agent[Any], tool: FunctionTool) -> None:
    if getattr(tool, "_agent_instance", None) is not None:
        invoke = tool.on_invoke_tool

        async def invoke_in_scope(context: ToolContext[Any], arguments: str) -> Any:
            outer = _frame()
            edge = f"{tool.name}:{context.tool_call_id}"
            with _entered(replace(outer, scope=(*outer.scope, edge))):
                return await invoke(context, arguments)

        tool.on_invoke_tool = invoke_in_scope
    if callable(tool.needs_approval):
        policy = tool.needs_approval

        async def recorded_policy(context: Any, params: Any, call_id: str) -> Any:
            decided: Any = policy(context, params, call_id)
            if inspect.isawaitable(decided):
                decided = await decided
            frame = _frame()
            frame.writer.tool_policy(
                run_id=frame.run_id, agent=agent.name, tool=tool.name,
                needs_approval=bool(decided), scope=frame.scope, policy="callable",
                call_id=call_id,
            )
            return decided

        tool.needs_approval = recorded_policy
    if tool.tool_input_guardrails:
        tool.tool_input_guardrails = [
            _recorded_guardrail(tool, g) for g in tool.tool_input_guardrails
        ]


def _recorded_guardrail(
    tool: FunctionTool, guardrail: ToolInputGuardrail[Any]
) -> ToolInputGuardrail[Any]:
    name = guardrail.get_name()

    async def recorded(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        output = await guardrail.run(data)
        if output.behavior["type"] != "allow":
            frame, message = _frame(), output.behavior.get("message")
            frame.writer.guardrail(
                run_id=frame.run_id, call_id=data.context.tool_call_id, guardrail=name,
                message=message if isinstance(message, str) else None, scope=frame.scope,
                agent=data.agent.name, tool=tool.name,
            )
        return output

    return ToolInputGuardrail(guardrail_function=recorded, name=name)


def _record_calls(agent: Agent[Any], response: ModelResponse) -> None:
    frame = _frame()
    tools = {t.name: t for t in agent.tools if isinstance(t, FunctionTool)}
    with frame.writer.atomic():
        for item in response.output:
            if _field(item, "type") != "function_call":
                continue
            name = _field(item, "name")
            policy = getattr(tools.get(name), "needs_approval", None)
            frame.writer.call(
                run_id=frame.run_id, call_id=_field(item, "call_id"), agent=agent.name,
                tool=name, arguments=_field(item, "arguments"), scope=frame.scope,
                needs_approval=policy if isinstance(policy, bool) else None,
                response_id=response.response_id,
            )


def _record_execution(context: Any, agent: Agent[Any], tool: Tool, result: Any) -> None:
    if not (isinstance(context, ToolContext) and isinstance(tool, FunctionTool)):
        return  # hosted, shell and computer tools carry no call id here
    frame = _frame()
    frame.writer.execution(
        run_id=frame.run_id, call_id=context.tool_call_id, arguments=context.tool_arguments,
        scope=frame.scope, agent=agent.name, tool=tool.name,
        result=persisted_output(context, tool, result), run_state=frame.run_state,
    )


def state_run_id(state: RunState[Any, Any]) -> str:
    """The run id a :class:`RunState` carries in its mapping context.

    Raises:
        UsageError: if the state's context holds no run id (the run was not recorded).
    """
    wrapper: RunContextWrapper[Any] | None = getattr(state, "_context", None)
    context = wrapper.context if wrapper is not None else None
    run_id = context.get(RUN_ID_KEY) if isinstance(context, Mapping) else None
    if not isinstance(run_id, str):
        raise UsageError(f"the RunState's context has no {RUN_ID_KEY!r}: not a recorded run")
    return run_id


# -- run states ------------------------------------------------------------------------


@dataclass(frozen=True)
class _StateInfo:
    writer: EvidenceWriter
    state_id: str
    parent: str | None
    run_id: str


# id(RunState) -> (weak reference, info): RunState is a dataclass, hence unhashable
_STATES: dict[int, tuple[weakref.ref[Any], _StateInfo]] = {}
_STATE_ATTR = "_evidence_ledger_state_id"
_RECORDING_CLASSES: dict[type, type] = {}


def _state_info(state: Any) -> _StateInfo | None:
    found = _STATES.get(id(state))
    return found[1] if found is not None and found[0]() is state else None


def state_id(state: RunState[Any, Any]) -> str | None:
    """The id the recorder gave ``state`` (see the module docstring), or None when no
    recorder has met this object yet."""
    info = _state_info(state)
    return info.state_id if info is not None else None


def _register(state: RunState[Any, Any], info: _StateInfo) -> None:
    key = id(state)

    def forget(ref: weakref.ref[Any]) -> None:
        if key in _STATES and _STATES[key][0] is ref:
            del _STATES[key]

    _STATES[key] = (weakref.ref(state, forget), info)
    state.__dict__[_STATE_ATTR] = info.state_id  # copies of the object carry it along
    state.__class__ = _recording_class(type(state))


def _recording_class(cls: Any) -> Any:
    """A subclass of ``cls`` whose ``to_json()`` writes the state's id into the output
    and records a ``to_json`` event (``to_string()`` goes through it too)."""
    if getattr(cls, "_evidence_ledger_base", None) is not None:
        return cls
    sub = _RECORDING_CLASSES.get(cls)
    if sub is None:

        def to_json(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            data = _with_state_id(self, cls.to_json(self, *args, **kwargs))
            info = _state_info(self)
            if info is not None:
                _record_state(self, info, "to_json", data)
            return data

        sub = type(cls.__name__, (cls,), {
            "to_json": to_json, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__, "_evidence_ledger_base": cls,
        })
        _RECORDING_CLASSES[cls] = sub
    return sub


def _with_state_id(state: Any, data: Any) -> Any:
    """``data`` (a ``to_json()`` output) with ``state``'s id in its context mapping (a
    copy: the live context is shared with sibling states)."""
    info = _state_info(state)
    outer = data.get("context") if isinstance(data, dict) else None
    if info is None or not isinstance(outer, dict) or not isinstance(outer.get("context"), dict):
        return data
    inner = {**outer["context"], RUN_STATE_KEY: info.state_id}
    return {**data, "context": {**outer, "context": inner}}


def _serialised(state: Any) -> Any:
    """``state.to_json()`` as the user would get it, recording nothing; None if the SDK
    cannot serialise it (a context value that is not JSON, for example)."""
    base = getattr(type(state), "_evidence_ledger_base", type(state))
    try:
        return _with_state_id(state, base.to_json(state))
    except Exception:
        return None


def _record_state(state: Any, info: _StateInfo, event: str, data: Any = None) -> None:
    """Write a ``run_state`` entry for ``state`` (``data``: its serialised form, if known)."""
    writer = info.writer
    pending = []
    for item in state.get_interruptions():
        call_id = str(item.call_id)
        scopes = writer.call_scopes(info.run_id, call_id)
        arguments = getattr(item, "arguments", None)
        agent = getattr(item, "agent", None)
        pending.append(Interruption(
            call_id=call_id, tool=item.tool_name, agent=getattr(agent, "name", None),
            scope=scopes[0] if len(scopes) == 1 else None,
            arguments=arguments if isinstance(arguments, str) else None,
        ))
    data = _serialised(state) if data is None else data
    writer.run_state(
        run_id=info.run_id, state_id=info.state_id, parent=info.parent, event=event,
        state=data, interruptions=pending,
    )


class _RecordingHooks(AgentHooks[Any]):
    """Agent hooks that record, then call the hooks the user had set (``inner``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def _forward(self, name: str, *args: Any) -> None:
        if self.inner is not None:
            await getattr(self.inner, name)(*args)

    async def on_start(self, context: Any, agent: Any) -> None:
        await self._forward("on_start", context, agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        await self._forward("on_end", context, agent, output)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        await self._forward("on_handoff", context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        await self._forward("on_tool_start", context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        _record_execution(context, agent, tool, result)
        await self._forward("on_tool_end", context, agent, tool, result)

    async def on_llm_start(self, context: Any, agent: Any, *args: Any) -> None:
        await self._forward("on_llm_start", context, agent, *args)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        _record_calls(agent, response)
        await self._forward("on_llm_end", context, agent, response)


class RecordedSession:
    """A :class:`agents.Session` that records what the wrapped session stores.

    Each item passed to ``add_items`` is recorded (``session_item``, ``op="add"``) after
    the inner session accepted the batch; ``pop_item`` records ``op="pop"`` with the
    item removed, ``clear_session`` records ``op="clear"``. Reads are not recorded.
    Items are mappings (``function_call``: call_id, name, arguments;
    ``function_call_output``: call_id, output; messages: role, content).
    """

    def __init__(self, writer: EvidenceWriter, inner: Session) -> None:
        self.writer = writer
        self.inner = inner

    @property
    def session_id(self) -> str:
        """The wrapped session's id."""
        return self.inner.session_id

    @property
    def session_settings(self) -> Any:
        """The wrapped session's settings (``SessionSettings`` or None)."""
        return getattr(self.inner, "session_settings", None)

    def _record(self, op: str, items: list[Any]) -> None:
        frame = _FRAME.get() or _Frame(self.writer, "")
        with self.writer.atomic():
            for item in items:
                self.writer.session_item(
                    run_id=frame.run_id, session_id=self.session_id,
                    item=None if item is None else dict(item), scope=frame.scope, op=op,
                )

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The wrapped session's items, oldest first (the latest ``limit`` if given)."""
        return await self.inner.get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        """Store ``items`` in the wrapped session, then record each one."""
        await self.inner.add_items(items)
        self._record("add", items)

    async def pop_item(self) -> Any:
        """Remove and return the latest item (None when empty), recording the removal."""
        item = await self.inner.pop_item()
        if item is not None:
            self._record("pop", [item])
        return item

    async def clear_session(self) -> None:
        """Clear the wrapped session, then record ``op="clear"``."""
        await self.inner.clear_session()
        self._record("clear", [None])
