"""The recorder is a guest: a recorded run behaves as the plain SDK run does.

Each test runs the same scripted agent plainly (``Runner``) and through a :class:`Recorder`
and compares what the app can observe.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import hashlib
import inspect
import logging
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest
from agents import (
    Agent,
    ApplyPatchTool,
    CodeInterpreterTool,
    CustomTool,
    FileSearchTool,
    GuardrailFunctionOutput,
    HostedMCPTool,
    ImageGenerationTool,
    OutputGuardrail,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    RunHooks,
    Runner,
    RunState,
    ShellTool,
    SQLiteSession,
    ToolSearchTool,
    ToolsToFinalOutputResult,
    WebSearchTool,
    function_tool,
    handoff,
    output_guardrail,
    tool_namespace,
)
from agents.editor import ApplyPatchResult
from agents.mcp import MCPServerStdio
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from openai.types.responses import (
    ResponseCodeInterpreterToolCall,
    ResponseFileSearchToolCall,
    ResponseFunctionWebSearch,
)
from openai.types.responses.response_code_interpreter_tool_call import OutputLogs
from openai.types.responses.response_file_search_tool_call import Result
from openai.types.responses.response_function_web_search import ActionSearch
from openai.types.responses.response_output_item import (
    ImageGenerationCall,
    McpApprovalRequest,
    McpCall,
)

from evidence_ledger import Recorder
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger

pytestmark = pytest.mark.anyio


@function_tool
def lookup(order_id: str) -> str:
    """Read an order."""
    return f"order {order_id}"


def _agent() -> Agent[Any]:
    return Agent(name="support", tools=[lookup], model=ScriptedModel([
        ModelStep(output=[function_call("lookup", {"order_id": "o-1"}, call_id="c-1")]),
        ModelStep(output=[assistant_message("done")]),
    ]))


async def _first_event_then_aclose(result: Any) -> None:
    stream = result.stream_events()
    await stream.__anext__()
    await stream.aclose()


async def test_aclose_on_the_recorded_stream_closes_the_sdks(tmp_path: Path):
    plain = Runner.run_streamed(_agent(), "hi")
    await _first_event_then_aclose(plain)
    recorded = Recorder(tmp_path).run_streamed(_agent(), "hi")
    await _first_event_then_aclose(recorded)
    # the SDK's own generator, closed, waits for its run: the run has finished
    assert plain.is_complete and plain.run_loop_task is not None and plain.run_loop_task.done()
    assert recorded.is_complete == plain.is_complete
    assert recorded.run_loop_task is not None and recorded.run_loop_task.done()
    assert recorded.final_output == plain.final_output == "done"
    ends = [e.body["status"] for e, _ in Ledger(tmp_path).entries() if e.kind == "run_end"]
    assert ends == ["completed"]


@function_tool(needs_approval=True)
def refund(amount: str) -> str:
    """Refund (gated)."""
    return f"refunded {amount}"


@function_tool(needs_approval=True)
def issue_credit(amount: str) -> str:
    """Credit an account (gated)."""
    return f"credited {amount}"


def _one_call_id_in_two_scopes() -> Agent[Any]:
    billing = Agent(name="billing", tools=[issue_credit], model=ScriptedModel([
        ModelStep(output=[function_call("issue_credit", {"amount": "5"}, call_id="c-1")]),
        ModelStep(output=[assistant_message("credited")]),
    ]))
    return Agent(name="support", model=ScriptedModel([
        ModelStep(output=[
            function_call("refund", {"amount": "20"}, call_id="c-1"),
            function_call("ask_billing", {"input": "credit 5"}, call_id="c-2"),
        ]),
        ModelStep(output=[assistant_message("done")]),
    ]), tools=[refund, billing.as_tool(tool_name="ask_billing", tool_description="Billing.")])


async def test_one_call_id_in_two_scopes_is_told_apart_by_its_agent(tmp_path: Path):
    recorder = Recorder(tmp_path)
    agent = _one_call_id_in_two_scopes()
    result = await recorder.run(agent, "refund 20, credit 5")
    state = result.to_state()
    pending = state.get_interruptions()
    assert sorted((i.agent.name, i.call_id) for i in pending) == [
        ("billing", "c-1"), ("support", "c-1")]
    for item in pending:
        recorder.approve(state, item, approver="alice")
    result = await recorder.run(agent, state)
    assert result.final_output == "done"
    decisions = [(e.body["agent"], e.body["scope"]) for e, _ in Ledger(tmp_path).entries()
                 if e.kind == "decision"]
    assert sorted(decisions) == [("billing", ["ask_billing:c-2"]), ("support", [])]
    ran = sorted((e.body["tool"], e.body["scope"]) for e, _ in Ledger(tmp_path).entries()
                 if e.kind == "execution")
    assert ("issue_credit", ["ask_billing:c-2"]) in ran and ("refund", []) in ran
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_an_approved_agent_tool_whose_agent_paused_is_pending(tmp_path: Path):
    billing = Agent(name="billing", tools=[issue_credit], model=ScriptedModel([
        ModelStep(output=[function_call("issue_credit", {"amount": "5"}, call_id="c-9")]),
        ModelStep(output=[assistant_message("credited")]),
    ]))
    agent = Agent(name="support", model=ScriptedModel([
        ModelStep(output=[function_call("ask_billing", {"input": "credit 5"}, call_id="c-2")]),
        ModelStep(output=[assistant_message("done")]),
    ]), tools=[billing.as_tool(tool_name="ask_billing", tool_description="Billing.",
                               needs_approval=True)])
    recorder = Recorder(tmp_path)
    result = await recorder.run(agent, "credit 5")
    state = result.to_state()
    for item in state.get_interruptions():  # the agent tool itself
        recorder.approve(state, item, approver="alice")
    result = await recorder.run(agent, state)  # the nested agent pauses on issue_credit
    state = result.to_state()
    assert [i.call_id for i in state.get_interruptions()] == ["c-9"]
    assert verify_ledger(Ledger(tmp_path)).violations == []  # c-2 is still running
    for item in state.get_interruptions():
        recorder.approve(state, item, approver="bob")
    result = await recorder.run(agent, state)
    assert result.final_output == "done"
    assert verify_ledger(Ledger(tmp_path)).violations == []


@function_tool
def read_secret() -> str:
    """Read a secret (its output becomes the final output)."""
    return "s3cr3t"


@function_tool(needs_approval=True)
def read_secret_gated() -> str:
    """Read a secret (gated)."""
    return "s3cr3t"


async def test_an_agent_output_guardrail_that_withholds_a_tool_output(tmp_path: Path):
    @output_guardrail
    def no_secrets(context: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered="s3cr3t" in output)

    agent = Agent(name="vault", tools=[read_secret], tool_use_behavior="stop_on_first_tool",
                  output_guardrails=[no_secrets], model=ScriptedModel([
                      ModelStep(output=[function_call("read_secret", {}, call_id="c-1")]),
                  ]))
    session = SQLiteSession("vault", ":memory:")
    with pytest.raises(OutputGuardrailTripwireTriggered):
        await Recorder(tmp_path).run(agent, "tell me", session=session)
    outputs = [i["output"] for i in await session.get_items()
               if i.get("type") == "function_call_output"]
    assert outputs == ["Output withheld by an output guardrail."]  # the SDK replaced it
    assert verify_ledger(Ledger(tmp_path)).violations == []
    blocks = [e.body for e, _ in Ledger(tmp_path).entries() if e.kind == "guardrail"]
    assert [(b["call_id"], b["guardrail"]) for b in blocks] == [("c-1", "no_secrets")]


@function_tool
def sibling() -> str:
    """Runs beside a gated tool."""
    return "sibling output"


@pytest.mark.parametrize("restored", [False, True])
async def test_an_agent_output_guardrail_withholds_every_output_of_the_response(
    tmp_path: Path, restored: bool
):
    @output_guardrail
    def never(context: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=True)

    agent = Agent(name="vault", tools=[sibling, read_secret_gated],
                  tool_use_behavior={"stop_at_tool_names": ["read_secret_gated"]},
                  output_guardrails=[never], model=ScriptedModel([ModelStep(output=[
                      function_call("sibling", {}, call_id="c-1"),
                      function_call("read_secret_gated", {}, call_id="c-2"),
                  ])]))
    session = SQLiteSession("vault", ":memory:")
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "tell me", session=session)).to_state()
    if restored:
        state = await RunState.from_json(agent, state.to_json())
    recorder.approve(state, state.get_interruptions()[0], approver="ann")
    with pytest.raises(OutputGuardrailTripwireTriggered):
        await recorder.run(agent, state, session=session)
    outputs = [i["output"] for i in await session.get_items()
               if i.get("type") == "function_call_output"]
    assert outputs == ["Output withheld by an output guardrail."] * 2  # the SDK replaced both
    assert verify_ledger(Ledger(tmp_path)).violations == []
    blocks = [e.body for e, _ in Ledger(tmp_path).entries() if e.kind == "guardrail"]
    assert sorted(b["call_id"] for b in blocks) == ["c-1", "c-2"]


async def test_a_handoff_object_is_followed_to_its_agent(tmp_path: Path):
    billing = Agent(name="billing", tools=[issue_credit], model=ScriptedModel([
        ModelStep(output=[function_call("issue_credit", {"amount": "5"}, call_id="c-7")]),
        ModelStep(output=[assistant_message("credited")]),
    ]))
    agent = Agent(name="triage", handoffs=[handoff(billing)], model=ScriptedModel([
        ModelStep(output=[function_call("transfer_to_billing", {}, call_id="c-h")]),
    ]))
    recorder = Recorder(tmp_path)
    result = await recorder.run(agent, "credit 5")
    state = result.to_state()
    for item in state.get_interruptions():
        recorder.approve(state, item, approver="alice")  # was: 'c-7' ... was not recorded
    result = await recorder.run(agent, state)
    assert result.final_output == "credited"
    assert verify_ledger(Ledger(tmp_path)).violations == []
    calls = [(e.body["agent"], e.body["call_id"]) for e, _ in Ledger(tmp_path).entries()
             if e.kind == "call"]
    assert ("billing", "c-7") in calls


# -- run contexts, run states and agents are left as they were ----------------------------


@function_tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay (gated)."""
    return f"paid {amount}"


