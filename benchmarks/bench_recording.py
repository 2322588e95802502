"""Recording overhead: one agent run of 200 tool calls, with and without the recorder.

``ScriptedModel`` (offline) drives 100 turns of two parallel calls each: ``lookup``
(ungated) and ``charge`` (gated). The first ``charge`` interrupts the run; it is approved
with ``always=True`` (through the recorder when recording, ``RunState.approve``
otherwise) and the run resumes; later ``charge`` calls run under that sticky approval.
Every variant keeps the conversation in an in-memory ``SQLiteSession``. One row per
recorder durability (``group``: a flusher thread appends the leg's evidence in groups,
durable when the leg ends; ``entry``: every entry synced before its hook returns;
``guard``: group, with a guard policy on ``charge``: one durable append per gated call),
each against the run without recorder; the three variants take turns, each run in a fresh
process, median of runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import Agent, Runner, SQLiteSession, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from benchmarks.common import REPO, Row
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


GUARD_POLICY = b'version = 1\n[[tools]]\nmatch = "charge"\napprovers = ["bench"]\n'
"""The policy of the ``guard`` variant: every ``charge`` call judged by the guard."""


async def _recorded(ledger: Path, durability: str) -> None:
    policy = None
    if durability == "guard":  # group durability, and the guard on every charge call
        durability, policy = "group", ledger.with_name(ledger.name + ".toml")
        policy.write_bytes(GUARD_POLICY)
    recorder = Recorder(ledger, durability=durability, policy=policy)
    agent, session = _agent(), SQLiteSession("bench", ":memory:")
    result = await recorder.run(agent, "go", session=session, max_turns=TURNS + 5)
    while result.interruptions:
        state = result.to_state()
        for item in state.get_interruptions():
            recorder.approve(state, item, approver="bench", always=True)
        result = await recorder.run(agent, state, session=session, max_turns=TURNS + 5)


MODES = ("group", "entry", "guard")
NOTES = {
    "group": "hooks queue; a flusher thread appends groups; run() returns once durable",
    "entry": "every evidence entry is synced before its hook returns",
    "guard": "group, with the guard enforcing a policy on charge: 100 gated calls, each "
             "judged and its allowed entry synced before the tool runs",
}


FRESH_RUNS = 5
"""Timed runs per variant; each in a fresh process (within one process the plain run alone
drifts by a third from run to run, more than the margin measured)."""


def _timed(variant: str, ledger: Path) -> tuple[float, float]:
    """(wall seconds, process CPU seconds: every thread, the flusher's too) of one run of
    ``variant`` (``plain`` or a durability), in a fresh Python process."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_recording", "--one", variant, str(ledger)],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout
    wall, cpu = json.loads(out.splitlines()[-1])
    return float(wall), float(cpu)


def _one(variant: str, ledger: Path) -> tuple[float, float]:
    """One run of ``variant`` in this process, after one untimed run of it (imports and
    first-use costs paid, for every variant alike): (wall, CPU) seconds."""
    def run(path: Path) -> None:
        asyncio.run(_plain() if variant == "plain" else _recorded(path, variant))

    run(ledger.with_name(ledger.name + "-warm"))
    wall, cpu = time.perf_counter(), time.process_time()
    run(ledger)
    return time.perf_counter() - wall, time.process_time() - cpu


def rows() -> list[Row]:
    """One row per durability: wall time recorded vs not recorded (same run, same machine),
    medians of :data:`FRESH_RUNS` runs per variant, each in a fresh process, the variants
    taking turns so that load drifts hit all."""
    plain: list[tuple[float, float]] = []
    recorded: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    work = Path(tempfile.mkdtemp(prefix="bench-recording-"))
    try:
        for run in range(FRESH_RUNS):
            plain.append(_timed("plain", work / f"plain{run}"))
            for mode in MODES:
                recorded[mode].append(_timed(mode, work / f"{mode}{run}"))
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
            ratio=ours / base, target="within 1.15x" if mode != "guard" else "",
            met=ours / base <= 1.15 if mode != "guard" else None,
            note=(f"overhead {overhead:.0%} wall, {cpu / base_cpu - 1:+.0%} CPU "
                  f"({cpu:.2f} s vs {base_cpu:.2f} s): {NOTES[mode]}"),
        ))
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:  # one timed run, for rows(): its (wall, cpu) as JSON
        print(json.dumps(_one(sys.argv[2], Path(sys.argv[3]))))
    else:
        from benchmarks.common import print_table

        print_table(rows(), "this machine")
