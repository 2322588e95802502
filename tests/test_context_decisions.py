"""Decisions an app made on the run context, outside the recorder, as the ledger records them
(``ledger/record/integrations/context_decisions.py``): read off the context when the SDK
runs the call or persists its rejection, per owning agent, with approver ``run_context``,
named by ``verify`` in a notice; never in place of a decision the ledger already holds.
What the ledger says without each such decision: ``tests/test_call_kinds.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    HostedMCPTool,
    RunContextWrapper,
    ShellTool,
    SQLiteSession,
    ToolApprovalItem,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    function_tool,
)
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from evidence_ledger import Recorder
from evidence_ledger.storage.ledger_dir import Ledger
from evidence_ledger.verify.audit import verify_ledger

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@function_tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay (gated)."""
    return f"paid {amount}"


SHELL_CALL = {"type": "shell_call", "id": "id-shell", "call_id": "c-shell",
              "status": "in_progress",
              "action": {"type": "exec", "commands": ["ls"], "timeout_ms": 1000}}


def _agent(ran: list[str], *steps: list[Any]) -> Agent[Any]:
    def execute(request: Any) -> str:
        ran.append(request.data.action.commands[0])
        return "listed"

    return Agent(name="operator", tools=[pay, ShellTool(executor=execute, needs_approval=True)],
                 model=ScriptedModel([ModelStep(output=step) for step in steps]))


def _decided_on(approve: bool, *calls: Any) -> tuple[Agent[Any], RunContextWrapper[Any]]:
    """An agent (``_agent``) making ``calls``, then answering, and a run context on which
    each of them is approved (or rejected, with message ``no <call_id>``), as an app does
    outside the recorder."""
    agent = _agent([], list(calls), [assistant_message("done")])
    context: RunContextWrapper[Any] = RunContextWrapper(context=None)
    for call in calls:
        shell = isinstance(call, dict) and call["type"] == "shell_call"
        item = ToolApprovalItem(agent=agent, raw_item=call, tool_name="shell" if shell else None)
        if approve:
            context.approve_tool(item)
        else:
            call_id = call["call_id"] if shell else call.call_id
            context.reject_tool(item, rejection_message=f"no {call_id}")
    return agent, context


def _decisions(ledger: Path) -> dict[str, tuple[str, str]]:
    """call_id -> (decision, approver) of each decision entry."""
    return {e.body["call_id"]: (e.body["decision"], e.body["approver"])
            for e, _ in Ledger(ledger).entries() if e.kind == "decision"}


async def test_approvals_made_on_the_context_before_the_run_are_recorded(tmp_path: Path):
    agent, context = _decided_on(
        True, function_call("pay", {"amount": 3}, call_id="c-pay"), SHELL_CALL)

    result = await Recorder(tmp_path).run(agent, "go", context=context)

    assert result.final_output == "done" and not result.interruptions
    assert _decisions(tmp_path) == {"c-pay": ("approve", "run_context"),
                                    "c-shell": ("approve", "run_context")}
    report = verify_ledger(Ledger(tmp_path))
    assert report.violations == []
    assert any("2 decision(s) read off the run context" in n for n in report.notices)


async def test_an_approval_on_the_state_behind_the_recorders_back_is_the_contexts(
    tmp_path: Path,
):
    ran: list[str] = []
    agent = _agent(ran, [SHELL_CALL], [assistant_message("done")])
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "list")).to_state()
    state.approve(state.get_interruptions()[0])  # not through the recorder

    await recorder.run(agent, state)

    assert ran == ["ls"] and _decisions(tmp_path) == {"c-shell": ("approve", "run_context")}
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_a_recorded_rejection_is_never_covered_by_the_contexts_approval(tmp_path: Path):
    ran: list[str] = []
    agent = _agent(ran, [SHELL_CALL], [assistant_message("done")])
    recorder = Recorder(tmp_path)
    state = (await recorder.run(agent, "list")).to_state()
    item = state.get_interruptions()[0]
    recorder.reject(state, item, approver="ann")
    state.approve(item)  # the app overrides the recorded rejection, behind the recorder

    await recorder.run(agent, state)

    assert ran == ["ls"] and _decisions(tmp_path) == {"c-shell": ("reject", "ann")}
    violations = verify_ledger(Ledger(tmp_path)).violations
    assert {(v.rule, v.call_id) for v in violations} == {("rejection_respected", "c-shell")}