def _gated_agent() -> Agent[Any]:
    return Agent(name="payer", tools=[pay], model=ScriptedModel([
        ModelStep(output=[function_call("pay", {"amount": 3}, call_id="c-pay")]),
        ModelStep(output=[assistant_message("paid")]),
    ]))


@dataclasses.dataclass
class AppContext:
    user: str
    seen: list[str] = dataclasses.field(default_factory=list)


class PydanticContext(pydantic.BaseModel):
    user: str


class PlainObject:
    def __init__(self) -> None:
        self.user = "ann"


CONTEXTS = {
    "none": lambda: None,
    "mapping": lambda: {"user": "ann"},
    "dataclass": lambda: AppContext("ann"),
    "pydantic": lambda: PydanticContext(user="ann"),
    "object": PlainObject,
}


def _snapshot(context: Any) -> Any:
    return None if context is None else copy.deepcopy(vars(context) if not isinstance(
        context, dict) else context)


@pytest.mark.parametrize("kind", sorted(CONTEXTS))
async def test_any_run_context_is_left_untouched(tmp_path: Path, kind: str):
    context = CONTEXTS[kind]()
    before = _snapshot(context)
    recorder, agent = Recorder(tmp_path), _gated_agent()
    paused = await recorder.run(agent, "pay", context=context)
    state = paused.to_state()
    assert state._context is not None and state._context.context is context
    recorder.approve(state, state.get_interruptions()[0], approver="ann")
    done = await recorder.run(agent, state)

    assert done.final_output == "paid"
    assert done.context_wrapper.context is context and _snapshot(context) == before
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_a_dataclass_context_round_trips_through_json(tmp_path: Path):
    context = AppContext("ann")
    paused = await Recorder(tmp_path).run(_gated_agent(), "pay", context=context)
    text = paused.to_state().to_string()
    agent = _gated_agent()
    agent.model = ScriptedModel([ModelStep(output=[assistant_message("paid")])])
    restored = await RunState.from_string(
        agent, text, context_deserializer=lambda data: AppContext(**data))
    recorder = Recorder(tmp_path)  # as in another process
    recorder.approve(restored, restored.get_interruptions()[0], approver="ann")
    done = await recorder.run(agent, restored)

    assert isinstance(done.context_wrapper.context, AppContext)
    found = [e.body for e, _ in Ledger(tmp_path).entries() if e.kind == "run_state"]
    assert [b["event"] for b in found] == ["to_state", "loaded", "decided", "resume", "ended"]
    assert len({b["run_id"] for b in found}) == 1
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_a_run_state_no_recorder_saw_is_adopted(tmp_path: Path):
    paused = await Runner.run(_gated_agent(), "pay")  # not recorded
    agent = _gated_agent()
    agent.model = ScriptedModel([ModelStep(output=[assistant_message("paid")])])
    state = await RunState.from_json(agent, paused.to_state().to_json())
    recorder = Recorder(tmp_path)
    recorder.approve(state, state.get_interruptions()[0], approver="ann")
    done = await recorder.run(agent, state)

    assert done.final_output == "paid"
    found = [(e.kind, e.body) for e, _ in Ledger(tmp_path).entries()]
    assert [k for k, _ in found][:3] == ["call", "run_state", "decision"]
    adopted = found[1][1]
    assert (adopted["event"], adopted["parent"]) == ("adopted", None)
    assert [i["call_id"] for i in adopted["interruptions"]] == ["c-pay"]
    assert {b["run_id"] for _, b in found if "run_id" in b} == {adopted["run_id"]}
    assert [b["call_id"] for k, b in found if k == "execution"] == ["c-pay"]
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_an_adopted_state_approved_behind_the_recorders_back_says_so(tmp_path: Path):
    paused = await Runner.run(_gated_agent(), "pay")
    state = paused.to_state()
    state.approve(state.get_interruptions()[0])  # approved behind the recorder's back
    agent = _gated_agent()
    agent.model = ScriptedModel([ModelStep(output=[assistant_message("paid")])])
    await Recorder(tmp_path).run(agent, state)

    approvers = [e.body["approver"] for e, _ in Ledger(tmp_path).entries()
                 if e.kind == "decision"]
    assert approvers == ["run_context"]
    report = verify_ledger(Ledger(tmp_path))
    assert report.violations == []
    assert any("not made through the recorder" in n for n in report.notices)


async def test_a_recorded_agent_runs_plainly_and_compares_as_before(tmp_path: Path):
    recorded, twin = _agent(), _agent()
    twin.model = recorded.model = None
    assert recorded == twin
    recorded.model = _agent().model
    await Recorder(tmp_path).run(recorded, "hi")
    before = len(list(Ledger(tmp_path).entries()))
    recorded.model = twin.model = None
    assert recorded == twin  # the recording hooks compare as the hooks they wrap

    recorded.model = _agent().model
    plain = await Runner.run(recorded, "hi")  # no recorder: it runs, nothing is recorded
    assert plain.final_output == "done"
    assert len(list(Ledger(tmp_path).entries())) == before


