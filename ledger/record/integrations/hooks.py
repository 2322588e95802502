"""Recording what agents do: run hooks that record calls and executions (of every tool kind,
and of handoffs); wrappers of callable approval policies that record what they decide; and
tool and agent output guardrails, wrapped in place, that record their blocks.

Nothing is set on an agent: the SDK's ``RunState`` identifies agents by, among others, the
type of their hooks, so agent hooks of ours would change it. The recorder gives its
:class:`RecordingRunHooks` to each recorded run (wrapping the run hooks the app gave), and
:mod:`~evidence_ledger.record.integrations.nested_runs` gives them to the runs of agents
used through ``Agent.as_tool``. The tool and guardrail wrappers keep the wrapped function's
name (:func:`~evidence_ledger.record.integrations.wrappers.named_as`) and pass every call
through unchanged when no recorded leg runs.

Scope: a call's identity is ``(run_id, scope, call_id)``. ``scope`` is empty at the top
agent; inside an agent run through ``Agent.as_tool`` it gains the edge
``"<tool name>:<call_id of the tool call>"``, e.g. ``["ask_expert:call_7"]``, one edge per
level of nesting. The nested agent's run is given a leg in that scope when it starts
(:mod:`~evidence_ledger.record.integrations.nested_runs`), so its calls, executions and
policies carry it, on resume as well; the agent tool itself is left as the SDK made it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from operator import methodcaller
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    Handoff,
    ItemHelpers,
    ModelResponse,
    OutputGuardrail,
    RunHooks,
    ToolInputGuardrail,
    ToolOutputGuardrail,
    handoff,
)
from agents.exceptions import UserError
from agents.mcp import MCPUtil
from agents.tool import Tool
from agents.tool_context import ToolContext
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
)
from openai.types.responses import ResponseFunctionToolCall

from evidence_ledger.record.integrations.agent_labels import (
    agent_label,
    function_tool_label,
    tool_label,
)
from evidence_ledger.record.integrations.approval_callbacks import wrap_approval_callbacks
from evidence_ledger.record.integrations.context_decisions import record_context_approval
from evidence_ledger.record.integrations.guard import guard_started
from evidence_ledger.record.integrations.legs import CURRENT_LEG, Leg, current_leg
from evidence_ledger.record.integrations.native_calls import (
    ProviderRun,
    native_call,
    payload_text,
    provider_result,
    provider_run,
    take_started,
)
from evidence_ledger.record.integrations.native_calls import item_field as _field
from evidence_ledger.record.integrations.wrappers import (
    claim,
    is_ours,
    named_as,
    observed,
    ours,
)
from evidence_ledger.record.writer import EvidenceWriter, Scope

__all__ = [
    "IGNORED_HANDOFF", "IGNORED_HANDOFF_MESSAGE", "TOOL_NOT_FOUND", "RecordingRunHooks", "attach",
    "pending_call_owners", "pending_handoffs", "pending_response_calls", "persisted_output",
    "reachable_agents",
]

IGNORED_HANDOFF = "openai-agents:multiple_handoffs"
"""The ``guardrail`` name of the block recorded for a handoff the SDK ignored: when a
model response requests several handoffs, the SDK runs the first and answers each other
one with the output :data:`IGNORED_HANDOFF_MESSAGE` and runs nothing."""

IGNORED_HANDOFF_MESSAGE = "Multiple handoffs detected, ignoring this one."
"""The output the SDK (0.20 - 0.24) persists for a handoff it ignored."""

TOOL_NOT_FOUND = "openai-agents:tool_not_found"
"""The ``guardrail`` name of the block recorded for a call of a tool the agent does not
have, which the SDK answers with an error text of its own (a run whose ``RunConfig`` has
``tool_not_found_behavior="return_error_to_model"``) and runs nothing."""


def persisted_output(
    context: ToolContext[Any], tool: FunctionTool | None, result: Any
) -> Any:
    """The ``output`` the SDK puts in the ``function_call_output`` item for ``result``.

    A string stays as it is; a list of content parts (``ToolOutputText`` and friends)
    becomes a list of dicts; a tool with a declared output schema gives compact JSON
    text; anything else becomes ``str(result)``. ``tool`` None: a tool without an output
    schema.
    """
    call = context.tool_call or ResponseFunctionToolCall(
        type="function_call", call_id=context.tool_call_id, name=context.tool_name,
        arguments=context.tool_arguments,
    )
    try:
        item = ItemHelpers.tool_call_output_item(
            call, result, output_json_schema=getattr(tool, "output_json_schema", None),
            output_type_adapter=getattr(tool, "_output_type_adapter", None),
        )
    except UserError:  # the SDK bypasses the output schema for error messages
        item = ItemHelpers.tool_call_output_item(call, result)
    return item["output"]


def attach(agent: Agent[Any]) -> Agent[Any]:
    """Attach recording to the tools and guardrails of ``agent`` and of the agents
    reachable from it, in place (the agents themselves are left as they are).

    Reachable: agents run through ``Agent.as_tool``, and the agents ``handoffs`` lead to
    (listed bare, or as ``handoff(agent)`` objects).
    Wraps each agent's tools' callable ``needs_approval`` and approval callbacks,
    their tool input and output guardrails and the agent's output guardrails (also ones
    added since the last call). Idempotent; the wrappers record through whichever
    :class:`Recorder` runs the agent (a tool object shared by several agents names the
    first one in its ``tool_policy`` entries), and nothing outside a recorded leg.
    Returns ``agent``.
    """
    for current in reachable_agents(agent):
        for guardrail in current.output_guardrails or ():  # also ones added later
            _wrap_output_guardrail(guardrail)
        for tool in current.tools:
            if isinstance(tool, FunctionTool):
                if claim(tool):
                    _wrap_policy(current, tool)
                for before in tool.tool_input_guardrails or ():  # also ones added later
                    _wrap_guardrail(before, after_run=False)
                for after in tool.tool_output_guardrails or ():
                    _wrap_guardrail(after, after_run=True)
            else:
                wrap_approval_callbacks(tool)
                _wrap_policy(current, tool)
    return agent


def _handoff_target(item: Any) -> Any:
    """The agent a handoff leads to: an ``Agent`` listed bare, or the one a ``handoff(agent)``
    object was made for (the SDK keeps a weak reference to it; None for a custom one)."""
    if isinstance(item, Handoff):
        ref = getattr(item, "_agent_ref", None)
        return ref() if callable(ref) else None
    return item


def reachable_agents(root: Agent[Any]) -> Iterator[Agent[Any]]:
    """``root`` and every agent reachable from it through handoffs and agent tools, each
    once, breadth first, in the order they are listed (handoffs, then tools)."""
    queue, seen = [root], set()
    while queue:
        agent = queue.pop(0)
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        found = [_handoff_target(h) for h in agent.handoffs]
        found += [getattr(t, "_agent_instance", None) for t in agent.tools]
        queue += [a for a in found if isinstance(a, Agent)]


def _wrap_policy(agent: Agent[Any], tool: Any) -> None:
    """Wrap ``tool``'s callable ``needs_approval`` (a function tool's, a shell's, an
    apply_patch's, a custom tool's), once: :func:`_recorded_policy`."""
    policy = getattr(tool, "needs_approval", None)
    if callable(policy) and not is_ours(policy):
        tool.needs_approval = ours(_recorded_policy(agent, tool, policy))


def _recorded_policy(agent: Agent[Any], tool: Any, policy: Any) -> Any:
    """``policy`` (a tool's callable ``needs_approval``, called with ``(context, params or
    action, call_id)``), recording a ``tool_policy`` entry with what it decided in a
    recorded leg, and noting it in :attr:`Leg.gated` (:func:`observed`: the app sees the
    kind of callable it gave)."""

    def record(args: tuple[Any, ...], decided: Any) -> None:
        frame = CURRENT_LEG.get()
        if frame is not None:  # else the tool serves an agent run without the recorder
            frame.gated[frame.scope, args[2]] = bool(decided)
            frame.record(methodcaller(
                "tool_policy", run_id=frame.run_id, agent=agent_label(agent),
                tool=function_tool_label(tool), needs_approval=bool(decided), scope=frame.scope,
                policy="callable", call_id=args[2], time_ns=frame.journal.writer.clock(),
            ))

    return observed(policy, record)


def _record_block(
    call_id: str, agent: str, tool: str, guardrail: str, message: Any = None,
    time_ns: int | None = None,
) -> None:
    """Record a ``guardrail`` entry: ``call_id`` was blocked, its output replaced by
    ``message`` (None when the block replaced it with nothing known: the run raised), at
    ``time_ns`` (ns since the epoch; None: now)."""
    frame = current_leg()
    frame.record(methodcaller(
        "guardrail", run_id=frame.run_id, call_id=call_id, guardrail=guardrail,
        message=message if isinstance(message, str) else None, scope=frame.scope,
        agent=agent, tool=tool, time_ns=frame.journal.writer.clock() if time_ns is None
        else time_ns,
    ))


def _wrap_guardrail(
    guardrail: ToolInputGuardrail[Any] | ToolOutputGuardrail[Any], after_run: bool
) -> None:
    """Make ``guardrail`` (in place, once: the object stays the user's, and may serve
    several tools, of recorded agents or not) record a block when it does not allow a call
    in a recorded leg. An output guardrail (``after_run``) runs after the tool: it records
    the tool's execution with what the tool returned (once: ``on_tool_end`` then records
    nothing), whatever its verdict and also when it fails;
    a block comes right after, with the execution's time (the SDK then persists the
    guardrail's message, or raises)."""
    if not claim(guardrail):
        return
    name, check = guardrail.get_name(), guardrail.guardrail_function

    async def recorded(data: Any) -> ToolGuardrailFunctionOutput:
        # else it serves an agent run without the recorder
        recording = CURRENT_LEG.get() is not None
        try:
            verdict = check(data)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except BaseException:
            if after_run and recording:
                _record_ran(data.context, data.agent, data.output)
            raise
        if not recording:
            return verdict
        blocked = verdict.behavior["type"] != "allow"
        if after_run:  # the execution first, then its block at its time: the rules
            ran = _record_ran(data.context, data.agent, data.output)  # tell them by it
        if blocked:
            _record_block(data.context.tool_call_id, agent_label(data.agent),
                          _context_tool(data.context), name, verdict.behavior.get("message"),
                          ran if after_run else None)
        return verdict

    guardrail.guardrail_function = named_as(recorded, check)


