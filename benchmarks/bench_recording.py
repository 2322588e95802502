"""Recording overhead: one agent run of 200 tool calls, with and without the recorder.

``ScriptedModel`` (offline) drives 100 turns of two parallel calls each: ``lookup``
(ungated) and ``charge`` (gated). The first ``charge`` interrupts the run; it is approved
with ``always=True`` (through the recorder when recording, ``RunState.approve``
otherwise) and the run resumes; later ``charge`` calls run under that sticky approval.
Every variant keeps the conversation in an in-memory ``SQLiteSession``. One row per
recorder durability (``group``: a flusher thread appends the leg's evidence in groups,
durable when the leg ends; ``entry``: every entry synced before its hook returns), each
against the run without recorder; the three variants take turns, median of runs.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import Agent, Runner, SQLiteSession, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from benchmarks.common import RUNS, Row
from evidence_ledger import Recorder

TURNS = 100


@function_tool
def lookup(key: str) -> str:
    """Read a record."""
    return f"record {key}"


@function_tool(needs_approval=True)
def charge(account: str, amount: int) -> str:
    """Charge an account (gated)."""
    return f"charged {amount} to {account}"


def _agent() -> Agent[Any]:
    steps = [
        ModelStep(output=[
            function_call("lookup", {"key": f"k{t}"}, call_id=f"l{t}"),
            function_call("charge", {"account": f"a{t}", "amount": t}, call_id=f"c{t}"),
        ])
        for t in range(TURNS)
    ]
    steps.append(ModelStep(output=[assistant_message("done")]))
    return Agent(name="billing", model=ScriptedModel(steps), tools=[lookup, charge])


async def _plain() -> None:
    agent, session = _agent(), SQLiteSession("bench", ":memory:")
    result = await Runner.run(agent, "go", session=session, max_turns=TURNS + 5)
    while result.interruptions:
        state = result.to_state()
        for item in state.get_interruptions():
            state.approve(item, always_approve=True)
        result = await Runner.run(agent, state, session=session, max_turns=TURNS + 5)


async def _recorded(ledger: Path, durability: str) -> None:
    recorder = Recorder(ledger, durability=durability)
    agent, session = _agent(), SQLiteSession("bench", ":memory:")
    result = await recorder.run(agent, "go", session=session, max_turns=TURNS + 5)
    while result.interruptions:
        state = result.to_state()
        for item in state.get_interruptions():
            recorder.approve(state, item, approver="bench", always=True)
        result = await recorder.run(agent, state, session=session, max_turns=TURNS + 5)


MODES = ("group", "entry")
NOTES = {
    "group": "hooks queue; a flusher thread appends groups; run() returns once durable",
    "entry": "every evidence entry is synced before its hook returns",
}


def _timed(run: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> tuple[float, float]:
    """(wall seconds, process CPU seconds: every thread, the flusher's too) of ``run(*args)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    asyncio.run(run(*args))
    return time.perf_counter() - wall, time.process_time() - cpu


def rows() -> list[Row]:
    """One row per durability: wall time recorded vs not recorded (same run, same machine)."""
    plain: list[tuple[float, float]] = []
    recorded: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    work = Path(tempfile.mkdtemp(prefix="bench-recording-"))
    try:
        for run in range(RUNS):  # the variants take turns, so that load drifts hit all
            plain.append(_timed(_plain))
            for mode in MODES:
                recorded[mode].append(_timed(_recorded, work / f"{mode}{run}", mode))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(w for w, _ in plain)
    base_cpu = statistics.median(c for _, c in plain)
    out = []
    for mode in MODES:
        ours = statistics.median(w for w, _ in recorded[mode])
        cpu = statistics.median(c for _, c in recorded[mode])
        overhead = ours / base - 1
        out.append(Row(
            operation=f"agent run, 200 tool calls, recorded ({mode})", size=2 * TURNS,
            ours=ours * 1000, unit="ms", baselines={"not recorded": base * 1000},
            ratio=ours / base, target="within 1.15x", met=ours / base <= 1.15,
            note=(f"overhead {overhead:.0%} wall, {cpu / base_cpu - 1:+.0%} CPU "
                  f"({cpu:.2f} s vs {base_cpu:.2f} s): {NOTES[mode]}"),
        ))
    return out


if __name__ == "__main__":
    from benchmarks.common import print_table

    print_table(rows(), "this machine")