# -- calls of other tool kinds ------------------------------------------------------------


def _shell_call(call_id: str, command: str) -> dict[str, Any]:
    return {"type": "shell_call", "id": f"id-{call_id}", "call_id": call_id,
            "status": "in_progress",
            "action": {"type": "exec", "commands": [command], "timeout_ms": 1000}}


def _shell_agent(ran: list[str], steps: list[list[Any]]) -> Agent[Any]:
    def execute(request: Any) -> str:
        ran.append(request.data.action.commands[0])
        return f"ran {request.data.action.commands[0]}"

    return Agent(name="operator", tools=[ShellTool(executor=execute, needs_approval=True)],
                 model=ScriptedModel([ModelStep(output=step) for step in steps]))


async def test_shell_calls_are_recorded_decided_and_executed(tmp_path: Path):
    ran: list[str] = []
    agent = _shell_agent(ran, [
        [_shell_call("s-1", "ls"), _shell_call("s-2", "rm -rf /")],
        [assistant_message("done")],
    ])
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "tidy up")).to_state()
    first, second = state.get_interruptions()
    recorder.approve(state, first, approver="ann")
    recorder.reject(state, second, approver="ann", message="not that")
    done = await recorder.run(agent, state)

    assert done.final_output == "done" and ran == ["ls"]
    found = [(e.kind, e.body) for e, _ in Ledger(tmp_path).entries()]
    calls = {b["call_id"]: b for k, b in found if k == "call"}
    assert {c: (b["tool"], b["needs_approval"]) for c, b in calls.items()} == {
        "s-1": ("shell", True), "s-2": ("shell", True)}
    assert [b["call_id"] for k, b in found if k == "execution"] == ["s-1"]
    assert verify_ledger(Ledger(tmp_path)).violations == []


class FailingOnce(SQLiteSession):
    """A session whose next append fails once ``fail`` is set (``stored``: after storing
    the items, as a store whose acknowledgement is lost)."""

    fail = False
    stored = False

    async def add_items(self, items: list[Any]) -> None:
        if self.fail:
            self.fail = False
            if self.stored:
                await super().add_items(items)
            raise RuntimeError("session append failed")
        await super().add_items(items)


async def _retried_after_a_failed_append(
    tmp_path: Path, edit: Any = lambda state: None, stored: bool = False,
) -> None:
    """A gated call approved, its leg failing at the session append (``stored``: with the
    items stored all the same), then retried from the state's JSON (changed by ``edit``
    first) by another recorder."""
    session = FailingOnce("s", ":memory:")
    session.stored = stored
    agent = _gated_agent()
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "pay", session=session)).to_state()
    recorder.approve(state, state.get_interruptions()[0], approver="ann")
    session.fail = True
    with pytest.raises(RuntimeError, match="session append failed"):
        await recorder.run(agent, state, session=session)  # the SDK updates `state`
    retry = await RunState.from_json(agent, state.to_json())
    edit(retry)
    await Recorder(tmp_path).run(agent, retry, session=session)


async def test_a_state_retried_after_a_failed_leg_stays_in_its_run(tmp_path: Path):
    await _retried_after_a_failed_append(tmp_path)

    found = [e.body for e, _ in Ledger(tmp_path).entries() if e.kind == "run_state"]
    assert [b["event"] for b in found] == [
        "to_state", "decided", "resume", "ended", "loaded", "resume", "ended"]
    assert len({b["run_id"] for b in found}) == 1
    assert found[4]["parent"] == found[0]["state_id"]


async def test_an_append_stored_though_it_failed_is_recorded_as_stored(tmp_path: Path):
    """The SDK recovers the write from the session on retry and writes nothing again: the
    output is in the session, and the ledger says so (no output_not_persisted)."""
    await _retried_after_a_failed_append(tmp_path, stored=True)

    persisted = [e.body["item_type"] for e, _ in Ledger(tmp_path).entries()
                 if e.kind == "session_item"]
    assert persisted.count("function_call_output") == 1
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_a_streamed_leg_whose_reader_is_cancelled_is_recorded_failed(tmp_path: Path):
    release = asyncio.Event()

    @function_tool
    async def slow() -> str:
        """Wait."""
        await release.wait()
        return "late"

    agent = Agent(name="waiter", tools=[slow], model=ScriptedModel([
        ModelStep(output=[function_call("slow", {}, call_id="c-slow")]),
        ModelStep(output=[assistant_message("done")]),
    ]))
    result = Recorder(tmp_path).run_streamed(agent, "wait")

    async def read() -> None:
        async for _ in result.stream_events():
            pass

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.2)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    release.set()

    ends = [e.body["status"] for e, _ in Ledger(tmp_path).entries() if e.kind == "run_end"]
    assert ends == ["failed"]


async def test_the_apps_run_hooks_get_the_arguments_as_the_sdk_passes_them(tmp_path: Path):
    def agents_with_handoff() -> Agent[Any]:
        billing = Agent(name="billing", model=ScriptedModel([
            ModelStep(output=[assistant_message("credited")])]))
        return Agent(name="triage", handoffs=[billing], model=ScriptedModel([
            ModelStep(output=[function_call("transfer_to_billing", {}, call_id="c-h")])]))

    class KeywordHooks(RunHooks[Any]):
        def __init__(self) -> None:
            self.seen: list[str] = []

        async def on_handoff(self, *, context: Any, from_agent: Any, to_agent: Any) -> None:
            self.seen.append(f"{from_agent.name} -> {to_agent.name}")

    plain_hooks, recorded_hooks = KeywordHooks(), KeywordHooks()
    plain = await Runner.run(agents_with_handoff(), "refund", hooks=plain_hooks)
    recorded = await Recorder(tmp_path).run(agents_with_handoff(), "refund",
                                            hooks=recorded_hooks)

    assert recorded.final_output == plain.final_output == "credited"
    assert recorded_hooks.seen == plain_hooks.seen == ["triage -> billing"]
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_one_nested_call_id_in_two_runs_of_an_agent_tool_is_told_apart(tmp_path: Path):
    credited: list[str] = []

    @function_tool(needs_approval=True)
    def issue_credit(amount: str) -> str:
        """Credit (gated)."""
        credited.append(amount)
        return f"credited {amount}"

    billing = Agent(name="billing", tools=[issue_credit], model=ScriptedModel([
        ModelStep(output=[function_call("issue_credit", {"amount": "5"}, call_id="c-9")]),
        ModelStep(output=[function_call("issue_credit", {"amount": "7"}, call_id="c-9")]),
        ModelStep(output=[assistant_message("credited")]),
        ModelStep(output=[assistant_message("credited")]),
    ]))
    support = Agent(name="support", tools=[billing.as_tool(
        tool_name="ask_billing", tool_description="Billing.")], model=ScriptedModel([
            ModelStep(output=[
                function_call("ask_billing", {"input": "credit 5"}, call_id="c-2"),
                function_call("ask_billing", {"input": "credit 7"}, call_id="c-3")]),
            ModelStep(output=[assistant_message("done")]),
        ]))
    recorder = Recorder(tmp_path)
    state = (await recorder.run(support, "go")).to_state()
    for item in state.get_interruptions():
        recorder.approve(state, item, approver="ann")
    done = await recorder.run(support, state)

    assert done.final_output == "done" and sorted(credited) == ["5", "7"]
    decided = {tuple(e.body["scope"]) for e, _ in Ledger(tmp_path).entries()
               if e.kind == "decision"}
    assert decided == {("ask_billing:c-2",), ("ask_billing:c-3",)}
    assert verify_ledger(Ledger(tmp_path)).violations == []