def _wrap_output_guardrail(guardrail: OutputGuardrail[Any]) -> None:
    """Make an agent output guardrail (in place, once) record a block when it trips on a
    final output that came from tools (the agent's latest model response had function
    calls, and no model was asked again: ``stop_on_first_tool``, ``stop_at_tool_names``, a
    ``tool_use_behavior`` function), for every function call of that response: the SDK then
    persists a placeholder (``"Output withheld by an output guardrail."``, or the app's own
    text) as the output of each, so the block's message is not known. A final output the
    model wrote withholds nothing."""
    if not claim(guardrail):
        return
    name, check = guardrail.get_name(), guardrail.guardrail_function

    async def recorded(context: Any, agent: Agent[Any], agent_output: Any) -> Any:
        verdict = check(context, agent, agent_output)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        frame = CURRENT_LEG.get()
        if frame is not None and verdict.tripwire_triggered:
            for call_id, tool in frame.response_calls.get((frame.scope, agent.name), []):
                _record_block(call_id, agent_label(agent), tool, name)
        return verdict

    guardrail.guardrail_function = named_as(recorded, check)


def _call_tool(item: Any) -> str:
    """The tool a ``function_call`` item names, as the ledger records it (its namespace
    too: :func:`tool_label`)."""
    return tool_label(_field(item, "name"), _field(item, "namespace"))


