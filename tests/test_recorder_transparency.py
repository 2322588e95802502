"""The recorder is a guest: a recorded run behaves as the plain SDK run does.

Each test runs the same scripted agent plainly (``Runner``) and through a :class:`Recorder`
and compares what the app can observe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    OutputGuardrailTripwireTriggered,
    Runner,
    SQLiteSession,
    function_tool,
    handoff,
    output_guardrail,
)
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

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