@pytest.mark.parametrize("kind", ["dataclass", "pydantic", "object"])
async def test_the_apps_context_is_never_serialised_by_the_recorder(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
):
    async def flow(recorder: Recorder | None) -> list[str]:
        caplog.clear()
        agent = _gated_agent()
        run = recorder.run if recorder is not None else Runner.run
        state = (await run(agent, "pay", context=CONTEXTS[kind]())).to_state()
        item = state.get_interruptions()[0]
        if recorder is not None:
            recorder.approve(state, item, approver="ann")
        else:
            state.approve(item)
        await run(agent, state)
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

    assert await flow(Recorder(tmp_path)) == await flow(None) == []


async def test_stream_events_read_twice_ends_the_leg_once(tmp_path: Path):
    result = Recorder(tmp_path).run_streamed(_agent(), "hi")
    for _ in range(2):
        async for _event in result.stream_events():
            pass

    ends = [e.body["status"] for e, _ in Ledger(tmp_path).entries() if e.kind == "run_end"]
    assert ends == ["completed"]


# -- outputs the SDK published before a callback after the tool failed --------------------


def _executed_and_clean(ledger: Path, call_ids: list[str]) -> None:
    """The ledger's executions are of ``call_ids``, in order, and it verifies clean."""
    executed = [e.body["call_id"] for e, _ in Ledger(ledger).entries() if e.kind == "execution"]
    assert executed == call_ids
    assert verify_ledger(Ledger(ledger)).violations == []



def _boom(_context: Any) -> None:
    raise ValueError("extractor boom")


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_output_published_before_a_failing_extractor_is_executed(
    tmp_path: Path, streamed: bool
):
    @function_tool(needs_approval=True, custom_data_extractor=_boom)
    def write_thing(text: str) -> str:
        """Write (gated); its extractor fails after the SDK published the output."""
        return f"wrote:{text}"

    agent = Agent(name="writer", tools=[write_thing], model=ScriptedModel([
        ModelStep(output=[function_call("write_thing", {"text": "x"}, call_id="w-1")]),
        ModelStep(output=[assistant_message("done")]),
    ]))
    session = SQLiteSession("s", ":memory:")
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "go", session=session)).to_state()
    recorder.approve(state, state.get_interruptions()[0], approver="ann")
    with pytest.raises(Exception, match="extractor boom"):
        if streamed:
            async for _ in recorder.run_streamed(agent, state, session=session).stream_events():
                pass
        else:
            await recorder.run(agent, state, session=session)
    retry = await RunState.from_json(agent, state.to_json())
    done = await Recorder(tmp_path).run(agent, retry, session=session)

    assert done.final_output == "done"
    _executed_and_clean(tmp_path, ["w-1"])


async def test_a_native_output_published_before_a_failing_extractor_is_executed(
    tmp_path: Path,
):
    ran: list[str] = []

    def invoke(*_args: Any) -> str:
        ran.append("native")
        return "completed"

    native = CustomTool(name="native", description="A custom tool (gated)",
                        on_invoke_tool=invoke, custom_data_extractor=_boom, needs_approval=True)
    call = {"type": "custom_tool_call", "name": "native", "call_id": "n-1", "input": "go"}
    agent = Agent(name="operator", tools=[native], model=ScriptedModel([
        ModelStep(output=[call]), ModelStep(output=[assistant_message("done")])]))
    session = SQLiteSession("s", ":memory:")
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "list", session=session)).to_state()
    recorder.approve(state, state.get_interruptions()[0], approver="ann")
    with pytest.raises(Exception, match="extractor boom"):
        await recorder.run(agent, state, session=session)
    retry = await RunState.from_json(agent, state.to_json())
    await Recorder(tmp_path).run(agent, retry, session=session)

    assert ran == ["native"]
    _executed_and_clean(tmp_path, ["n-1"])


async def test_a_state_whose_json_was_edited_is_found_by_the_calls_it_holds(tmp_path: Path):
    # its digest is no longer one the ledger holds
    await _retried_after_a_failed_append(tmp_path, lambda state: state.add_input("receipt?"))

    found = [e.body for e, _ in Ledger(tmp_path).entries() if e.kind == "run_state"]
    assert [b["event"] for b in found] == [
        "to_state", "decided", "resume", "ended", "loaded", "resume", "ended"]
    assert len({b["run_id"] for b in found}) == 1
    assert found[4]["parent"] == found[3]["state_id"]
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_a_native_callback_that_outlives_its_failed_leg_records_one_execution(
    tmp_path: Path,
):
    extracting, release, settled = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def extract(_context: Any) -> None:
        extracting.set()
        try:
            while not release.is_set():
                with contextlib.suppress(asyncio.CancelledError):  # outlives the failed leg
                    await release.wait()
        finally:
            settled.set()

    native = CustomTool(name="native", description="A custom tool (gated)",
                        on_invoke_tool=lambda *_: "completed", custom_data_extractor=extract,
                        needs_approval=True)

    @function_tool(failure_error_function=None, needs_approval=True)
    async def fail() -> str:
        """Fails once the native tool's extractor runs."""
        await extracting.wait()
        raise ValueError("sibling failure")

    agent = Agent(name="operator", tools=[native, fail], model=ScriptedModel([ModelStep(output=[
        {"type": "custom_tool_call", "name": "native", "call_id": "n-1", "input": "go"},
        function_call("fail", {}, call_id="f-1"),
    ])]))
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "go")).to_state()
    for item in state.get_interruptions():
        recorder.approve(state, item, approver="ann")
    with pytest.raises(Exception, match="sibling failure"):
        await recorder.run(agent, state)
    release.set()
    await asyncio.wait_for(settled.wait(), 2)
    for _ in range(3):
        await asyncio.sleep(0)
    recorder.flush()

    found = [(e.kind, e.body) for e, _ in Ledger(tmp_path).entries()]
    assert [b["call_id"] for k, b in found if k == "execution"] == ["n-1"]


# -- agents that share a name ---------------------------------------------------------------


def _twins(executed: list[str]) -> tuple[Agent[Any], Agent[Any]]:
    """Two agents named alike, each with its own gated tool ``operate``, handing off to each
    other (the SDK keeps a sticky decision per agent, not per name)."""
    @function_tool(name_override="operate", needs_approval=True)
    def first_operation() -> str:
        """Operate (first)."""
        executed.append("first")
        return "first"

    @function_tool(name_override="operate", needs_approval=True)
    def second_operation() -> str:
        """Operate (second)."""
        executed.append("second")
        return "second"

    first = Agent(name="twin", tools=[first_operation], model=ScriptedModel([
        ModelStep(output=[function_call("operate", {}, call_id="first-1")]),
        ModelStep(output=[function_call("to_second", {}, call_id="handoff-1")]),
        ModelStep(output=[function_call("operate", {}, call_id="first-2")]),
        ModelStep(output=[assistant_message("done")]),
    ]))
    second = Agent(name="twin", tools=[second_operation], model=ScriptedModel([
        ModelStep(output=[function_call("operate", {}, call_id="second-1")]),
        ModelStep(output=[function_call("operate", {}, call_id="second-2")]),
        ModelStep(output=[function_call("to_first", {}, call_id="handoff-2")]),
    ]))
    first.handoffs = [handoff(second, tool_name_override="to_second")]
    second.handoffs = [handoff(first, tool_name_override="to_first")]
    return first, second