def _context_tool(context: Any) -> str:
    """The function tool a ``ToolContext`` runs, as the ledger records it."""
    return tool_label(context.tool_name, getattr(context, "tool_namespace", None))


def _handoffs(agent: Agent[Any]) -> dict[str, Handoff[Any, Any]]:
    """The agent's handoffs by tool name (an ``Agent`` listed bare: the SDK's default)."""
    made = (h if isinstance(h, Handoff) else handoff(h) for h in agent.handoffs)
    return {h.tool_name: h for h in made}


def _record_calls(agent: Agent[Any], response: ModelResponse) -> None:
    """``on_llm_end``: record the calls of a model response (function calls, and the kinds
    of :mod:`~evidence_ledger.record.integrations.native_calls`), as one group; and the
    calls the provider ran (hosted tools, hosted MCP calls)."""
    frame = current_leg()
    calls = [item for item in response.output if _field(item, "type") == "function_call"]
    names = _handoffs(agent) if agent.handoffs else {}
    if names:
        frame.handoff_calls[frame.scope, agent.name] = [
            (_field(item, "call_id"), _field(item, "name"), _field(item, "arguments"))
            for item in calls if _field(item, "name") in names
        ]
    frame.response_calls[frame.scope, agent.name] = [
        (_field(item, "call_id"), _call_tool(item)) for item in calls]
    tools = {function_tool_label(t): t for t in agent.tools if isinstance(t, FunctionTool)}
    others = {getattr(t, "name", None): t for t in agent.tools if not isinstance(t, FunctionTool)}
    clock = frame.journal.writer.clock
    found = []
    for item in calls:
        name, tool_name = _field(item, "name"), _call_tool(item)
        frame.call_owners[frame.scope, _field(item, "call_id")] = (agent, item, tool_name)
        gated: bool | None  # a callable policy decides per call: None
        unknown = False  # a tool the agent does not have (nor a handoff, nor an MCP server)
        if tool_name in tools:
            policy = tools[tool_name].needs_approval
            gated = policy if isinstance(policy, bool) else None
        elif name in others:  # a function-shaped call of, say, apply_patch: its tool runs it
            frame.native_calls.setdefault((frame.scope, agent.name, name), []).append(
                (_field(item, "call_id"), _field(item, "arguments")))
            native_policy = getattr(others[name], "needs_approval", None)
            gated = native_policy if isinstance(native_policy, bool) else None
        else:  # an MCP server's tool, unless it is a handoff
            gated = None if name in names else mcp_server_policy(agent, name)
            unknown = name not in names and not agent.mcp_servers
        found.append(methodcaller(
            "call", run_id=frame.run_id, call_id=_field(item, "call_id"),
            agent=agent_label(agent), tool=tool_name, arguments=_field(item, "arguments"),
            scope=frame.scope, needs_approval=gated,
            response_id=response.response_id, time_ns=clock(),
        ))
        if unknown and frame.answers_unknown_tools:
            found.append(methodcaller(  # the SDK answers it with an error text, runs nothing
                "guardrail", run_id=frame.run_id, call_id=_field(item, "call_id"),
                guardrail=TOOL_NOT_FOUND, message=None, scope=frame.scope,
                agent=agent_label(agent), tool=tool_name, time_ns=clock(),
            ))
    for item in response.output:
        native = native_call(agent, item)
        if native is not None:
            call_id, tool, arguments, native_gated = native
            frame.call_owners[frame.scope, call_id] = (agent, item, tool)
            found.append(methodcaller(
                "call", run_id=frame.run_id, call_id=call_id, agent=agent_label(agent), tool=tool,
                arguments=arguments, scope=frame.scope, needs_approval=native_gated,
                response_id=response.response_id, time_ns=clock(),
            ))
            result = provider_result(response.output, _field(item, "type"), call_id)
            if result is not None:  # the provider ran it (a shell in its container)
                found.append(_provider_ran(frame, agent, ProviderRun(
                    call_id, tool, arguments, result, True), response.response_id, clock()))
            elif _field(item, "type") != "mcp_approval_request":
                frame.native_calls.setdefault((frame.scope, agent.name, tool), []).append(
                    (call_id, arguments))
        else:
            ran = provider_run(item, response.output)
            if ran is not None:  # a hosted tool's call (or a hosted MCP call)
                found.append(_provider_ran(frame, agent, ran, response.response_id, clock()))
    if not found:
        return

    def write(writer: EvidenceWriter) -> None:  # the calls of one response: one group
        for call in found:
            call(writer)

    frame.record(write)