async def test_a_context_approval_of_a_call_id_another_run_decided_is_not_taken(
    tmp_path: Path,
):
    recorder = Recorder(tmp_path)
    first = _agent([], [function_call("pay", {"amount": 1}, call_id="c-pay")],
                   [assistant_message("done")])
    state = (await recorder.run(first, "pay one")).to_state()
    recorder.approve(state, state.get_interruptions()[0], approver="ann")
    await recorder.run(first, state)

    # a second run, whose context holds an approval of that call id: one that could have
    # leaked from the first run, so the ledger does not take it as this run's
    calls = [function_call("pay", {"amount": 999}, call_id="c-pay")]
    second = _agent([], calls, [assistant_message("done")])
    context = RunContextWrapper(context=None)
    context.approve_tool(ToolApprovalItem(agent=second, raw_item=calls[0]))
    await recorder.run(second, "pay again", context=context)

    assert list(_decisions(tmp_path).values()) == [("approve", "ann")]
    violations = verify_ledger(Ledger(tmp_path)).violations
    assert [(v.rule, v.call_id) for v in violations] == [("state_isolation", "c-pay")]
    assert violations[0].detail.startswith("no approval in this run")


async def test_a_call_the_context_does_not_approve_records_no_decision(tmp_path: Path):
    agent = _agent([], [function_call("pay", {"amount": 3}, call_id="c-pay")],
                   [assistant_message("done")])
    context = RunContextWrapper(context=None)
    context.approve_tool(ToolApprovalItem(
        agent=agent, raw_item=function_call("pay", {"amount": 3}, call_id="c-other")))

    result = await Recorder(tmp_path).run(agent, "go", context=context)

    assert [i.call_id for i in result.interruptions] == ["c-pay"]
    assert _decisions(tmp_path) == {}
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_rejections_made_on_the_context_are_recorded_when_persisted(tmp_path: Path):
    agent, context = _decided_on(
        False, function_call("pay", {"amount": 3}, call_id="c-pay"), SHELL_CALL)

    session = SQLiteSession("s", str(tmp_path / "s.db"))
    result = await Recorder(tmp_path / "a").run(agent, "go", context=context, session=session)

    assert result.final_output == "done"
    assert _decisions(tmp_path / "a") == {"c-pay": ("reject", "run_context"),
                                          "c-shell": ("reject", "run_context")}
    assert verify_ledger(Ledger(tmp_path / "a")).violations == []
    # without either rejection its persisted message is unexplained: tests/test_call_kinds.py


async def test_a_rejection_on_the_state_behind_the_recorders_back_is_the_contexts(
    tmp_path: Path,
):
    ran: list[str] = []
    agent = _agent(ran, [SHELL_CALL], [assistant_message("done")])
    recorder = Recorder(tmp_path)
    session = SQLiteSession("s", str(tmp_path / "s.db"))
    state = (await recorder.run(agent, "list", session=session)).to_state()
    state.reject(state.get_interruptions()[0], rejection_message="not now")

    await recorder.run(agent, state, session=session)

    assert ran == [] and _decisions(tmp_path) == {"c-shell": ("reject", "run_context")}
    assert verify_ledger(Ledger(tmp_path)).violations == []


@function_tool(needs_approval=True)
def lookup(order: int) -> str:
    """Look up an order (gated)."""
    return f"order {order}"


def _triage_and_billing(*triage_steps: list[Any]) -> tuple[Agent[Any], Agent[Any]]:
    """Two differently named agents with one gated tool ``lookup`` each: triage calls it
    (``c-t``), then hands off to billing, which calls it (``c-b``)."""
    billing = Agent(name="billing", tools=[lookup], model=ScriptedModel([
        ModelStep(output=[function_call("lookup", {"order": 2}, call_id="c-b")]),
        ModelStep(output=[assistant_message("ok")])]))
    triage = Agent(name="triage", tools=[lookup], handoffs=[billing], model=ScriptedModel(
        [ModelStep(output=step) for step in triage_steps]))
    return triage, billing