@pytest.mark.parametrize("serialized", [False, True])
async def test_sticky_decisions_of_two_agents_sharing_a_name_stay_apart(
    tmp_path: Path, serialized: bool
):
    executed: list[str] = []
    first, second = _twins(executed)
    recorder = Recorder(tmp_path)

    async def roundtrip(state: RunState[Any, Any]) -> RunState[Any, Any]:
        nonlocal first, second
        if not serialized:
            return state
        text = state.to_string()
        first, second = first.clone(), second.clone()  # the same graph, rebuilt
        first.handoffs = [handoff(second, tool_name_override="to_second")]
        second.handoffs = [handoff(first, tool_name_override="to_first")]
        return await RunState.from_string(first, text)

    result = await recorder.run(first, "start")
    state = await roundtrip(result.to_state())
    recorder.approve(state, state.get_interruptions()[0], approver="ann", always=True)
    result = await recorder.run(first, state)
    assert result.interruptions[0].agent is second  # the SDK asks again for the other twin
    state = await roundtrip(result.to_state())
    recorder.reject(state, state.get_interruptions()[0], approver="ann", always=True)
    result = await recorder.run(first, state)

    assert result.final_output == "done" and executed == ["first", "first"]
    found = [(e.kind, e.body) for e, _ in Ledger(tmp_path).entries()]
    agents = {b["call_id"]: b["agent"] for k, b in found if k == "call"}
    assert agents["first-1"] == agents["first-2"] == "twin"
    assert agents["second-1"] == agents["second-2"] == "twin#2"
    assert verify_ledger(Ledger(tmp_path)).violations == []


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_callable_approval_policy_keeps_its_kind(tmp_path: Path, kind: str):
    def sync_policy(context: Any, params: Any, call_id: str) -> bool:
        return params.get("amount", 0) > 10

    async def async_policy(context: Any, params: Any, call_id: str) -> bool:
        return sync_policy(context, params, call_id)

    policy = sync_policy if kind == "sync" else async_policy

    @function_tool(needs_approval=policy)
    def pay_some(amount: int) -> str:
        """Pay (gated above 10)."""
        return f"paid {amount}"

    agent = Agent(name="payer", tools=[pay_some], model=ScriptedModel([
        ModelStep(output=[function_call("pay_some", {"amount": 3}, call_id="c-1")]),
        ModelStep(output=[assistant_message("paid")]),
    ]))
    assert (await Recorder(tmp_path).run(agent, "pay")).final_output == "paid"
    wrapped = pay_some.needs_approval
    assert callable(wrapped) and wrapped is not policy and wrapped.__name__ == policy.__name__
    assert inspect.iscoroutinefunction(wrapped) == (kind == "async")
    decided = wrapped(None, {"amount": 20}, "c-2")
    assert (await decided if kind == "async" else decided) is True
    policies = [e.body for e, _ in Ledger(tmp_path).entries() if e.kind == "tool_policy"]
    assert [(b["call_id"], b["needs_approval"]) for b in policies] == [("c-1", False)]


# -- decisions made by the app's approval callbacks ----------------------------------------


def decide_by_command(_context: Any, item: Any) -> dict[str, Any]:
    """Approve listing, reject anything else."""
    command = item.raw_item.action.commands[0]
    return {"approve": True} if command == "ls" else {"approve": False, "reason": "not that"}


async def test_an_on_approval_callbacks_decisions_are_recorded_with_its_name(tmp_path: Path):
    ran: list[str] = []

    def execute(request: Any) -> str:
        ran.append(request.data.action.commands[0])
        return f"ran {request.data.action.commands[0]}"

    agent = Agent(name="operator", tools=[ShellTool(
        executor=execute, needs_approval=True, on_approval=decide_by_command)],
        model=ScriptedModel([
            ModelStep(output=[_shell_call("s-1", "ls"), _shell_call("s-2", "rm -rf /")]),
            ModelStep(output=[assistant_message("done")]),
        ]))
    result = await Recorder(tmp_path).run(agent, "tidy up")

    assert result.final_output == "done" and ran == ["ls"]
    found = [(e.kind, e.body) for e, _ in Ledger(tmp_path).entries()]
    decisions = [(b["call_id"], b["decision"], b["approver"], b["message_digest"] is not None)
                 for k, b in found if k == "decision"]
    assert decisions == [("s-1", "approve", "callback:decide_by_command", False),
                         ("s-2", "reject", "callback:decide_by_command", True)]
    assert verify_ledger(Ledger(tmp_path)).violations == []


def approve_lookups(request: Any) -> dict[str, Any]:
    """Approve every hosted MCP request."""
    return {"approve": True}


async def test_a_hosted_mcp_callbacks_approval_is_recorded_and_its_call_executed(
    tmp_path: Path,
):
    tool = HostedMCPTool(tool_config={
        "type": "mcp", "server_label": "docs", "server_url": "https://example.com",
        "require_approval": "always"}, on_approval_request=approve_lookups)
    request = McpApprovalRequest(id="mcpr-1", type="mcp_approval_request", name="lookup",
                                 server_label="docs", arguments='{"q": "x"}')
    ran = McpCall(id="mcp-1", type="mcp_call", name="lookup", server_label="docs",
                  arguments='{"q": "x"}', output="found x", approval_request_id="mcpr-1")
    agent = Agent(name="reader", tools=[tool], model=ScriptedModel([
        ModelStep(output=[request]), ModelStep(output=[ran, assistant_message("done")])]))
    assert (await Recorder(tmp_path).run(agent, "look")).final_output == "done"

    found = [(e.kind, e.body) for e, _ in Ledger(tmp_path).entries()]
    assert [(b["call_id"], b["decision"], b["approver"]) for k, b in found
            if k == "decision"] == [("mcpr-1", "approve", "callback:approve_lookups")]
    assert [b["call_id"] for k, b in found if k == "execution"] == ["mcpr-1"]
    assert verify_ledger(Ledger(tmp_path)).violations == []


# -- an MCP server's tools -------------------------------------------------------------------

MCP_SERVER = Path(__file__).resolve().parent.parent / "examples" / "mcp_files_server.py"


async def test_an_mcp_server_tools_call_carries_the_servers_approval_policy(tmp_path: Path):
    ledger = tmp_path / "ledger"
    async with MCPServerStdio(params={"command": sys.executable, "args": [str(MCP_SERVER)]},
                              require_approval="always", cache_tools_list=True) as server:
        agent = Agent(name="files", mcp_servers=[server], model=ScriptedModel([
            ModelStep(output=[function_call("delete_file", {"path": "/x"}, call_id="m-1")]),
            ModelStep(output=[assistant_message("done")]),
        ]))
        recorder = Recorder(ledger)
        state = (await recorder.run(agent, "delete")).to_state()
        recorder.approve(state, state.get_interruptions()[0], approver="ann")
        assert (await recorder.run(agent, state)).final_output == "done"

    found = [(e.kind, e.body) for e, _ in Ledger(ledger).entries()]
    assert [(b["tool"], b["needs_approval"]) for k, b in found if k == "call"] == [
        ("delete_file", True)]
    assert [b["call_id"] for k, b in found if k == "execution"] == ["m-1"]
    assert verify_ledger(Ledger(ledger)).violations == []


