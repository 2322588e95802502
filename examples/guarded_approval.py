"""A gated tool behind the guard, across processes (offline, scripted model).

The regression case of docs/ENFORCEMENT.md: park a run on a gated call, approve it,
serialise the ``RunState`` and exit; revoke the approval from another process
(``evidence-ledger revoke``); restore the state in a new process with a new recorder and
resume: the guard finds the revocation in the ledger and the tool body never runs.

Run:
    python examples/guarded_approval.py park   --ledger L --state S.json --policy P.toml
    evidence-ledger revoke --ledger L --call-id refund-1 --by bob --reason "wrong amount"
    python examples/guarded_approval.py resume --ledger L --state S.json --policy P.toml

``park`` writes the policy file (:data:`POLICY`) when ``--policy`` does not exist yet.
``resume`` prints one JSON line: the final output, and the output the call got. With the
environment variable ``GUARDED_APPROVAL_RAN=FILE``, the tool body appends a line to FILE
each time it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import Agent, RunState, SQLiteSession, function_tool
from lineage_scenarios import scripted_model

import evidence_ledger as el

CALL_ID = "refund-1"

POLICY = """\
version = 1
mode = "enforce"

[[tools]]
match = "refund"
approvers = ["alice"]
max_age = 3600

[tools.arguments.amount]
max = 100
"""
"""The example's policy: ``refund`` needs a live approval by alice, at most an hour old,
for at most 100."""

RAN = os.environ.get("GUARDED_APPROVAL_RAN")


@function_tool(needs_approval=True)
def refund(order_id: str, amount: int) -> str:
    """Refund part of an order (gated)."""
    if RAN:
        with open(RAN, "a", encoding="utf-8") as fh:
            fh.write(f"{order_id} {amount}\n")
    return f"refunded {amount} on {order_id}"


def support_agent(amount: int = 20) -> Agent[Any]:
    """The agent: asks for ``refund(order_id="o-1", amount=amount)``, then answers."""
    return Agent(name="support", tools=[refund], model=scripted_model(
        [("refund", {"order_id": "o-1", "amount": amount}, CALL_ID)], "done"))


async def park(ledger: str, state_path: str, policy: str, amount: int, approver: str) -> None:
    """Run until the gated call pauses, approve it as ``approver``, write the state's JSON."""
    if not Path(policy).exists():
        Path(policy).write_text(POLICY, encoding="utf-8")
    recorder = el.Recorder(ledger, policy=policy)
    session = SQLiteSession("guarded", str(Path(state_path).with_suffix(".db")))
    result = await recorder.run(support_agent(amount), "refund o-1", session=session)
    state = result.to_state()
    for item in state.get_interruptions():
        recorder.approve(state, item, approver=approver, reason="checked")
    Path(state_path).write_text(json.dumps(state.to_json()), encoding="utf-8")


async def resume(ledger: str, state_path: str, policy: str, amount: int) -> dict[str, Any]:
    """Restore the state in this process, with a new recorder, and resume it."""
    agent = support_agent(amount)
    recorder = el.Recorder(ledger, policy=policy)
    state = await RunState.from_json(agent, json.loads(Path(state_path).read_text("utf-8")))
    session = SQLiteSession("guarded", str(Path(state_path).with_suffix(".db")))
    result = await recorder.run(agent, state, session=session)
    outputs = [i.get("output") for i in await session.get_items()
               if i.get("type") == "function_call_output"]
    return {"final_output": result.final_output, "call_output": outputs[-1] if outputs else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("park", "resume"))
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--state", required=True, help="the RunState's JSON file")
    parser.add_argument("--policy", required=True, help="the guard's policy file (TOML)")
    parser.add_argument("--amount", type=int, default=20)
    parser.add_argument("--approver", default="alice")
    args = parser.parse_args(argv)
    if args.step == "park":
        asyncio.run(park(args.ledger, args.state, args.policy, args.amount, args.approver))
    else:
        print(json.dumps(asyncio.run(resume(args.ledger, args.state, args.policy, args.amount))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