def mcp_server_policy(agent: Agent[Any], tool: str) -> bool | None:
    """Whether the SDK asks for approval of a call of ``tool``, a tool of one of the agent's
    MCP servers, as their ``require_approval`` settings say (read from the SDK's
    normalised ``_needs_approval_policy``: a bool for every tool, or a bool per tool name,
    the server's own name of the tool: with ``mcp_config["include_server_in_tool_names"]``
    the name a call carries is the SDK's ``mcp_<server>__<tool>``): None when a server
    decides per call (a callable), when the servers disagree, or when the agent has none."""
    prefixed = bool((getattr(agent, "mcp_config", None) or {}).get(
        "include_server_in_tool_names"))
    build = getattr(MCPUtil, "_build_prefixed_tool_base_name", None)
    verdicts = set()
    for server in getattr(agent, "mcp_servers", None) or ():
        policy = getattr(server, "_needs_approval_policy", None)
        named = tool
        if prefixed and callable(build):  # the call names the server: only its owner counts
            server_name = str(getattr(server, "name", ""))
            if not tool.startswith(build(server_name, "x")[:-1]):
                continue
            raw = [n for n in policy if build(server_name, str(n)) == tool] \
                if isinstance(policy, dict) else []
            named = raw[0] if raw else ""
        if isinstance(policy, bool):
            verdicts.add(policy)
        elif isinstance(policy, dict):
            verdicts.add(bool(policy.get(named, False)))
        else:
            return None
    return verdicts.pop() if len(verdicts) == 1 else None