async def test_hosted_tool_calls_are_recorded_with_the_providers_result(tmp_path: Path):
    searched = ResponseFunctionWebSearch(
        id="ws-1", type="web_search_call", status="completed",
        action=ActionSearch(type="search", query="ledger"))
    found_files = ResponseFileSearchToolCall(
        id="fs-1", type="file_search_call", status="completed", queries=["refund policy"],
        results=[Result(file_id="f-1", filename="policy.md", text="refunds within 30 days")])
    interpreted = ResponseCodeInterpreterToolCall(
        id="ci-1", type="code_interpreter_call", status="completed", code="print(1)",
        container_id="cnt-1", outputs=[OutputLogs(type="logs", logs="1")])
    drawn = ImageGenerationCall(id="ig-1", type="image_generation_call", status="completed",
                                result="aW1n")
    tool_search = [  # the provider's tool search: its call, then its output, as two items
        {"type": "tool_search_call", "id": "ts-1", "call_id": "ts-call", "execution": "server",
         "arguments": {"query": "refunds"}, "status": "completed"},
        {"type": "tool_search_output", "id": "tso-1", "call_id": "ts-call",
         "execution": "server", "status": "completed", "tools": []},
    ]
    agent = Agent(name="researcher", tools=[
        WebSearchTool(), FileSearchTool(vector_store_ids=["vs-1"]),
        CodeInterpreterTool(tool_config={"type": "code_interpreter", "container": "auto"}),
        ImageGenerationTool(tool_config={"type": "image_generation"}), ToolSearchTool(),
    ], model=ScriptedModel([ModelStep(output=[
        searched, found_files, interpreted, drawn, *tool_search, assistant_message("done")])]))
    session = SQLiteSession("s", str(tmp_path / "s.db"))
    done = await Recorder(tmp_path / "l").run(agent, "look it up", session=session)
    assert done.final_output == "done"

    found = [(e.kind, e.body) for e, _ in Ledger(tmp_path / "l").entries()]
    assert [(b["call_id"], b["tool"], b["needs_approval"]) for k, b in found if k == "call"] == [
        ("ws-1", "web_search", False), ("fs-1", "file_search", False),
        ("ci-1", "code_interpreter", False), ("ig-1", "image_generation", False),
        ("ts-call", "tool_search", False)]
    executions = {b["call_id"]: b for k, b in found if k == "execution"}
    assert list(executions) == ["ws-1", "fs-1", "ci-1", "ig-1", "ts-call"]
    assert executions["ts-call"]["result_digest"] == hashlib.sha256(b"[]").digest()
    persisted = [b["item_type"] for k, b in found if k == "session_item"]
    assert persisted[1:-1] == ["web_search_call", "file_search_call", "code_interpreter_call",
                               "image_generation_call", "tool_search_call", "tool_search_output"]
    assert verify_ledger(Ledger(tmp_path / "l")).violations == []


async def test_a_shell_call_the_provider_ran_is_executed_by_its_output(tmp_path: Path):
    shell = ShellTool(environment={"type": "container_reference", "container_id": "cntr-1"})
    agent = Agent(name="operator", tools=[shell], model=ScriptedModel([ModelStep(output=[
        {"type": "shell_call", "id": "sh-1", "call_id": "c-sh", "status": "completed",
         "action": {"commands": ["echo hi"]}},
        {"type": "shell_call_output", "id": "sh-out", "call_id": "c-sh", "status": "completed",
         "output": [{"stdout": "hi", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]},
    ]), ModelStep(output=[assistant_message("done")])]))
    session = SQLiteSession("s", str(tmp_path / "s.db"))
    done = await Recorder(tmp_path / "l").run(agent, "say hi", session=session)

    assert done.final_output == "done"
    found = [(e.kind, e.body) for e, _ in Ledger(tmp_path / "l").entries()]
    assert [(k, b["call_id"]) for k, b in found if k in ("call", "execution")] == [
        ("call", "c-sh"), ("execution", "c-sh")]
    assert verify_ledger(Ledger(tmp_path / "l")).violations == []


class CallableCheck:
    """An output guardrail given as a callable object (it has no ``__qualname__``)."""

    def __call__(self, context: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


def _identity(function: Any) -> tuple[str, str]:
    """How the SDK names a callable when it tells same-named agents apart."""
    return (getattr(function, "__module__", type(function).__module__),
            getattr(function, "__qualname__", type(function).__qualname__))


async def test_wrapped_callables_keep_the_identity_the_sdk_reads(tmp_path: Path):
    guardrail = OutputGuardrail(guardrail_function=CallableCheck(), name="check")
    before = _identity(guardrail.guardrail_function)
    agent = Agent(name="a", output_guardrails=[guardrail], model=ScriptedModel([
        ModelStep(output=[assistant_message("hi")])]))
    await Recorder(tmp_path).run(agent, "hi")
    assert guardrail.guardrail_function is not CallableCheck  # wrapped
    assert _identity(guardrail.guardrail_function) == before


@output_guardrail
def always_trips(context: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=True)


def _derived(context: Any, results: list[Any]) -> ToolsToFinalOutputResult:
    return ToolsToFinalOutputResult(is_final_output=True,
                                    final_output="secret is " + results[0].output)


@pytest.mark.parametrize("behavior", ["derived", "text-after-tool"])
async def test_an_agent_output_guardrail_blocks_only_what_the_sdk_withholds(
    tmp_path: Path, behavior: str
):
    derived = behavior == "derived"
    steps = [ModelStep(output=[function_call("read_secret", {}, call_id="c-1")])]
    if not derived:  # the model answers with text equal to the tool's output
        steps.append(ModelStep(output=[assistant_message("s3cr3t")]))
    agent = Agent(name="vault", tools=[read_secret], output_guardrails=[always_trips],
                  tool_use_behavior=_derived if derived else "run_llm_again",
                  model=ScriptedModel(steps))
    session = SQLiteSession("vault", ":memory:")
    with pytest.raises(OutputGuardrailTripwireTriggered):
        await Recorder(tmp_path).run(agent, "tell me", session=session)
    outputs = [i["output"] for i in await session.get_items()
               if i.get("type") == "function_call_output"]
    assert outputs == (["Output withheld by an output guardrail."] if derived else ["s3cr3t"])
    blocks = [e.body["call_id"] for e, _ in Ledger(tmp_path).entries() if e.kind == "guardrail"]
    assert blocks == (["c-1"] if derived else [])
    assert verify_ledger(Ledger(tmp_path)).violations == []


def _sticky_twins(ran: list[str]) -> tuple[Agent[Any], Agent[Any]]:
    """``first`` hands off to ``second``, both named ``twin``; ``second`` calls its gated
    tool twice."""
    @function_tool(needs_approval=True)
    def operate() -> str:
        """Operate (gated)."""
        ran.append("op")
        return "done op"

    second = Agent(name="twin", tools=[operate], model=ScriptedModel([
        ModelStep(output=[function_call("operate", {}, call_id="o-1")]),
        ModelStep(output=[function_call("operate", {}, call_id="o-2")]),
        ModelStep(output=[assistant_message("finished")]),
    ]))
    first = Agent(name="twin", handoffs=[second], model=ScriptedModel([
        ModelStep(output=[function_call("transfer_to_twin", {}, call_id="h-1")])]))
    return first, second


async def test_a_state_resumed_with_the_agent_that_paused_keeps_its_labels(tmp_path: Path):
    ran: list[str] = []
    first, _ = _sticky_twins(ran)
    recorder = Recorder(tmp_path)
    result = await recorder.run(first, "go")
    state = result.to_state()
    recorder.approve(state, state.get_interruptions()[0], approver="ann", always=True)
    result = await recorder.run(result.last_agent, state)  # the SDK resumes with the state's

    assert result.final_output == "finished" and ran == ["op", "op"]
    agents = {(e.kind, e.body["call_id"]): e.body["agent"] for e, _ in Ledger(tmp_path).entries()
              if e.kind in ("call", "decision", "execution")}
    assert set(agents.values()) == {"twin", "twin#2"}
    assert {agents[k, "o-1"] for k in ("call", "decision", "execution")} == {"twin#2"}
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_two_runs_at_once_label_a_shared_agent_each_by_its_own_graph(tmp_path: Path):
    ran: list[str] = []
    first, second = _sticky_twins(ran)
    other = Agent(name="root", handoffs=[second, first], model=ScriptedModel([
        ModelStep(output=[assistant_message("hello")])]))
    recorder = Recorder(tmp_path)
    state = (await recorder.run(first, "go")).to_state()
    recorder.approve(state, state.get_interruptions()[0], approver="ann", always=True)
    done, _ = await asyncio.gather(recorder.run(first, state), recorder.run(other, "hi"))

    assert done.final_output == "finished" and ran == ["op", "op"]
    assert verify_ledger(Ledger(tmp_path)).violations == []


@pytest.mark.parametrize("kind", ["function", "custom"])
async def test_an_output_persisted_before_a_failing_extractor_is_executed(
    tmp_path: Path, kind: str
):
    """A fresh leg: the SDK writes the tool's output to the session, then the extractor
    fails; no state holds the output, the session write shows it."""
    @function_tool(custom_data_extractor=_boom)
    def write_thing(text: str) -> str:
        """Write; its extractor fails."""
        return f"wrote:{text}"

    native = CustomTool(name="note", description="Take a note", on_invoke_tool=lambda *_: "noted",
                        custom_data_extractor=_boom)
    call = (function_call("write_thing", {"text": "x"}, call_id="w-1") if kind == "function"
            else {"type": "custom_tool_call", "name": "note", "call_id": "w-1", "input": "x"})
    agent = Agent(name="writer", tools=[write_thing, native], model=ScriptedModel([
        ModelStep(output=[call]), ModelStep(output=[assistant_message("done")])]))
    session = SQLiteSession("s", ":memory:")
    with pytest.raises(Exception, match="extractor boom"):
        await Recorder(tmp_path).run(agent, "go", session=session)
    assert str((await session.get_items())[-1].get("type")).endswith("call_output")

    _executed_and_clean(tmp_path, ["w-1"])


async def test_a_shell_policy_decided_per_call_binds_each_execution_to_its_call(
    tmp_path: Path,
):
    ran: list[str] = []

    async def only_the_first(context: Any, action: Any, call_id: str) -> bool:
        return call_id == "s-1"

    agent = _shell_agent(ran, [[_shell_call("s-1", "rm -rf /tmp/x"), _shell_call("s-2", "ls")],
                               [assistant_message("done")]])
    shell = agent.tools[0]
    assert isinstance(shell, ShellTool)
    shell.needs_approval = only_the_first
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "tidy up")).to_state()
    assert ran == ["ls"] and [i.call_id for i in state.get_interruptions()] == ["s-1"]
    recorder.approve(state, state.get_interruptions()[0], approver="ann")
    await recorder.run(agent, state)

    assert ran == ["ls", "rm -rf /tmp/x"]
    found = [(e.kind, e.body) for e, _ in Ledger(tmp_path).entries()]
    assert [b["call_id"] for k, b in found if k == "execution"] == ["s-2", "s-1"]
    assert [(b["call_id"], b["needs_approval"]) for k, b in found if k == "tool_policy"] == [
        ("s-1", True), ("s-2", False)]
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_an_agent_tools_invoker_is_left_to_the_sdk(tmp_path: Path):
    expert = Agent(name="expert", model=ScriptedModel([
        ModelStep(output=[assistant_message("42")])]))
    tool = expert.as_tool(tool_name="ask", tool_description="Ask the expert")
    invoker = tool.on_invoke_tool
    agent = Agent(name="a", tools=[tool], model=ScriptedModel([
        ModelStep(output=[function_call("ask", {"input": "q"}, call_id="c-1")]),
        ModelStep(output=[assistant_message("done")])]))
    assert (await Recorder(tmp_path).run(agent, "go")).final_output == "done"

    assert tool.on_invoke_tool is invoker  # a copy of the tool rebinds the SDK's own
    calls = {e.body["call_id"]: e.body["scope"] for e, _ in Ledger(tmp_path).entries()
             if e.kind == "call"}
    assert calls == {"c-1": []}  # the expert made no call; its run was in the tool's scope
    runs = [e.body["scope"] for e, _ in Ledger(tmp_path).entries() if e.kind == "run_end"]
    assert runs == [[]]


