"""The openai-agents recorder on the installed SDK: what it records, and that it verifies."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import (
    Agent,
    AgentHooks,
    RunHooks,
    Runner,
    RunState,
    SQLiteSession,
    ToolGuardrailFunctionOutput,
    ToolOutputText,
    function_tool,
    handoff,
    tool_input_guardrail,
    tool_output_guardrail,
)
from agents.exceptions import ToolOutputGuardrailTripwireTriggered
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.version import __version__ as SDK_VERSION

from evidence_ledger.format.entries import Entry
from evidence_ledger.record.integrations.hooks import IGNORED_HANDOFF
from evidence_ledger.record.integrations.openai_agents import Recorder
from evidence_ledger.record.integrations.recorded_session import recorded_session
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEFAULT_REJECTION = b"Tool execution was not approved."


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def entries(directory: Path) -> list[Entry]:
    return [entry for entry, _ in Ledger(directory).entries()]


def of_kind(found: list[Entry], kind: str) -> list[dict[str, Any]]:
    return [e.body for e in found if e.kind == kind]


def assert_verifies(directory: Path) -> None:
    assert verify_ledger(Ledger(directory)).violations == []


def scripted(*steps: list[Any]) -> ScriptedModel:
    return ScriptedModel([ModelStep(output=step) for step in steps])


# -- the approval-flow example ---------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_approval_flow_records_every_step(tmp_path: Path, streamed: bool) -> None:
    await load_example("approval_flow").main(str(tmp_path), streamed=streamed)
    found = entries(tmp_path)

    assert {e.body["run_id"] for e in found} == {of_kind(found, "run_end")[0]["run_id"]}
    assert [b["status"] for b in of_kind(found, "run_end")] == ["interrupted", "completed"]

    calls = {b["call_id"]: b for b in of_kind(found, "call")}
    assert {(tuple(b["scope"]), c, b["tool"], b["needs_approval"]) for c, b in calls.items()} == {
        ((), "c-lookup", "lookup_order", False),
        ((), "c-refund-1", "refund", True),
        ((), "c-email", "send_email", True),
        ((), "c-billing", "ask_billing", False),
        (("ask_billing:c-billing",), "c-credit", "issue_credit", True),
        ((), "c-refund-2", "refund", True),
    }

    decisions = {b["call_id"]: b for b in of_kind(found, "decision")}
    assert {c: (b["decision"], b["always"], b["approver"]) for c, b in decisions.items()} == {
        "c-refund-1": ("approve", True, "alice"),
        "c-email": ("reject", False, "alice"),
        "c-credit": ("approve", False, "bob"),
    }
    assert decisions["c-credit"]["scope"] == ["ask_billing:c-billing"]
    for call_id, decision in decisions.items():
        assert decision["args_digest"] == calls[call_id]["args_digest"]
    # no message given: the SDK picks it (its default here), the decision records none
    assert decisions["c-email"]["message_digest"] is None
    [email_output] = [b for b in of_kind(found, "session_item")
                      if b["call_id"] == "c-email" and b["item_type"] == "function_call_output"]
    assert email_output["output_digest"] == hashlib.sha256(DEFAULT_REJECTION).digest()

    executions = {b["call_id"]: b for b in of_kind(found, "execution")}
    assert set(executions) == {"c-lookup", "c-refund-1", "c-billing", "c-credit", "c-refund-2"}
    assert executions["c-credit"]["scope"] == ["ask_billing:c-billing"]
    for call_id, execution in executions.items():
        assert execution["args_digest"] == calls[call_id]["args_digest"]

    seqs = {(e.kind, e.body.get("call_id"), e.body.get("status")): e.seq for e in found}
    paused = seqs[("run_end", None, "interrupted")]
    assert paused < seqs[("decision", "c-refund-1", None)] < seqs[("execution", "c-refund-1", None)]
    assert paused < seqs[("decision", "c-credit", None)] < seqs[("execution", "c-credit", None)]

    session = of_kind(found, "session_item")
    assert {b["session_id"] for b in session} == {"support-4711"}
    outputs = {b["call_id"]: b for b in session if b["item_type"] == "function_call_output"}
    assert set(outputs) == {"c-lookup", "c-refund-1", "c-email", "c-billing", "c-refund-2"}
    for call_id, output in outputs.items():
        source = hashlib.sha256(DEFAULT_REJECTION).digest() if call_id == "c-email" else (
            executions[call_id]["result_digest"])
        assert output["output_digest"] == source, call_id
    persisted_calls = [b["call_id"] for b in session if b["item_type"] == "function_call"]
    assert sorted(persisted_calls) == sorted(outputs)
    assert_verifies(tmp_path)


async def test_run_id_survives_the_run_state_json_round_trip(tmp_path: Path) -> None:
    flow = load_example("approval_flow")
    agent = flow.build_agent()
    paused = await Recorder(tmp_path).run(agent, "refund please")
    made = paused.to_state()
    text = json.dumps(made.to_json())
    plain = await Runner.run(flow.build_agent(), "refund please")
    run_id = of_kind(entries(tmp_path), "run_end")[0]["run_id"]
    [to_state] = of_kind(entries(tmp_path), "run_state")

    # the JSON is the SDK's own: nothing of the recorder's in it
    assert json.loads(text)["context"]["context"] is None  # the run had no context
    assert "evidence_ledger" not in text
    assert json.loads(text).keys() == plain.to_state().to_json().keys()
    state = await RunState.from_json(flow.build_agent(), json.loads(text))
    item = state.get_interruptions()[0]
    Recorder(tmp_path).approve(state, item, approver="ann")  # as in another process
    loaded = of_kind(entries(tmp_path), "run_state")[1]
    [decision] = of_kind(entries(tmp_path), "decision")
    assert (loaded["event"], loaded["run_id"], loaded["parent"]) == (
        "loaded", run_id, to_state["state_id"])
    assert (decision["run_id"], decision["run_state"]) == (run_id, loaded["state_id"])


# -- the orphan-output case ----------------------------------------------------------


@pytest.mark.skipif(
    tuple(map(int, SDK_VERSION.split(".")[:2])) < (0, 24),
    reason="openai-agents 0.22 - 0.23 drop the function_call (see test_release_matrix.py)",
)
async def test_orphan_case_records_clean_on_fixed_sdk(tmp_path: Path) -> None:
    items = await load_example("orphan_output_on_resume").main(str(tmp_path))

    assert [(i.get("type"), i.get("call_id")) for i in items if "call_id" in i] == [
        ("function_call", "c-lookup"), ("function_call_output", "c-lookup"),
        ("function_call", "c-update"), ("function_call_output", "c-update"),
    ]
    decision = of_kind(entries(tmp_path), "decision")
    assert [(b["call_id"], b["decision"]) for b in decision] == [("c-update", "approve")]
    assert_verifies(tmp_path)


# -- hooks, outputs, policies, guardrails ------------------------------------------------


class UserHooks(AgentHooks[Any]):
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_start(self, context: Any, agent: Any) -> None:
        self.seen.append(f"start {agent.name}")

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self.seen.append(f"llm_end {agent.name}")

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self.seen.append(f"tool_start {tool.name}")

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        self.seen.append(f"tool_end {tool.name}={result}")

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        self.seen.append(f"end {agent.name}")


@function_tool
def echo(text: str) -> str:
    """Echo."""
    return text


async def test_hooks_the_user_set_still_fire(tmp_path: Path) -> None:
    inner_hooks, outer_hooks = UserHooks(), UserHooks()
    inner = Agent(
        name="inner", tools=[echo], hooks=inner_hooks,
        model=scripted([function_call("echo", {"text": "hi"}, call_id="c-echo")],
                       [assistant_message("inner done")]),
    )
    outer = Agent(
        name="outer", hooks=outer_hooks,
        tools=[inner.as_tool(tool_name="ask_inner", tool_description="Ask inner.")],
        model=scripted([function_call("ask_inner", {"input": "x"}, call_id="c-ask")],
                       [assistant_message("outer done")]),
    )
    result = await Recorder(tmp_path).run(outer, "go")

    assert result.final_output == "outer done"
    assert inner_hooks.seen == [
        "start inner", "llm_end inner", "tool_start echo", "tool_end echo=hi",
        "llm_end inner", "end inner",
    ]
    assert outer_hooks.seen == [
        "start outer", "llm_end outer", "tool_start ask_inner", "tool_end ask_inner=inner done",
        "llm_end outer", "end outer",
    ]
    executions = {b["call_id"]: b["scope"] for b in of_kind(entries(tmp_path), "execution")}
    assert executions == {"c-echo": ["ask_inner:c-ask"], "c-ask": []}
    assert_verifies(tmp_path)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_a_handoff_is_recorded_as_its_call_and_execution(
    tmp_path: Path, streamed: bool
) -> None:
    billing = Agent(name="billing", model=scripted([assistant_message("billing here")]))
    legal = Agent(name="legal", model=scripted([assistant_message("legal here")]))
    triage = Agent(
        name="triage", handoffs=[handoff(legal, tool_name_override="escalate"), billing],
        model=scripted([function_call("transfer_to_billing", {}, call_id="c-ho")]),
    )
    session = SQLiteSession("handoff", ":memory:")
    recorder = Recorder(tmp_path)
    if streamed:
        result: Any = recorder.run_streamed(triage, "help", session=session)
        async for _ in result.stream_events():
            pass
    else:
        result = await recorder.run(triage, "help", session=session)
    assert result.final_output == "billing here"

    found = entries(tmp_path)
    (execution,) = of_kind(found, "execution")
    (call,) = of_kind(found, "call")
    assert (execution["call_id"], execution["tool"], execution["agent"]) == (
        "c-ho", "transfer_to_billing", "triage")
    assert execution["args_digest"] == call["args_digest"]
    (output,) = [i["output"] for i in await session.get_items()
                 if i.get("type") == "function_call_output"]
    assert execution["result_digest"] == hashlib.sha256(output.encode()).digest()
    assert_verifies(tmp_path)  # before: output_provenance on the transfer message


async def test_the_extra_handoffs_the_sdk_ignores_are_recorded_as_blocked(
    tmp_path: Path,
) -> None:
    billing = Agent(name="billing", model=scripted([assistant_message("billing here")]))
    legal = Agent(name="legal", model=scripted([assistant_message("legal here")]))
    triage = Agent(
        name="triage", handoffs=[billing, legal],
        model=scripted([function_call("transfer_to_billing", {}, call_id="c-1"),
                        function_call("transfer_to_legal", {}, call_id="c-2")]),
    )
    session = SQLiteSession("handoffs", ":memory:")
    result = await Recorder(tmp_path).run(triage, "help", session=session)
    assert result.final_output == "billing here"

    found = entries(tmp_path)
    assert [b["call_id"] for b in of_kind(found, "execution")] == ["c-1"]
    (block,) = of_kind(found, "guardrail")
    assert (block["call_id"], block["guardrail"], block["agent"], block["tool"]) == (
        "c-2", IGNORED_HANDOFF, "triage", "transfer_to_legal")
    outputs = {i["call_id"]: i["output"] for i in await session.get_items()
               if i.get("type") == "function_call_output"}
    assert block["message_digest"] == hashlib.sha256(outputs["c-2"].encode()).digest()
    assert_verifies(tmp_path)  # before: output_provenance on the ignored handoff's output


def _output_guardrail(behavior: str) -> Any:
    @tool_output_guardrail
    def no_secrets(data: Any) -> ToolGuardrailFunctionOutput:
        if "secret" not in str(data.output):
            return ToolGuardrailFunctionOutput.allow()
        if behavior == "reject":
            return ToolGuardrailFunctionOutput.reject_content("[withheld]")
        if behavior == "crash":
            raise RuntimeError("guardrail down")
        return ToolGuardrailFunctionOutput.raise_exception()

    return no_secrets


@pytest.mark.parametrize("behavior", ["reject", "raise"])
async def test_a_tool_output_guardrail_block_keeps_what_the_tool_returned(
    tmp_path: Path, behavior: str
) -> None:
    @function_tool(tool_output_guardrails=[_output_guardrail(behavior)])
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"secret for {key}" if key == "k1" else f"plain {key}"

    agent = Agent(
        name="vault", tools=[lookup],
        model=scripted([function_call("lookup", {"key": "k1"}, call_id="c-1"),
                        function_call("lookup", {"key": "k2"}, call_id="c-2")],
                       [assistant_message("done")]),
    )
    session = SQLiteSession("vault", ":memory:")
    recorder = Recorder(tmp_path)
    if behavior == "reject":
        await recorder.run(agent, "look", session=session)
    else:
        with pytest.raises(ToolOutputGuardrailTripwireTriggered):
            await recorder.run(agent, "look", session=session)

    found = entries(tmp_path)
    results = {b["call_id"]: b["result_digest"] for b in of_kind(found, "execution")}
    if behavior == "raise" and "c-2" not in results:  # the SDK may stop c-2 before it ran
        results["c-2"] = hashlib.sha256(b"plain k2").digest()
    assert results == {"c-1": hashlib.sha256(b"secret for k1").digest(),
                       "c-2": hashlib.sha256(b"plain k2").digest()}
    (block,) = of_kind(found, "guardrail")
    assert (block["call_id"], block["guardrail"], block["tool"]) == ("c-1", "no_secrets", "lookup")
    if behavior == "reject":
        assert block["message_digest"] == hashlib.sha256(b"[withheld]").digest()
        outputs = {i["call_id"]: i["output"] for i in await session.get_items()
                   if i.get("type") == "function_call_output"}
        assert outputs["c-1"] == "[withheld]"
    else:
        assert block["message_digest"] is None
        assert [b["status"] for b in of_kind(found, "run_end")] == ["failed"]
    assert_verifies(tmp_path)


async def test_a_crashing_output_guardrail_still_records_what_the_tool_returned(
    tmp_path: Path,
) -> None:
    @function_tool(tool_output_guardrails=[_output_guardrail("crash")])
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"secret for {key}"

    agent = Agent(name="vault", tools=[lookup], model=scripted(
        [function_call("lookup", {"key": "k1"}, call_id="c-1")], [assistant_message("done")]))
    with pytest.raises(Exception, match="guardrail down"):  # the SDK wraps it (UserError)
        await Recorder(tmp_path).run(agent, "look")

    found = entries(tmp_path)
    assert [(b["call_id"], b["result_digest"]) for b in of_kind(found, "execution")] == [
        ("c-1", hashlib.sha256(b"secret for k1").digest())]  # before: none, though it ran
    assert of_kind(found, "guardrail") == []
    assert [b["status"] for b in of_kind(found, "run_end")] == ["failed"]


async def test_output_guardrails_stay_the_users_objects_and_name_the_tool_that_ran(
    tmp_path: Path,
) -> None:
    guardrail = _output_guardrail("raise")

    @function_tool(tool_output_guardrails=[guardrail])
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"secret for {key}"

    first = Agent(name="vault", tools=[lookup], model=scripted(
        [function_call("lookup", {"key": "k1"}, call_id="c-1")]))
    recorder = Recorder(tmp_path)
    with pytest.raises(ToolOutputGuardrailTripwireTriggered) as raised:
        await recorder.run(first, "look")
    assert raised.value.guardrail is guardrail  # the SDK reports the user's own guardrail

    # the attached tool, copied and renamed, then rebuilt with dataclasses.replace
    renamed = copy.copy(lookup)
    renamed.name = "lookup_eu"
    rebuilt = dataclasses.replace(lookup, name="lookup_us")
    for call_id, tool in (("c-2", renamed), ("c-3", rebuilt)):
        agent = Agent(name="vault", tools=[tool], model=scripted(
            [function_call(tool.name, {"key": "k1"}, call_id=call_id)]))
        with pytest.raises(ToolOutputGuardrailTripwireTriggered):
            await recorder.run(agent, "look")

    found = entries(tmp_path)
    assert [(b["call_id"], b["tool"]) for b in of_kind(found, "execution")] == [
        ("c-1", "lookup"), ("c-2", "lookup_eu"), ("c-3", "lookup_us")]
    assert [(b["call_id"], b["tool"]) for b in of_kind(found, "guardrail")] == [
        ("c-1", "lookup"), ("c-2", "lookup_eu"), ("c-3", "lookup_us")]  # each once
    assert_verifies(tmp_path)


async def test_a_guardrail_shared_with_an_unrecorded_agent_still_works_there(
    tmp_path: Path,
) -> None:
    guardrail = _output_guardrail("reject")

    def agent_with_lookup(call_id: str) -> Agent[Any]:
        @function_tool(tool_output_guardrails=[guardrail])
        def lookup(key: str) -> str:
            """Look a key up."""
            return f"secret for {key}"

        return Agent(name="vault", tools=[lookup], model=scripted(
            [function_call("lookup", {"key": "k1"}, call_id=call_id)], [assistant_message("ok")]))

    await Recorder(tmp_path).run(agent_with_lookup("c-1"), "look")  # wraps the guardrail
    plain = await Runner.run(agent_with_lookup("c-2"), "look")  # an agent never attached
    assert plain.final_output == "ok"
    assert [b["call_id"] for b in of_kind(entries(tmp_path), "guardrail")] == ["c-1"]


async def test_a_clone_of_an_attached_agent_records_each_call_once(tmp_path: Path) -> None:
    agent = Agent(name="echoer", tools=[echo], model=scripted(
        [function_call("echo", {"text": "a"}, call_id="c-1")], [assistant_message("ok")]))
    recorder = Recorder(tmp_path)
    await recorder.run(agent, "first")  # attaches it
    twin = agent.clone(model=scripted(
        [function_call("echo", {"text": "b"}, call_id="c-2")], [assistant_message("ok")]))
    await recorder.run(twin, "second")

    found = entries(tmp_path)
    assert [b["call_id"] for b in of_kind(found, "call")] == ["c-1", "c-2"]
    assert [b["call_id"] for b in of_kind(found, "execution")] == ["c-1", "c-2"]
    assert_verifies(tmp_path)  # before: every call and execution twice, exactly_once


async def test_agents_keep_their_hooks_and_run_hooks_still_fire(tmp_path: Path) -> None:
    seen: list[str] = []

    class Seen(RunHooks[Any]):
        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            seen.append(f"run:{result}")

    mine = AgentHooks[Any]()
    agent = Agent(name="echoer", tools=[echo], hooks=mine, model=scripted(
        [function_call("echo", {"text": "a"}, call_id="c-1")], [assistant_message("ok")]))
    plain = Agent(name="bare", model=scripted([assistant_message("ok")]))
    recorder = Recorder(tmp_path)
    await recorder.run(agent, "first", hooks=Seen())
    await recorder.run(plain, "first")

    assert agent.hooks is mine and plain.hooks is None  # RunState identifies agents by them
    assert seen == ["run:a"]
    assert [b["call_id"] for b in of_kind(entries(tmp_path), "execution")] == ["c-1"]
    assert_verifies(tmp_path)


async def test_a_tool_with_a_policy_shared_with_an_unrecorded_agent_works_there(
    tmp_path: Path,
) -> None:
    @function_tool(needs_approval=lambda _ctx, _params, _call_id: False)
    def lookup(key: str) -> str:
        """Look a key up (a callable policy)."""
        return f"value of {key}"

    recorded = Agent(name="a", tools=[lookup], model=scripted(
        [function_call("lookup", {"key": "k1"}, call_id="c-1")], [assistant_message("ok")]))
    await Recorder(tmp_path).run(recorded, "go")  # wraps the tool's policy
    plain = Agent(name="b", tools=[lookup], model=scripted(
        [function_call("lookup", {"key": "k2"}, call_id="c-2")], [assistant_message("ok")]))
    assert (await Runner.run(plain, "go")).final_output == "ok"  # before: UsageError
    assert [b["call_id"] for b in of_kind(entries(tmp_path), "tool_policy")] == ["c-1"]


async def test_a_guardrail_added_after_the_first_run_is_recorded(tmp_path: Path) -> None:
    @function_tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"secret for {key}"

    agent = Agent(name="vault", tools=[lookup], model=scripted(
        [function_call("lookup", {"key": "k1"}, call_id="c-1")], [assistant_message("ok")],
        [function_call("lookup", {"key": "k2"}, call_id="c-2")], [assistant_message("ok")]))
    recorder = Recorder(tmp_path)
    await recorder.run(agent, "first")
    lookup.tool_output_guardrails = [_output_guardrail("reject")]
    await recorder.run(agent, "second")

    found = entries(tmp_path)
    assert [b["call_id"] for b in of_kind(found, "guardrail")] == ["c-2"]
    assert [b["result_digest"] for b in of_kind(found, "execution")][1] == hashlib.sha256(
        b"secret for k2").digest()
    assert_verifies(tmp_path)


async def test_a_shared_guardrail_records_nothing_for_an_unrecorded_agent_inside_a_leg(
    tmp_path: Path,
) -> None:
    guardrail = _output_guardrail("reject")

    @function_tool(tool_output_guardrails=[guardrail])
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"secret for {key}"

    @function_tool(tool_output_guardrails=[guardrail])
    def helper_lookup(key: str) -> str:
        """Look a key up, for the helper."""
        return f"secret for {key}"

    helper = Agent(name="helper", tools=[helper_lookup], model=scripted(
        [function_call("helper_lookup", {"key": "k9"}, call_id="c-9")], [assistant_message("hm")]))

    @function_tool
    async def ask_helper(question: str) -> str:
        """Ask a helper agent (run without the recorder)."""
        return str((await Runner.run(helper, question)).final_output)

    top = Agent(name="top", tools=[ask_helper, lookup], model=scripted(
        [function_call("ask_helper", {"question": "k9?"}, call_id="c-1")],
        [assistant_message("done")]))
    await Recorder(tmp_path).run(top, "go")

    found = entries(tmp_path)
    assert {e.body.get("call_id") for e in found} - {None} == {"c-1"}
    assert_verifies(tmp_path)  # before: an execution and a block of c-9, never called


async def test_the_first_handoff_of_a_response_is_the_one_that_ran(tmp_path: Path) -> None:
    billing = Agent(name="billing", model=scripted([assistant_message("billing here")]))
    triage = Agent(
        name="triage", handoffs=[billing, handoff(billing, tool_name_override="escalate")],
        model=scripted([function_call("escalate", {}, call_id="c-1"),
                        function_call("transfer_to_billing", {}, call_id="c-2")]),
    )
    session = SQLiteSession("same-target", ":memory:")
    await Recorder(tmp_path).run(triage, "help", session=session)

    found = entries(tmp_path)
    assert [(b["call_id"], b["tool"]) for b in of_kind(found, "execution")] == [
        ("c-1", "escalate")]
    assert [(b["call_id"], b["guardrail"]) for b in of_kind(found, "guardrail")] == [
        ("c-2", IGNORED_HANDOFF)]
    assert_verifies(tmp_path)


@pytest.mark.parametrize("via_json", [False, True], ids=["to_state", "from_json"])
async def test_handoffs_performed_in_a_resumed_leg_are_recorded(
    tmp_path: Path, via_json: bool
) -> None:
    @function_tool(needs_approval=True)
    def refund(order: str) -> str:
        """Refund an order (gated)."""
        return f"refunded {order}"

    billing = Agent(name="billing", model=scripted([assistant_message("billing here")]))
    legal = Agent(name="legal", model=scripted([assistant_message("legal here")]))
    triage = Agent(
        name="triage", tools=[refund], handoffs=[billing, legal],
        model=scripted([function_call("refund", {"order": "o1"}, call_id="c-refund"),
                        function_call("transfer_to_billing", {}, call_id="c-ho"),
                        function_call("transfer_to_legal", {}, call_id="c-ho2")]),
    )
    session = SQLiteSession("resumed-handoff", ":memory:")
    recorder = Recorder(tmp_path)
    paused = await recorder.run(triage, "refund, then billing", session=session)
    state = paused.to_state()
    if via_json:
        state = await RunState.from_json(triage, json.loads(json.dumps(state.to_json())))
    for item in state.get_interruptions():
        recorder.approve(state, item, approver="alice")
    result = await recorder.run(triage, state, session=session)
    assert result.final_output == "billing here"

    found = entries(tmp_path)
    assert [b["call_id"] for b in of_kind(found, "execution")] == ["c-refund", "c-ho"]
    assert [(b["call_id"], b["guardrail"]) for b in of_kind(found, "guardrail")] == [
        ("c-ho2", IGNORED_HANDOFF)]
    assert_verifies(tmp_path)  # before: output_provenance on c-ho and c-ho2


@function_tool
def as_dict(key: str) -> dict[str, Any]:
    """A dict result (the SDK persists its str())."""
    return {"key": key, "n": [1, 2]}


@function_tool
def as_parts(key: str) -> list[ToolOutputText]:
    """A structured result (the SDK persists a list of content parts)."""
    return [ToolOutputText(text=f"part {key}")]


async def test_execution_results_are_digested_like_persisted_outputs(tmp_path: Path) -> None:
    agent = Agent(
        name="shapes", tools=[as_dict, as_parts],
        model=scripted(
            [function_call("as_dict", {"key": "a"}, call_id="c-dict"),
             function_call("as_parts", {"key": "b"}, call_id="c-parts")],
            [assistant_message("done")],
        ),
    )
    session = SQLiteSession("shapes", ":memory:")
    await Recorder(tmp_path).run(agent, "go", session=session)

    found = entries(tmp_path)
    results = {b["call_id"]: b["result_digest"] for b in of_kind(found, "execution")}
    outputs = {b["call_id"]: b["output_digest"] for b in of_kind(found, "session_item")
               if b["item_type"] == "function_call_output"}
    assert results == outputs
    persisted = {i["call_id"]: i["output"] for i in await session.get_items()
                 if i.get("type") == "function_call_output"}
    assert persisted["c-dict"] == "{'key': 'a', 'n': [1, 2]}"
    assert isinstance(persisted["c-parts"], list)
    assert_verifies(tmp_path)


async def test_callable_needs_approval_is_recorded_per_call(tmp_path: Path) -> None:
    def large(context: Any, params: dict[str, Any], call_id: str) -> bool:
        return int(params["amount"]) > 100

    @function_tool(needs_approval=large)
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    agent = Agent(
        name="payer", tools=[pay],
        model=scripted(
            [function_call("pay", {"amount": 5}, call_id="c-small"),
             function_call("pay", {"amount": 500}, call_id="c-large")],
            [assistant_message("done")],
        ),
    )
    recorder = Recorder(tmp_path)
    paused = await recorder.run(agent, "pay")
    state = paused.to_state()
    [pending] = state.get_interruptions()
    recorder.approve(state, pending, approver="carol")
    await recorder.run(agent, state)

    found = entries(tmp_path)
    assert {b["call_id"]: b["needs_approval"] for b in of_kind(found, "call")} == {
        "c-small": None, "c-large": None,
    }
    policies = of_kind(found, "tool_policy")
    assert {(b["call_id"], b["needs_approval"], b["policy"]) for b in policies} == {
        ("c-small", False, "callable"), ("c-large", True, "callable"),
    }
    assert {b["call_id"] for b in of_kind(found, "execution")} == {"c-small", "c-large"}
    assert_verifies(tmp_path)


async def test_tool_input_guardrail_block_and_custom_rejection(tmp_path: Path) -> None:
    @tool_input_guardrail
    def no_root(data: Any) -> ToolGuardrailFunctionOutput:
        if "root" in data.context.tool_arguments:
            return ToolGuardrailFunctionOutput.reject_content("root is off limits")
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(tool_input_guardrails=[no_root])
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    @function_tool(needs_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file (gated)."""
        return f"deleted {path}"

    agent = Agent(
        name="files", tools=[read_file, delete_file],
        model=scripted(
            [function_call("read_file", {"path": "/root/x"}, call_id="c-read"),
             function_call("delete_file", {"path": "/tmp/y"}, call_id="c-del")],
            [assistant_message("done")],
        ),
    )
    session = SQLiteSession("files", ":memory:")
    recorder = Recorder(tmp_path)
    paused = await recorder.run(agent, "clean up", session=session)
    state = paused.to_state()
    recorder.reject(state, paused.interruptions[0], approver="dan", message="not today")
    await recorder.run(agent, state, session=session)

    found = entries(tmp_path)
    assert of_kind(found, "execution") == []
    [block] = of_kind(found, "guardrail")
    assert (block["call_id"], block["guardrail"]) == ("c-read", "no_root")
    outputs = {b["call_id"]: b["output_digest"] for b in of_kind(found, "session_item")
               if b["item_type"] == "function_call_output"}
    assert outputs["c-read"] == block["message_digest"] == hashlib.sha256(
        b"root is off limits").digest()
    [decision] = of_kind(found, "decision")
    assert outputs["c-del"] == decision["message_digest"] == hashlib.sha256(b"not today").digest()
    assert_verifies(tmp_path)