def _provider_ran(frame: Leg, agent: Agent[Any], ran: ProviderRun, response_id: Any,
                  time_ns: int) -> Any:
    """What records a call the provider ran (:func:`provider_run`): the execution of the
    approval request it names (if that call was recorded), else its own call and
    execution (none when the response holds no result of it)."""

    def write(writer: EvidenceWriter) -> None:
        if not ran.requested:
            writer.call(run_id=frame.run_id, call_id=ran.call_id, agent=agent_label(agent),
                        tool=ran.tool, arguments=ran.arguments, scope=frame.scope,
                        needs_approval=False, response_id=response_id, time_ns=time_ns)
        elif writer.find_call(frame.run_id, frame.scope, ran.call_id) is None:
            return  # a request this run never recorded
        if ran.result is None:  # the response holds no result of it
            return
        writer.execution(run_id=frame.run_id, call_id=ran.call_id, arguments=ran.arguments,
                         scope=frame.scope, agent=agent_label(agent), tool=ran.tool,
                         result=ran.result, run_state=frame.run_state, time_ns=time_ns)

    return write


def _record_start(context: Any, agent: Agent[Any], tool: Tool) -> None:
    """``on_tool_start``: note the call the SDK is about to run (:attr:`Leg.started`; a
    tool of another kind takes its call from the agent's pending calls,
    :func:`take_started`); if it is gated, record the approval the run context holds for it
    when the ledger holds none (:mod:`~evidence_ledger.record.integrations.context_decisions`);
    with a policy, a call the guard's guardrail did not judge is judged now
    (:func:`~evidence_ledger.record.integrations.guard.guard_started`: denied, it raises)."""
    frame = current_leg()
    names: tuple[str, ...]  # the names the SDK may keep a decision on the call under
    if isinstance(tool, FunctionTool):
        if not isinstance(context, ToolContext):
            return
        call_id, names = context.tool_call_id, (context.tool_name, _context_tool(context))
        label, arguments, raw = names[1], context.tool_arguments, context.tool_call
    else:
        started = take_started(frame.native_calls, frame.scope, agent, tool, context,
                               frame.gated)
        if started is None:
            return
        (call_id, arguments), label, raw = started, tool.name, None
        names = (label,)  # a shell, apply_patch, computer or custom tool call
        frame.running.setdefault((frame.scope, agent.name, label), []).append(call_id)
    frame.started[frame.scope, call_id] = (agent_label(agent), label, arguments)
    guard_started(frame, agent, call_id, label, arguments)
    if frame.gated.get((frame.scope, call_id), getattr(tool, "needs_approval", None) is True):
        record_context_approval(frame, context, names, call_id, agent, raw, label, arguments)