async def test_a_nested_output_published_before_a_failing_extractor_is_executed(
    tmp_path: Path,
):
    ran: list[str] = []

    @function_tool(needs_approval=True, custom_data_extractor=_boom)
    def issue_credit(amount: str) -> str:
        """Credit (gated); its extractor fails after the SDK published the output."""
        ran.append(amount)
        return f"credited {amount}"

    billing = Agent(name="billing", tools=[issue_credit], model=ScriptedModel([
        ModelStep(output=[function_call("issue_credit", {"amount": "5"}, call_id="n-1")]),
        ModelStep(output=[assistant_message("credited")]),
    ]))
    agent = Agent(name="support", tools=[billing.as_tool(
        tool_name="ask_billing", tool_description="Ask billing")], model=ScriptedModel([
            ModelStep(output=[function_call("ask_billing", {"input": "credit 5"},
                                            call_id="c-1")]),
            ModelStep(output=[assistant_message("done")]),
        ]))
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "go")).to_state()
    recorder.approve(state, state.get_interruptions()[0], approver="ann")
    again = await recorder.run(agent, state)  # the SDK pauses on n-1 again: it ran once
    assert [i.call_id for i in again.interruptions] == ["n-1"] and ran == ["5"]
    done = await recorder.run(agent, again.to_state())

    assert done.final_output == "done" and ran == ["5"]
    executions = [(e.body["scope"], e.body["call_id"]) for e, _ in Ledger(tmp_path).entries()
                  if e.kind == "execution"]
    assert executions[0] == (["ask_billing:c-1"], "n-1")
    assert verify_ledger(Ledger(tmp_path)).violations == []


# -- tools with one name in two namespaces --------------------------------------------------


@function_tool(name_override="refund")
def shop_refund(amount: int) -> str:
    """Refund as store credit."""
    return f"credit {amount}"


@function_tool(name_override="refund", needs_approval=True)
def bank_refund(amount: int) -> str:
    """Refund to the bank (gated)."""
    return f"bank {amount}"


def _namespaced(call_id: str, namespace: str) -> Any:
    return function_call("refund", {"amount": 3}, call_id=call_id).model_copy(
        update={"namespace": namespace})


