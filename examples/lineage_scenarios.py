"""Run-state lineage scenarios, each recorded into its own ledger (offline, scripted models).

A paused run becomes a ``RunState`` that apps serialise, fork, approve on one copy and resume
in another process, or retry after a failure. Each scenario below does one of those with a
gated tool ``wire`` and records it through
:class:`~evidence_ledger.record.integrations.openai_agents.Recorder`:

  fork            one paused result, ``to_state()`` twice (siblings A and B); approve the
                  call on A only; resume B (it must pause again), then A (it must run it)
  reuse_call_id   two runs in one process whose top agents call the agent tool ``ask_l1``
                  with the same call_id and arguments; the nested ``wire`` calls share a
                  call_id but not their arguments; approve run A's nested call only; resume
                  B (it must pause again), then A (it must run A's call)
  foreign_approval  as ``reuse_call_id``, but run B's state is approved (whatever it waits
                  on) through the recorder and resumed: the recorder records the decision on
                  what the approver was shown, never refuses it
  nested1..3      the gated tool 1, 2 or 3 ``as_tool`` edges below the top agent; the state
                  goes through ``to_json()`` / JSON text / ``RunState.from_json()``, the
                  nested call is approved and the run resumed (it must run at its scope)
  retry_write     the approved state is resumed with a session whose next write fails (the
                  leg fails after the tool ran); the same state object is resumed again (it
                  must finish the write without running the tool twice)
  handoff         a triage agent asks for two handoffs in one response, with a session: the
                  SDK runs the first (its transfer message must trace back to the recorded
                  handoff) and ignores the second (its output, to the recorded block)
  handoff_resumed a response asks for the gated tool and two handoffs: the run pauses; the
                  state goes through JSON, the call is approved and the run resumed, and
                  the SDK hands off (and ignores the second handoff) in the resumed leg
  output_guard    a tool output guardrail replaces a tool's result, with a session: the
                  execution keeps what the tool returned, the persisted message traces
                  back to the recorded block
  sticky_reject   one response calls ``wire`` twice; the first call is rejected, the second
                  approved with ``always=True`` (sticky): resumed, the first must not run
                  (SDK issue #4429)

What ``evidence-ledger verify`` reports, as recorded (``tests/test_lineage_matrix.py``):
openai-agents 0.23.1, 0.24.0: nothing, on every scenario; 0.22.3: ``reuse_call_id``
foreign_interruption (run B's state waits on run A's nested call, which B never made), and
``foreign_approval`` that and execution_provenance (approved, B runs A's call);
0.21.0 and 0.21.1: that, and ``retry_write`` output_not_persisted (the retried leg
completes without persisting the approved call's output); 0.20.0: both, and ``fork``
state_isolation (the sibling runs the call approved on A), ``reuse_call_id``
execution_provenance + state_isolation (run B runs run A's approved nested call) and
approved_not_executed (run A never runs it), ``nested2`` / ``nested3``
approved_not_executed (the approved nested call pauses again).

Each runs not streamed (``<name>``) and streamed (``<name>-streamed``). Works with
openai-agents 0.20 - 0.24: ``agents.testing.ScriptedModel`` where the SDK has it, else a
tiny scripted model of our own (0.20 has no ``agents.testing``).

With ``--policy FILE`` every scenario is recorded with the guard (docs/ENFORCEMENT.md): a
faulty release's run then ends with the call the fault would run denied, not run.

Run:  python examples/lineage_scenarios.py --out DIR [--only NAME ...] [--policy FILE]
      (ledgers in DIR/<name>[-streamed]/; prints one JSON line per ledger)
Then: evidence-ledger verify --ledger DIR/<name>
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import (
    Agent,
    RunState,
    SQLiteSession,
    ToolGuardrailFunctionOutput,
    function_tool,
    tool_output_guardrail,
)
from agents.exceptions import AgentsException
from agents.models.interface import Model
from agents.version import __version__ as SDK_VERSION
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from scripted_models import Responder, responding_model

from evidence_ledger import Recorder

Plan = list[tuple[str, dict[str, Any], str]]  # (tool, arguments, call_id), in order

# -- scripted models ---------------------------------------------------------------------


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def responder(plan: Plan, answer: str, together: bool = False) -> Responder:
    """A model turn that makes the next call of ``plan`` whose output is not in the input
    yet (one call per turn; ``together``: every such call in one turn), then answers
    ``answer``. Robust to replays and resumes."""

    def respond(model_input: Any) -> list[Any]:
        items = model_input if isinstance(model_input, list) else []
        done = {_get(i, "call_id") for i in items if _get(i, "type") == "function_call_output"}
        calls = [
            ResponseFunctionToolCall(
                id=call_id, call_id=call_id, type="function_call", name=tool,
                arguments=json.dumps(arguments, separators=(",", ":")),
            )
            for tool, arguments, call_id in plan if call_id not in done
        ]
        if calls:
            return calls if together else calls[:1]
        return [ResponseOutputMessage(
            id="msg", type="message", role="assistant", status="completed",
            content=[ResponseOutputText(text=answer, type="output_text", annotations=[])],
        )]

    return respond


def scripted_model(plan: Plan, answer: str, together: bool = False) -> Model:
    """A model playing :func:`responder` (see ``scripted_models.responding_model``)."""
    return responding_model(responder(plan, answer, together), len(plan) * 4 + 4)  # replays


# -- agents ------------------------------------------------------------------------------


@function_tool(needs_approval=True)
def wire(amount: int) -> str:
    """Send money (gated)."""
    return f"wired {amount}"


def payer_tree(tag: str, depth: int, amount: int) -> Agent[Any]:
    """The top agent of a chain ``depth`` agent-as-tool edges deep, ``wire`` at the bottom.

    Level ``k`` (1-based) is the agent tool ``ask_l<k>`` called with call_id
    ``<tag>-l<k>``; the bottom agent calls ``wire`` with call_id ``<tag>-wire``. (Call ids
    differ between scenarios: some SDK releases keep nested runs in a process-wide cache
    keyed by the calling tool call, which one scenario must not leave to the next.)
    """
    agent = Agent(
        name="payer",
        model=scripted_model([("wire", {"amount": amount}, f"{tag}-wire")], "paid"),
        tools=[wire],
    )
    for level in range(depth, 0, -1):
        name = f"ask_l{level}"
        agent = Agent(
            name=f"level{level - 1}" if level > 1 else "top",
            model=scripted_model([(name, {"input": "pay"}, f"{tag}-l{level}")], f"{name} done"),
            tools=[agent.as_tool(tool_name=name, tool_description="Delegate.")],
        )
    return agent


# -- running -----------------------------------------------------------------------------


async def run(recorder: Recorder, agent: Agent[Any], run_input: Any, streamed: bool,
              **kwargs: Any) -> Any:
    """One leg through ``recorder``, streamed or not (events drained)."""
    if not streamed:
        return await recorder.run(agent, run_input, **kwargs)
    result = recorder.run_streamed(agent, run_input, **kwargs)
    async for _event in result.stream_events():
        pass
    return result


def tag(name: str, streamed: bool) -> str:
    """The call_id prefix of a scenario: unique per scenario and mode."""
    return f"{name}-s" if streamed else name


async def resume(recorder: Recorder, agent: Agent[Any], state: RunState[Any, Any],
                 streamed: bool, **kwargs: Any) -> None:
    """Resume ``state``; an SDK error ends the leg (recorded ``failed``), not the scenario."""
    try:
        await run(recorder, agent, state, streamed, **kwargs)
    except AgentsException as exc:
        print(f"leg failed: {type(exc).__name__}: {exc}", file=sys.stderr)


def approve_all(recorder: Recorder, state: RunState[Any, Any]) -> None:
    for item in state.get_interruptions():
        recorder.approve(state, item, approver="alice", reason="checked")


async def fork(recorder: Recorder, streamed: bool) -> None:
    agent = payer_tree(tag("fork", streamed), 0, 100)
    paused = await run(recorder, agent, "pay 100", streamed)
    state_a, state_b = paused.to_state(), paused.to_state()
    approve_all(recorder, state_a)
    await resume(recorder, agent, state_b, streamed)
    await resume(recorder, agent, state_a, streamed)


async def reuse_call_id(recorder: Recorder, streamed: bool) -> None:
    agent_a = payer_tree(tag("reuse", streamed), 1, 1)
    agent_b = payer_tree(tag("reuse", streamed), 1, 2)
    paused_a = await run(recorder, agent_a, "pay", streamed)
    paused_b = await run(recorder, agent_b, "pay", streamed)
    state_a, state_b = paused_a.to_state(), paused_b.to_state()
    approve_all(recorder, state_a)
    await resume(recorder, agent_b, state_b, streamed)
    await resume(recorder, agent_a, state_a, streamed)


async def foreign_approval(recorder: Recorder, streamed: bool) -> None:
    agent_a = payer_tree(tag("foreign", streamed), 1, 1)
    agent_b = payer_tree(tag("foreign", streamed), 1, 2)
    await run(recorder, agent_a, "pay", streamed)  # run A pauses on its nested call
    state_b = (await run(recorder, agent_b, "pay", streamed)).to_state()
    approve_all(recorder, state_b)  # what run B's state waits on, approved through the recorder
    await resume(recorder, agent_b, state_b, streamed)


def nested(depth: int) -> Callable[[Recorder, bool], Any]:
    async def scenario(recorder: Recorder, streamed: bool) -> None:
        agent = payer_tree(tag(f"nested{depth}", streamed), depth, 7)
        paused = await run(recorder, agent, "pay 7", streamed)
        stored = json.dumps(paused.to_state().to_json())
        state = await RunState.from_json(agent, json.loads(stored))
        approve_all(recorder, state)
        await resume(recorder, agent, state, streamed)

    return scenario


class FlakySession(SQLiteSession):
    """An in-memory SQLiteSession whose next ``add_items`` fails once when armed."""

    armed = False

    async def add_items(self, items: list[Any]) -> None:
        if self.armed:
            self.armed = False
            raise OSError("session store unavailable")
        await super().add_items(items)


async def retry_write(recorder: Recorder, streamed: bool) -> None:
    agent = payer_tree(tag("retry", streamed), 0, 30)
    session = FlakySession("retry-write", ":memory:")
    paused = await run(recorder, agent, "pay 30", streamed, session=session)
    stored = json.dumps(paused.to_state().to_json())
    state = await RunState.from_json(agent, json.loads(stored))
    approve_all(recorder, state)
    session.armed = True
    try:
        await run(recorder, agent, state, streamed, session=session)
    except OSError:
        pass
    else:
        raise AssertionError("the armed session write did not fail")
    await resume(recorder, agent, state, streamed, session=session)  # the same state, again


async def handoff(recorder: Recorder, streamed: bool) -> None:
    billing = Agent(name="billing", model=scripted_model([], "billing here"))
    legal = Agent(name="legal", model=scripted_model([], "legal here"))
    prefix = tag("handoff", streamed)
    triage = Agent(name="triage", handoffs=[billing, legal], model=scripted_model(
        [("transfer_to_billing", {}, f"{prefix}-1"), ("transfer_to_legal", {}, f"{prefix}-2")],
        "not reached", together=True))
    session = SQLiteSession(f"handoff-{streamed}", ":memory:")
    await run(recorder, triage, "a refund, please", streamed, session=session)


async def handoff_resumed(recorder: Recorder, streamed: bool) -> None:
    prefix = tag("handoff_resumed", streamed)
    billing = Agent(name="billing", model=scripted_model([], "billing here"))
    legal = Agent(name="legal", model=scripted_model([], "legal here"))
    triage = Agent(name="triage", tools=[wire], handoffs=[billing, legal], model=scripted_model(
        [("wire", {"amount": 3}, f"{prefix}-wire"), ("transfer_to_billing", {}, f"{prefix}-1"),
         ("transfer_to_legal", {}, f"{prefix}-2")], "not reached", together=True))
    session = SQLiteSession(f"handoff-resumed-{streamed}", ":memory:")
    paused = await run(recorder, triage, "refund 3, then billing", streamed, session=session)
    stored = json.dumps(paused.to_state().to_json())
    state = await RunState.from_json(triage, json.loads(stored))
    approve_all(recorder, state)
    await resume(recorder, triage, state, streamed, session=session)


@tool_output_guardrail
def no_card_numbers(data: Any) -> ToolGuardrailFunctionOutput:
    """Withhold a result that shows a card number."""
    if "4111" in str(data.output):
        return ToolGuardrailFunctionOutput.reject_content("[card number withheld]")
    return ToolGuardrailFunctionOutput.allow()


@function_tool(tool_output_guardrails=[no_card_numbers])
def card_on_file(customer: str) -> str:
    """The card a customer has on file."""
    return f"{customer}: 4111 1111 1111 1111"


async def output_guard(recorder: Recorder, streamed: bool) -> None:
    agent = Agent(name="support", tools=[card_on_file], model=scripted_model(
        [("card_on_file", {"customer": "c-9"}, f"{tag('output_guard', streamed)}-1")], "done"))
    session = SQLiteSession(f"output-guard-{streamed}", ":memory:")
    await run(recorder, agent, "which card?", streamed, session=session)


async def sticky_reject(recorder: Recorder, streamed: bool) -> None:
    agent = Agent(name="payer", tools=[wire], model=scripted_model(
        [("wire", {"amount": 5}, f"{tag('sticky', streamed)}-a"),
         ("wire", {"amount": 6}, f"{tag('sticky', streamed)}-b")], "paid", together=True))
    state = (await run(recorder, agent, "pay twice", streamed)).to_state()
    first, second = state.get_interruptions()
    recorder.reject(state, first, approver="alice", reason="not this one")
    recorder.approve(state, second, approver="alice", reason="this and later", always=True)
    await resume(recorder, agent, state, streamed)


SCENARIOS: dict[str, Callable[[Recorder, bool], Any]] = {
    "fork": fork,
    "reuse_call_id": reuse_call_id,
    "foreign_approval": foreign_approval,
    "nested1": nested(1),
    "nested2": nested(2),
    "nested3": nested(3),
    "retry_write": retry_write,
    "handoff": handoff,
    "handoff_resumed": handoff_resumed,
    "output_guard": output_guard,
    "sticky_reject": sticky_reject,
}
"""Scenario name -> coroutine function ``(recorder, streamed)``."""

NAMES = [f"{name}{suffix}" for name in SCENARIOS for suffix in ("", "-streamed")]
"""Every recorded ledger's name: each scenario, not streamed and streamed."""


async def record(name: str, ledger_dir: str | os.PathLike[str],
                 policy: str | None = None) -> None:
    """Record the scenario ``name`` (one of :data:`NAMES`) into ``ledger_dir``, with the
    guard's ``policy`` file if given (docs/ENFORCEMENT.md)."""
    base, streamed = name.removesuffix("-streamed"), name.endswith("-streamed")
    await SCENARIOS[base](Recorder(ledger_dir, policy=policy), streamed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for one ledger per scenario")
    parser.add_argument("--only", nargs="*", choices=NAMES, help="these scenarios only")
    parser.add_argument("--policy", help="record with the guard and this policy file")
    args = parser.parse_args(argv)
    failed = 0
    for name in args.only or NAMES:
        ledger = Path(args.out) / name
        error = None
        try:
            asyncio.run(record(name, ledger, args.policy))
        except Exception as exc:  # recorded as far as it got; the ledger says what happened
            error = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
            failed += 1
        print(json.dumps({"scenario": name, "sdk": SDK_VERSION, "ledger": str(ledger),
                          "error": error}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