def _record_execution(context: Any, agent: Agent[Any], tool: Tool, result: Any) -> None:
    """``on_tool_end``: record the execution of a function tool, unless an output guardrail
    already did, or of a tool of another kind (its oldest call started and not ended)."""
    if isinstance(tool, FunctionTool):
        if isinstance(context, ToolContext):
            _record_ran(context, agent, result, tool)
        return
    frame = current_leg()
    running = frame.running.get((frame.scope, agent.name, tool.name))
    if not running:
        return
    call_id = running.pop(0)
    if (frame.scope, call_id) in frame.executed:  # recorded as published when its leg ended
        return
    _, _, arguments = frame.started[frame.scope, call_id]
    now = frame.executed[frame.scope, call_id] = frame.journal.writer.clock()
    frame.record(methodcaller(
        "execution", run_id=frame.run_id, call_id=call_id, arguments=arguments,
        scope=frame.scope, agent=agent_label(agent), tool=tool.name, result=payload_text(result),
        run_state=frame.run_state, time_ns=now,
    ))


def _record_ran(
    context: ToolContext[Any], agent: Agent[Any], result: Any, tool: FunctionTool | None = None,
) -> int:
    """Record, once per leg, the execution of the function tool ``context`` names, which
    returned ``result`` (``tool``: its object, else looked up on ``agent`` by name, for the
    output schema), now. Returns its time (ns since the epoch; the first one's, if it was
    recorded before)."""
    frame = current_leg()
    key = (frame.scope, context.tool_call_id)
    if key in frame.executed:
        return frame.executed[key]
    if tool is None:
        tool = next((t for t in agent.tools
                     if isinstance(t, FunctionTool)
                     and function_tool_label(t) == _context_tool(context)), None)
    now = frame.executed[key] = frame.journal.writer.clock()
    frame.record(methodcaller(
        "execution", run_id=frame.run_id, call_id=context.tool_call_id,
        arguments=context.tool_arguments, scope=frame.scope, agent=agent_label(agent),
        tool=_context_tool(context), result=persisted_output(context, tool, result),
        run_state=frame.run_state, time_ns=now,
    ))
    return now


def _record_handoff(source: Agent[Any], target: Agent[Any]) -> None:
    """Record the handoff the SDK ran from ``source`` to ``target``. The SDK runs the
    first handoff call of ``source``'s latest response: its execution is recorded, with
    the transfer message the SDK persists as its output (``Handoff.get_transfer_message``);
    every later handoff call of that response, which the SDK answers with
    :data:`IGNORED_HANDOFF_MESSAGE`, gets a block."""
    frame = current_leg()
    pending = frame.handoff_calls.pop((frame.scope, source.name), [])
    ran = _handoffs(source).get(pending[0][1]) if pending else None
    if ran is None:
        return
    (call_id, tool, arguments), ignored = pending[0], pending[1:]
    guard_started(frame, source, call_id, tool, arguments)  # denied: raises, no handoff
    frame.record(methodcaller(
        "execution", run_id=frame.run_id, call_id=call_id, arguments=arguments,
        scope=frame.scope, agent=agent_label(source), tool=tool,
        result=ran.get_transfer_message(target), run_state=frame.run_state,
        time_ns=frame.journal.writer.clock(),
    ))
    for ignored_id, ignored_tool, _ in ignored:
        _record_block(ignored_id, agent_label(source), ignored_tool, IGNORED_HANDOFF,
                      IGNORED_HANDOFF_MESSAGE)


def pending_call_owners(state: Any) -> dict[tuple[Scope, str], tuple[Any, Any, str]]:
    """:attr:`Leg.call_owners` of the calls a paused ``RunState`` waits on (its
    interruptions, at top-level scope); empty if the SDK cannot say."""
    try:
        items = state.get_interruptions()
    except Exception:
        return {}
    owners: dict[tuple[Scope, str], tuple[Any, Any, str]] = {}
    for item in items:
        agent, raw = getattr(item, "agent", None), getattr(item, "raw_item", None)
        native = native_call(agent, raw)
        tool = native[1] if native is not None else _call_tool(raw)
        if isinstance(item.call_id, str) and agent is not None:
            owners[(), item.call_id] = (agent, raw, tool)
    return owners


