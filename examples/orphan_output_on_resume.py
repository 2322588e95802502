"""The shared case ``orphan_output_on_resume``, recorded: the ledger shows the SDK fault.

Shape (offline, ScriptedModel, a SQLiteSession wrapped by the recorder: in memory, or in
the file given with --session-db):
  tools   lookup (ungated), update_record (needs_approval=True)
  agent   has an output guardrail and tool_use_behavior=StopAtTools([...]) not naming update_record
  model   turn 1 -> function_call lookup        (call_id "c-lookup")
          turn 2 -> function_call update_record (call_id "c-update")
          turn 3 -> assistant message
  flow    run streamed -> interrupted; to_state() -> JSON text -> RunState.from_json;
          approve the interruption through the recorder; resume streamed, same session.

What ``evidence-ledger verify`` reports on the recorded ledger, by SDK release:
  openai-agents 0.22.3  one violation: tool_linkage, c-update (the session holds its
                        function_call_output but not its function_call)
  openai-agents 0.24.0  none

With ``--policy FILE`` (a guard policy whose ``session`` mode is ``enforce``, the default)
the session guard writes the missing ``function_call`` before the output on 0.22.3: the
session stays valid, and the ledger records the write (``session_repair``).

Run:  python examples/orphan_output_on_resume.py --ledger DIR [--session-db FILE] [--policy FILE]
Then: evidence-ledger verify --ledger DIR
      evidence-ledger scan-session FILE                  (with --session-db)
      evidence-ledger repair-session FILE --ledger DIR   (a dry run; add --apply --by NAME)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunState,
    SQLiteSession,
    StopAtTools,
    function_tool,
    output_guardrail,
)
from agents.testing import (
    ModelStep,
    ScriptedModel,
    assistant_message,
    function_call,
)

from evidence_ledger import Recorder


@function_tool(needs_approval=False)
def lookup(key: str) -> str:
    """Read a record."""
    return f"record {key}"


@function_tool(needs_approval=True)
def update_record(key: str, value: str) -> str:
    """Write a record (gated)."""
    return f"updated {key}={value}"


@output_guardrail
async def passthrough(ctx: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


def build_agent() -> Agent[Any]:
    """The records agent with its three scripted model turns."""
    script = [
        ModelStep(output=[function_call("lookup", {"key": "k1"}, call_id="c-lookup")]),
        ModelStep(output=[function_call("update_record", {"key": "k1", "value": "v2"},
                                        call_id="c-update")]),
        ModelStep(output=[assistant_message("record updated")]),
    ]
    return Agent(
        name="records",
        instructions="Update records when asked.",
        model=ScriptedModel(script),
        tools=[lookup, update_record],
        output_guardrails=[passthrough],
        tool_use_behavior=StopAtTools(stop_at_tool_names=["never_called"]),
    )


async def drain(recorder: Recorder, agent: Agent[Any], run_input: Any, session: Any) -> Any:
    streamed = recorder.run_streamed(agent, run_input, session=session)
    async for _event in streamed.stream_events():
        pass
    return streamed


SESSION_ID = "case-orphan"


async def main(ledger_dir: str, session_db: str = ":memory:", policy: str | None = None
               ) -> list[Any]:
    """Record the case into ``ledger_dir``, the session ``SESSION_ID`` kept in the SQLite
    file ``session_db`` (default: in memory), with the guard's ``policy`` file if given (its
    session guard then writes the missing ``function_call``); return the session's items
    at the end."""
    recorder = Recorder(ledger_dir, policy=policy)
    agent = build_agent()
    if session_db != ":memory:":
        Path(session_db).parent.mkdir(parents=True, exist_ok=True)
    session = SQLiteSession(SESSION_ID, session_db)
    try:
        paused = await drain(recorder, agent, "set k1 to v2", session)
        stored = json.dumps(paused.to_state().to_json())  # parked in an external store
        state = await RunState.from_json(agent, json.loads(stored))  # later, another process
        recorder.approve(state, state.get_interruptions()[0], approver="operator")
        await drain(recorder, agent, state, session)
        return await session.get_items()
    finally:
        session.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", required=True, help="ledger directory to record into")
    parser.add_argument("--session-db", default=":memory:", metavar="FILE",
                        help="keep the session in this SQLite file (default: in memory), "
                             "for scan-session and repair-session")
    parser.add_argument("--policy", metavar="FILE",
                        help="record with the guard and this policy (docs/ENFORCEMENT.md)")
    args = parser.parse_args()
    for item in asyncio.run(main(args.ledger, args.session_db, args.policy)):
        print(f"{item.get('type') or item.get('role'):24}{item.get('call_id', '')}")
    print(f"recorded into {args.ledger}; check it: evidence-ledger verify --ledger {args.ledger}")
    if args.session_db != ":memory:":
        print(f"session {SESSION_ID!r} kept in {args.session_db}; scan it: "
              f"evidence-ledger scan-session {args.session_db}")
