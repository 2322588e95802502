"""An approval flow recorded into an evidence ledger (offline: scripted models, no API key).

A support agent answers a refund request. Its first model turn calls, at once:

    lookup_order   c-lookup    ungated: runs at once
    refund         c-refund-1  gated: approved with always=True (sticky for this run)
    send_email     c-email     gated: rejected (the SDK's default rejection text is persisted)
    ask_billing    c-billing   agent-as-tool; the billing agent calls
      issue_credit c-credit    gated, nested (scope ["ask_billing:c-billing"]): approved

The run pauses on the three approvals. Its state goes through ``to_json()`` -> JSON text ->
``RunState.from_json()``, as if parked in a store, and a new :class:`Recorder` (as in another
process) records the decisions and resumes the run. On resume the agent calls
``refund`` again (c-refund-2), which the sticky approval lets through, then answers.
The conversation is kept in a file-backed ``SQLiteSession`` that the recorder wraps.

Run:  python examples/approval_flow.py --ledger DIR [--streamed] [--durability entry]
Then: evidence-ledger verify --ledger DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import Agent, RunState, SQLiteSession, function_tool
from agents.testing import (
    ModelStep,
    ScriptedModel,
    assistant_message,
    function_call,
)

from evidence_ledger import Recorder

SESSION_ID = "support-4711"


@function_tool
def lookup_order(order_id: str) -> str:
    """Read an order."""
    return f"order {order_id}: 2 items, 59.90 EUR, delivered"


@function_tool(needs_approval=True)
def refund(order_id: str, amount: str) -> str:
    """Refund part of an order (gated)."""
    return f"refunded {amount} on {order_id}"


@function_tool(needs_approval=True)
def send_email(to: str, body: str) -> str:
    """Email a customer (gated)."""
    return f"sent to {to}"


@function_tool(needs_approval=True)
def issue_credit(account: str, amount: str) -> str:
    """Credit a customer account (gated)."""
    return f"credited {amount} to {account}"


def build_agent() -> Agent[Any]:
    """The support agent, with the billing agent as its tool ``ask_billing``."""
    billing = Agent(
        name="billing",
        instructions="Handle account credits.",
        model=ScriptedModel([
            ModelStep(
                output=[function_call("issue_credit", {"account": "acct-9", "amount": "5.00"},
                                      call_id="c-credit")],
                response_id="resp-billing-1",
            ),
            ModelStep(output=[assistant_message("credit issued")], response_id="resp-billing-2"),
        ]),
        tools=[issue_credit],
    )
    return Agent(
        name="support",
        instructions="Resolve refund requests.",
        model=ScriptedModel([
            ModelStep(
                output=[
                    function_call("lookup_order", {"order_id": "o-1"}, call_id="c-lookup"),
                    function_call("refund", {"order_id": "o-1", "amount": "20.00"},
                                  call_id="c-refund-1"),
                    function_call("send_email", {"to": "ann@example.com", "body": "Refunded."},
                                  call_id="c-email"),
                    function_call("ask_billing", {"input": "credit acct-9 5.00"},
                                  call_id="c-billing"),
                ],
                response_id="resp-support-1",
            ),
            ModelStep(
                output=[function_call("refund", {"order_id": "o-1", "amount": "9.90"},
                                      call_id="c-refund-2")],
                response_id="resp-support-2",
            ),
            ModelStep(output=[assistant_message("Refund and credit done.")],
                      response_id="resp-support-3"),
        ]),
        tools=[
            lookup_order, refund, send_email,
            billing.as_tool(tool_name="ask_billing", tool_description="Ask the billing team."),
        ],
    )


async def _run(recorder: Recorder, agent: Agent[Any], run_input: Any, session: Any,
               streamed: bool) -> Any:
    if not streamed:
        return await recorder.run(agent, run_input, session=session)
    result = recorder.run_streamed(agent, run_input, session=session)
    async for _event in result.stream_events():
        pass
    return result


async def main(ledger_dir: str, streamed: bool = False, durability: str = "group") -> None:
    """Record the approval flow into the ledger at ``ledger_dir`` (created if missing),
    with recorders of that ``durability`` (see :class:`Recorder`)."""
    agent = build_agent()
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "sessions.sqlite")

        first = Recorder(ledger_dir, durability=durability)
        paused = await _run(first, agent, "Refund 20 EUR on o-1 and credit acct-9.",
                            SQLiteSession(SESSION_ID, db), streamed)
        stored = json.dumps(paused.to_state().to_json())  # parked in an external store

        second = Recorder(ledger_dir, durability=durability)  # later, as in another process
        state = await RunState.from_json(agent, json.loads(stored))
        for item in state.get_interruptions():
            if item.call_id == "c-email":
                second.reject(state, item, approver="alice", reason="no email without review")
            elif item.call_id == "c-refund-1":
                second.approve(state, item, approver="alice", reason="within policy", always=True)
            else:  # c-credit, asked by the nested billing agent
                second.approve(state, item, approver="bob", reason="goodwill credit")
        await _run(second, agent, state, SQLiteSession(SESSION_ID, db), streamed)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", required=True, help="ledger directory to record into")
    parser.add_argument("--streamed", action="store_true", help="use Runner.run_streamed")
    parser.add_argument("--durability", choices=["group", "entry"], default="group",
                        help="the recorders' durability (default: group)")
    args = parser.parse_args()
    asyncio.run(main(args.ledger, args.streamed, args.durability))
    print(f"recorded into {args.ledger}; check it: evidence-ledger verify --ledger {args.ledger}")