async def test_tools_of_one_name_in_two_namespaces_are_told_apart(tmp_path: Path):
    tools = [*tool_namespace(name="shop", description="Shop", tools=[shop_refund]),
             *tool_namespace(name="bank", description="Bank", tools=[bank_refund])]
    agent = Agent(name="cashier", tools=tools, model=ScriptedModel([
        ModelStep(output=[_namespaced("r-shop", "shop"), _namespaced("r-bank", "bank")]),
        ModelStep(output=[assistant_message("done")]),
    ]))
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "refund")).to_state()
    assert [i.call_id for i in state.get_interruptions()] == ["r-bank"]
    recorder.approve(state, state.get_interruptions()[0], approver="ann", always=True)
    assert (await recorder.run(agent, state)).final_output == "done"

    found = [(e.kind, e.body) for e, _ in Ledger(tmp_path).entries()]
    assert {(b["call_id"], b["tool"], b["needs_approval"]) for k, b in found if k == "call"} == {
        ("r-shop", "shop.refund", False), ("r-bank", "bank.refund", True)}
    assert [(b["call_id"], b["tool"]) for k, b in found if k == "decision"] == [
        ("r-bank", "bank.refund")]
    assert {(b["call_id"], b["tool"]) for k, b in found if k == "execution"} == {
        ("r-shop", "shop.refund"), ("r-bank", "bank.refund")}
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_a_run_without_a_session_is_named_where_session_rules_do_not_apply(
    tmp_path: Path,
):
    await Recorder(tmp_path / "none").run(_agent(), "hi")
    await Recorder(tmp_path / "kept").run(_agent(), "hi", session=SQLiteSession("s", ":memory:"))

    alone = verify_ledger(Ledger(tmp_path / "none"))
    assert alone.violations == []
    assert [n for n in alone.notices if "persisted no session item" in n] == [
        f"1 run(s) executed tools but persisted no session item ({alone_run(tmp_path)}): "
        "tool_linkage and output_provenance do not apply to them (no session, or history "
        "kept by the provider: the calls' response ids link it)"]
    kept = verify_ledger(Ledger(tmp_path / "kept"))
    assert not [n for n in kept.notices if "persisted no session item" in n]


def alone_run(tmp_path: Path) -> str:
    """The first 12 characters of the run id of the ledger ``none``."""
    return next(e.body["run_id"] for e, _ in Ledger(tmp_path / "none").entries())[:12]


async def test_a_call_to_an_unknown_tool_answered_by_the_sdk_is_a_block(tmp_path: Path):
    agent = Agent(name="a", tools=[lookup], model=ScriptedModel([
        ModelStep(output=[function_call("lookp", {"order_id": "o-1"}, call_id="c-1")]),
        ModelStep(output=[assistant_message("done")]),
    ]))
    session = SQLiteSession("s", ":memory:")
    config = RunConfig(tool_not_found_behavior="return_error_to_model")
    result = await Recorder(tmp_path).run(agent, "go", session=session, run_config=config)

    assert result.final_output == "done"
    blocks = [(e.body["call_id"], e.body["guardrail"]) for e, _ in Ledger(tmp_path).entries()
              if e.kind == "guardrail"]
    assert blocks == [("c-1", "openai-agents:tool_not_found")]
    assert verify_ledger(Ledger(tmp_path)).violations == []


@pytest.mark.parametrize(("policy", "gated"), [
    ({"delete_file": "always"}, True),             # keyed by the server's own tool name
    ({"mcp_files__delete_file": "always"}, False),  # the public name: the SDK gates nothing
])
async def test_mcp_tools_named_with_their_server_carry_the_servers_policy(
    tmp_path: Path, policy: dict[str, str], gated: bool
):
    async with MCPServerStdio(name="files", cache_tools_list=True, require_approval=policy,
                              params={"command": sys.executable, "args": [str(MCP_SERVER)]},
                              ) as server:
        agent = Agent(name="f", mcp_servers=[server],
                      mcp_config={"include_server_in_tool_names": True}, model=ScriptedModel([
                          ModelStep(output=[function_call("mcp_files__delete_file",
                                                          {"path": "/x"}, call_id="m-1")]),
                          ModelStep(output=[assistant_message("done")])]))
        recorder = Recorder(tmp_path)
        result = await recorder.run(agent, "go")
        assert bool(result.interruptions) == gated
        if gated:
            state = result.to_state()
            recorder.approve(state, state.get_interruptions()[0], approver="ann")
            result = await recorder.run(agent, state)
    assert result.final_output == "done"
    calls = [e.body["needs_approval"] for e, _ in Ledger(tmp_path).entries() if e.kind == "call"]
    assert calls == [gated]
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_a_function_tool_running_an_agent_tools_agent_runs_it_outside_the_leg(
    tmp_path: Path,
):
    helper = Agent(name="helper", tools=[lookup], model=ScriptedModel([
        ModelStep(output=[function_call("lookup", {"order_id": "o-1"}, call_id="h-1")]),
        ModelStep(output=[assistant_message("helped")])]))

    @function_tool
    async def delegate(ctx: ToolContext[Any], task: str) -> str:
        """Run the helper itself, with this tool's context."""
        return str((await Runner.run(helper, task, context=ctx)).final_output)

    agent = Agent(name="boss", tools=[delegate, helper.as_tool(
        tool_name="ask_helper", tool_description="Ask the helper")], model=ScriptedModel([
            ModelStep(output=[function_call("delegate", {"task": "t"}, call_id="d-1")]),
            ModelStep(output=[assistant_message("done")])]))
    assert (await Recorder(tmp_path).run(agent, "go")).final_output == "done"
    calls = {e.body["call_id"]: e.body["scope"] for e, _ in Ledger(tmp_path).entries()
             if e.kind == "call"}
    assert calls == {"d-1": []}  # the helper's run is the tool's own, not ask_helper's
    assert verify_ledger(Ledger(tmp_path)).violations == []


class Verdict:
    """A hosted MCP approval result that is not a mapping, but reads like one."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


@pytest.mark.parametrize(("verdict", "decisions"), [
    (Verdict(approve=True), [("mcpr-1", "approve")]),  # the SDK reads result["approve"]
    ({"reason": "hmm"}, []),  # the SDK fails reading it: nothing was decided
])
async def test_a_hosted_mcp_callbacks_result_is_read_as_the_sdk_reads_it(
    tmp_path: Path, verdict: Any, decisions: list[tuple[str, str]]
):
    tool = HostedMCPTool(tool_config={
        "type": "mcp", "server_label": "docs", "server_url": "https://example.com",
        "require_approval": "always"}, on_approval_request=lambda request: verdict)
    request = McpApprovalRequest(id="mcpr-1", type="mcp_approval_request", name="lookup",
                                 server_label="docs", arguments='{"q": "x"}')
    ran = McpCall(id="mcp-1", type="mcp_call", name="lookup", server_label="docs",
                  arguments='{"q": "x"}', output="found x", approval_request_id="mcpr-1")
    agent = Agent(name="reader", tools=[tool], model=ScriptedModel([
        ModelStep(output=[request]), ModelStep(output=[ran, assistant_message("done")])]))
    with contextlib.suppress(KeyError):
        await Recorder(tmp_path).run(agent, "look")

    found = [(e.body["call_id"], e.body["decision"]) for e, _ in Ledger(tmp_path).entries()
             if e.kind == "decision"]
    assert found == decisions
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_a_function_shaped_apply_patch_call_carries_its_tools_policy(tmp_path: Path):
    class Editor:
        def update_file(self, operation: Any) -> Any:
            return ApplyPatchResult(status="completed", output="updated")

    patch = {"type": "update_file", "path": "a.txt", "diff": "-a\n+b\n"}
    agent = Agent(name="editor", tools=[ApplyPatchTool(editor=Editor(), needs_approval=True)],
                  model=ScriptedModel([
                      ModelStep(output=[function_call("apply_patch", patch, call_id="p-1")]),
                      ModelStep(output=[assistant_message("done")])]))
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "patch")).to_state()
    recorder.approve(state, state.get_interruptions()[0], approver="ann")
    assert (await recorder.run(agent, state)).final_output == "done"

    calls = [(e.body["tool"], e.body["needs_approval"]) for e, _ in Ledger(tmp_path).entries()
             if e.kind == "call"]
    assert calls == [("apply_patch", True)]
    assert verify_ledger(Ledger(tmp_path)).violations == []
