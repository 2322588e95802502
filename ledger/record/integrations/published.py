"""Executions the SDK published but never reported.

The SDK commits a tool's output (a ``function_call_output`` item, or the output item of
another tool kind) as soon as the tool returns, then runs the callbacks that follow it: a
``custom_data_extractor``, the run and agent hooks' ``on_tool_end``. When one of them raises
(or is cancelled), ``on_tool_end`` never reaches the recorder, yet the SDK keeps the
committed output in the state it resumed and persists it on a retry without running the
tool again. The recorder notes each call the SDK started (``on_tool_start``,
:attr:`~evidence_ledger.record.integrations.legs.Leg.started`); when a leg that resumed a
state ends with such a call unreported, its execution is recorded with the output the SDK
committed, as published (an output mutated after publication does not change it). A call
with no committed output records nothing: its tool did not complete.

Only the top-level agent's calls are looked for: the state a leg resumed holds its items
(those of agents run through ``Agent.as_tool`` are in their own runs' states).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from operator import methodcaller
from typing import Any

from evidence_ledger.record.integrations.group_commit import Write
from evidence_ledger.record.integrations.legs import Leg
from evidence_ledger.record.integrations.native_calls import item_field, payload_text

__all__ = ["unreported_executions"]

OUTPUT_TYPES = frozenset({
    "function_call_output", "custom_tool_call_output", "shell_call_output",
    "local_shell_call_output", "apply_patch_call_output", "computer_call_output",
})
"""Item types of the outputs the SDK commits for the tools it runs locally."""


def _committed(state: Any) -> Iterator[tuple[str, Any]]:
    """``(call_id, output as recorded)`` of each output item ``state`` holds: its generated
    items (a function call's ``output`` as persisted; another kind's output as its tool
    returned it, as ``on_tool_end`` would have given it), then the items of its pending
    session write."""
    for item in getattr(state, "_generated_items", None) or ():
        raw = getattr(item, "raw_item", None)
        kind, call_id = item_field(raw, "type"), item_field(raw, "call_id")
        if kind in OUTPUT_TYPES and isinstance(call_id, str):
            output = item_field(raw, "output") if kind == "function_call_output" else \
                payload_text(getattr(item, "output", None))
            yield call_id, output
    pending = getattr(state, "_pending_session_write", None)
    items = pending.get("items") if isinstance(pending, Mapping) else None
    for raw in items if isinstance(items, list) else ():
        kind, call_id = item_field(raw, "type"), item_field(raw, "call_id")
        if kind in OUTPUT_TYPES and isinstance(call_id, str):
            output = item_field(raw, "output")
            yield call_id, output if kind == "function_call_output" else payload_text(output)


def unreported_executions(frame: Leg) -> list[Write]:
    """What records the executions of the calls ``frame`` started at top level and did not
    report, whose output the state it resumed holds (none for a leg started fresh), timed
    now; empty when there are none."""
    waiting = {call_id: started for (scope, call_id), started in frame.started.items()
               if scope == () and (scope, call_id) not in frame.executed}
    if frame.resumed is None or not waiting:
        return []
    outputs: dict[str, Any] = {}
    for call_id, output in _committed(frame.resumed):
        if call_id in waiting:
            outputs.setdefault(call_id, output)
    now = frame.journal.writer.clock()
    writes: list[Write] = []
    for call_id, output in outputs.items():
        agent, tool, arguments = waiting[call_id]
        frame.executed[(), call_id] = now
        writes.append(methodcaller(
            "execution", run_id=frame.run_id, call_id=call_id, arguments=arguments,
            agent=agent, tool=tool, result=output, run_state=frame.run_state, time_ns=now,
        ))
    return writes