async def test_each_agents_own_sticky_context_approval_is_read(tmp_path: Path):
    triage, billing = _triage_and_billing(
        [function_call("lookup", {"order": 1}, call_id="c-t")],
        [function_call("transfer_to_billing", {}, call_id="c-h")])
    context = RunContextWrapper(context=None)
    for agent in (triage, billing):  # lookup approved for good, for each agent
        context.approve_tool(ToolApprovalItem(agent=agent, raw_item=function_call(
            "lookup", {"order": 0}, call_id=f"x-{agent.name}")), always_approve=True)

    await Recorder(tmp_path).run(triage, "go", context=context,
                                 session=SQLiteSession("s", str(tmp_path / "s.db")))

    assert _decisions(tmp_path) == {"c-t": ("approve", "run_context"),
                                    "c-b": ("approve", "run_context")}
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_an_agents_rejection_is_read_past_another_agents_sticky_approval(
    tmp_path: Path,
):
    triage, _ = _triage_and_billing(
        [function_call("lookup", {"order": 1}, call_id="c-t")],
        [function_call("transfer_to_billing", {}, call_id="c-h")])
    recorder, session = Recorder(tmp_path), SQLiteSession("s", str(tmp_path / "s.db"))
    state = (await recorder.run(triage, "go", session=session)).to_state()
    recorder.approve(state, state.get_interruptions()[0], approver="ann", always=True)
    state = (await recorder.run(triage, state, session=session)).to_state()
    state.reject(state.get_interruptions()[0], rejection_message="no")  # billing's c-b

    await recorder.run(triage, state, session=session)

    assert _decisions(tmp_path) == {"c-t": ("approve", "ann"), "c-b": ("reject", "run_context")}
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_another_agents_context_rejection_is_not_read_for_a_blocked_call(
    tmp_path: Path,
):
    @function_tool(name_override="lookup", tool_input_guardrails=[ToolInputGuardrail(
        guardrail_function=lambda data: ToolGuardrailFunctionOutput.reject_content("blocked"))])
    def guarded_lookup(order: int) -> str:
        """Look up an order (not gated; its guardrail blocks every call)."""
        return f"order {order}"

    billing = Agent(name="billing", tools=[guarded_lookup], model=ScriptedModel([
        ModelStep(output=[function_call("lookup", {"order": 2}, call_id="c-b")]),
        ModelStep(output=[assistant_message("ok")])]))
    triage = Agent(name="triage", tools=[lookup], handoffs=[billing], model=ScriptedModel([
        ModelStep(output=[function_call("transfer_to_billing", {}, call_id="c-h")])]))
    context = RunContextWrapper(context=None)  # triage may never look up
    context.reject_tool(ToolApprovalItem(agent=triage, raw_item=function_call(
        "lookup", {"order": 0}, call_id="x")), always_reject=True)

    await Recorder(tmp_path).run(triage, "go", context=context,
                                 session=SQLiteSession("s", str(tmp_path / "s.db")))

    assert _decisions(tmp_path) == {}  # billing's call was blocked, not rejected
    assert verify_ledger(Ledger(tmp_path)).violations == []


async def test_a_hosted_mcp_approval_on_the_state_is_read_off_its_response_item(
    tmp_path: Path,
):
    agent = Agent(name="op", tools=[HostedMCPTool(tool_config={
        "type": "mcp", "server_label": "docs", "server_url": "https://example.com",
        "require_approval": "always"})], model=ScriptedModel([
            ModelStep(output=[{"type": "mcp_approval_request", "id": "k", "name": "lookup",
                               "server_label": "docs", "arguments": "{}"}]),
            ModelStep(output=[{"type": "mcp_call", "id": "m", "name": "lookup",
                               "server_label": "docs", "arguments": "{}", "output": "found",
                               "approval_request_id": "k"}, assistant_message("done")])]))
    recorder, session = Recorder(tmp_path), SQLiteSession("s", str(tmp_path / "s.db"))
    state = (await recorder.run(agent, "go", session=session)).to_state()
    state.approve(state.get_interruptions()[0])  # not through the recorder

    await recorder.run(agent, state, session=session)

    assert _decisions(tmp_path) == {"k": ("approve", "run_context")}
    assert verify_ledger(Ledger(tmp_path)).violations == []
