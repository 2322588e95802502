"""Executions the SDK published but never reported.

The SDK commits a tool's output (a ``function_call_output`` item, or the output item of
another tool kind) as soon as the tool returns, then runs the callbacks that follow it: a
``custom_data_extractor``, the run and agent hooks' ``on_tool_end``. When one of them raises
(or is cancelled), ``on_tool_end`` never reaches the recorder, yet the SDK keeps the
committed output in the state it resumed and persists it on a retry without running the
tool again, or has already written it to the session. The recorder notes each call the
SDK started (``on_tool_start``, :attr:`~evidence_ledger.record.integrations.legs.Leg.started`);
such a call still unreported gets its execution recorded, with its output as the SDK
committed it (an output mutated after publication does not change it), when the first of
these comes: the SDK writes that output to the session (before the ``session_item``
entry), or the leg, resuming a state, ends with the output held in that state (an agent
tool's run resuming its agent's state too). A call with no committed output records
nothing: its tool did not complete.

Only the calls of the leg's own scope are looked for: the session and the state a leg
resumed hold its items (those of agents run through ``Agent.as_tool`` are in their own
runs). A fresh agent-tool run whose tool's callback fails leaves its call without evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from operator import methodcaller
from typing import Any

from agents import RunState

from evidence_ledger.record.integrations.group_commit import Write
from evidence_ledger.record.integrations.legs import Leg
from evidence_ledger.record.integrations.native_calls import item_field, payload_text

__all__ = ["committed_executions", "output_item", "persisted_executions"]

OUTPUT_TYPES = frozenset({
    "function_call_output", "custom_tool_call_output", "shell_call_output",
    "local_shell_call_output", "apply_patch_call_output", "computer_call_output",
})
"""Item types of the outputs the SDK commits for the tools it runs locally."""


def output_item(raw: Any) -> tuple[str, Any] | None:
    """``(call_id, output as recorded)`` of an output item as the SDK persists it (a
    mapping or a model: a function call's ``output`` as it is, another kind's as
    :func:`payload_text` gives it); None for any other item."""
    kind, call_id = item_field(raw, "type"), item_field(raw, "call_id")
    if kind not in OUTPUT_TYPES or not isinstance(call_id, str):
        return None
    output = item_field(raw, "output")
    return call_id, output if kind == "function_call_output" else payload_text(output)


def _committed(state: Any) -> Iterator[tuple[str, Any]]:
    """``(call_id, output as recorded)`` of each output item ``state`` holds: its generated
    items (a function call's ``output`` as persisted; another kind's output as its tool
    returned it, as ``on_tool_end`` would have given it), then the items of its pending
    session write."""
    for item in getattr(state, "_generated_items", None) or ():
        raw = getattr(item, "raw_item", None)
        found = output_item(raw)
        if found is not None:
            yield found[0], found[1] if item_field(raw, "type") == "function_call_output" \
                else payload_text(getattr(item, "output", None))
    pending = getattr(state, "_pending_session_write", None)
    items = pending.get("items") if isinstance(pending, Mapping) else None
    for raw in items if isinstance(items, list) else ():
        found = output_item(raw)
        if found is not None:
            yield found


def _unreported(frame: Leg) -> bool:
    """True when ``frame`` started a call in its scope whose execution it has not recorded
    (else there is nothing to look for: the common case, read before any item is)."""
    return any(key[0] == frame.scope and key not in frame.executed for key in frame.started)


def _executions(frame: Leg, outputs: Iterable[tuple[str, Any]]) -> list[Write]:
    """What records, now, the execution of each call ``frame`` started in its scope and has
    not reported whose output is in ``outputs`` (the first one given per call)."""
    writes: list[Write] = []
    now: int | None = None
    for call_id, output in outputs:
        key = (frame.scope, call_id)
        started = frame.started.get(key)
        if started is None or key in frame.executed:
            continue
        now = now or frame.journal.writer.clock()
        frame.executed[key] = now
        agent, tool, arguments = started
        writes.append(methodcaller(
            "execution", run_id=frame.run_id, call_id=call_id, arguments=arguments,
            scope=frame.scope, agent=agent, tool=tool, result=output,
            run_state=frame.run_state, time_ns=now,
        ))
    return writes


def committed_executions(frame: Leg, state: Any) -> list[Write]:
    """What records the executions of the calls ``frame`` started in its scope and did not
    report, whose output ``state`` (the ``RunState`` the leg resumed; anything else: none)
    holds, timed now; empty when there are none."""
    if not isinstance(state, RunState) or not _unreported(frame):
        return []
    return _executions(frame, _committed(state))


def persisted_executions(frame: Leg, items: Iterable[Any]) -> list[Write]:
    """What records the executions of the calls ``frame`` started and did not report whose
    outputs are among ``items``, the items the SDK is persisting to the session (to be
    appended before those items' ``session_item`` entries)."""
    if not _unreported(frame):
        return []
    outputs = (output_item(item) for item in items)
    return _executions(frame, (found for found in outputs if found is not None))