# -- sessions, failures, misuse ----------------------------------------------------------


async def test_session_removals_are_recorded(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path)
    session = recorded_session(recorder.writer, SQLiteSession("edit", ":memory:"))
    await session.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    popped = await session.pop_item()
    await session.clear_session()

    assert popped == {"role": "user", "content": "b"}
    assert await session.get_items() == []
    items = of_kind(entries(tmp_path), "session_item")
    assert [(b["run_id"], b["op"], b["item_type"]) for b in items] == [
        ("", "add", "message"), ("", "add", "message"), ("", "pop", "message"), ("", "clear", None),
    ]


async def test_a_failing_run_ends_failed(tmp_path: Path) -> None:
    agent = Agent(name="broken", model=ScriptedModel([ModelStep(error=RuntimeError("down"))]))
    with pytest.raises(RuntimeError, match="down"):
        await Recorder(tmp_path).run(agent, "go")
    assert [b["status"] for b in of_kind(entries(tmp_path), "run_end")] == ["failed"]


async def test_an_approval_of_a_call_not_pending_is_recorded_as_the_sdk_takes_it(
    tmp_path: Path,
) -> None:
    recorder = Recorder(tmp_path)
    gated = function_tool(needs_approval=True)(lambda: "ok")
    gated_agent = Agent(name="g", tools=[gated], model=scripted(
        [function_call(gated.name, {}, call_id="c-1")], [assistant_message("done")]))
    state = (await recorder.run(gated_agent, "go")).to_state()
    [pending] = state.get_interruptions()
    stranger = pending.__class__(agent=pending.agent, raw_item=function_call(
        gated.name, {}, call_id="c-unknown"))
    recorder.approve(state, stranger, approver="eve")  # the SDK takes it: so does the recorder

    found = entries(tmp_path)
    [call] = [b for b in of_kind(found, "call") if b["call_id"] == "c-unknown"]
    [decision] = of_kind(found, "decision")
    assert (call["needs_approval"], decision["call_id"]) == (None, "c-unknown")
    assert state._context is not None and state._context.is_tool_approved(
        gated.name, "c-unknown")
