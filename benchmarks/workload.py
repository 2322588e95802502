"""Synthetic but realistic evidence: call chains as the recorder writes them.

One chain = call (arguments payload), decision (half the calls are gated), execution
(result payload), the ``function_call`` and ``function_call_output`` session items
(item payloads); a ``run_end`` closes every 40 chains. Entries are ~300 bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from evidence_ledger.record.writer import EvidenceWriter

CHAINS_PER_RUN = 40


def chain_steps(writer: EvidenceWriter, i: int) -> list[Callable[[], bytes]]:
    """The appends of call chain ``i``, as separate steps (each appends one entry)."""
    run_id = f"run-{i // CHAINS_PER_RUN:06d}"
    call_id = f"call_{i:09d}"
    arguments = json.dumps({"account": f"acct-{i % 977}", "amount": i % 1000, "memo": "x" * 80})
    result = f"receipt {i}: charged {i % 1000} to acct-{i % 977}"
    gated = i % 2 == 0
    steps: list[Callable[[], bytes]] = [
        lambda: writer.call(run_id=run_id, call_id=call_id, agent="billing", tool="charge",
                            arguments=arguments, needs_approval=gated, response_id=f"resp_{i}"),
    ]
    if gated:
        steps.append(lambda: writer.decision(run_id=run_id, call_id=call_id, decision="approve",
                                             approver="alice@example.com", reason="ok"))
    steps += [
        lambda: writer.execution(run_id=run_id, call_id=call_id, arguments=arguments,
                                 agent="billing", tool="charge", result=result),
        lambda: writer.session_item(run_id=run_id, session_id=f"s-{run_id}", item={
            "type": "function_call", "call_id": call_id, "name": "charge",
            "arguments": arguments}),
        lambda: writer.session_item(run_id=run_id, session_id=f"s-{run_id}", item={
            "type": "function_call_output", "call_id": call_id, "output": result}),
    ]
    if i % CHAINS_PER_RUN == CHAINS_PER_RUN - 1:
        steps.append(lambda: writer.run_end(run_id=run_id, status="completed"))
    return steps


def steps(writer: EvidenceWriter, entries: int) -> list[Callable[[], bytes]]:
    """At least ``entries`` append steps (whole chains), in order."""
    out: list[Callable[[], bytes]] = []
    i = 0
    while len(out) < entries:
        out.extend(chain_steps(writer, i))
        i += 1
    return out[:entries]


def build_ledger(directory: Path, entries: int, group: int = 10_000) -> EvidenceWriter:
    """Append ``entries`` realistic entries to ``directory`` in groups of ``group``."""
    writer = EvidenceWriter(directory)
    todo = steps(writer, entries)
    for start in range(0, len(todo), group):
        with writer.atomic():
            for step in todo[start : start + group]:
                step()
    return writer