def pending_response_calls(state: Any) -> dict[tuple[Scope, str], list[tuple[str, str]]]:
    """The function calls of the response a paused ``RunState``'s current agent made before
    pausing, as :attr:`Leg.response_calls` holds them (read from the SDK's
    ``_last_processed_response``, restored by ``RunState.from_json`` too); empty when
    there are none."""
    agent = getattr(state, "_current_agent", None)
    response = getattr(state, "_last_processed_response", None)
    calls = [run.tool_call for run in getattr(response, "functions", None) or ()]
    if agent is None or not calls:
        return {}
    return {((), agent.name): [(_field(call, "call_id"), _call_tool(call)) for call in calls]}


def pending_handoffs(state: Any) -> dict[tuple[Scope, str], list[tuple[str, str, str]]]:
    """The handoff calls a paused ``RunState`` will run or ignore when resumed, as
    :attr:`Leg.handoff_calls` holds them: the handoff calls of the response its current
    agent made before pausing (read from the SDK's ``_last_processed_response``,
    restored by ``RunState.from_json`` too); empty when there are none."""
    agent = getattr(state, "_current_agent", None)
    response = getattr(state, "_last_processed_response", None)
    calls = [run.tool_call for run in getattr(response, "handoffs", None) or ()]
    if agent is None or not calls:
        return {}
    return {((), agent.name): [
        (_field(call, "call_id"), _field(call, "name"), _field(call, "arguments"))
        for call in calls
    ]}


class RecordingRunHooks(RunHooks[Any]):
    """Run hooks that record what a recorded leg's agents do, then call the run hooks the
    app gave (``inner``; None: none) with the very arguments the SDK passed (positional or
    by name, as it passed them). The SDK calls them for every agent of the run they are
    given to (handoffs included); :mod:`~evidence_ledger.record.integrations.nested_runs`
    gives them to the runs of agents used through ``Agent.as_tool`` as well. Outside a
    recorded leg they only pass events on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def _forward(self, name: str, args: Any, kwargs: Any, record: Any = None) -> None:
        frame = CURRENT_LEG.get()
        if frame is not None:
            named = _BASE_SIGNATURES[name].bind(self, *args, **kwargs).arguments
            context = named.get("context")
            if callable(getattr(context, "is_tool_approved", None)):
                frame.contexts[frame.scope] = context
            if record is not None:
                record(named)
        if self.inner is not None:
            await getattr(self.inner, name)(*args, **kwargs)

    async def on_agent_start(self, *args: Any, **kwargs: Any) -> None:
        await self._forward("on_agent_start", args, kwargs)

    async def on_agent_end(self, *args: Any, **kwargs: Any) -> None:
        await self._forward("on_agent_end", args, kwargs)

    async def on_handoff(self, *args: Any, **kwargs: Any) -> None:
        await self._forward("on_handoff", args, kwargs, record=lambda a: _record_handoff(
            a["from_agent"], a["to_agent"]))

    async def on_tool_start(self, *args: Any, **kwargs: Any) -> None:
        await self._forward("on_tool_start", args, kwargs, record=lambda a: _record_start(
            a["context"], a["agent"], a["tool"]))

    async def on_tool_end(self, *args: Any, **kwargs: Any) -> None:
        await self._forward("on_tool_end", args, kwargs, record=lambda a: _record_execution(
            a["context"], a["agent"], a["tool"], a["result"]))

    async def on_llm_start(self, *args: Any, **kwargs: Any) -> None:
        await self._forward("on_llm_start", args, kwargs)

    async def on_llm_end(self, *args: Any, **kwargs: Any) -> None:
        await self._forward("on_llm_end", args, kwargs, record=lambda a: _record_calls(
            a["agent"], a["response"]))


_BASE_SIGNATURES = {
    name: inspect.signature(getattr(RunHooks, name))
    for name in ("on_agent_start", "on_agent_end", "on_handoff", "on_tool_start", "on_tool_end",
                 "on_llm_start", "on_llm_end")
}
"""How the SDK's run hooks name their arguments (read from ``RunHooks`` itself)."""
