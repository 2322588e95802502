"""The session guard: a ``function_call_output`` is never persisted into a recorded session
without its ``function_call`` before it (the orphan output that poisons a session for
good, SDK issue #4827).

Before a recorded leg of a recorder with a policy writes a batch to its session
(:mod:`~evidence_ledger.record.integrations.recorded_session`), each
``function_call_output`` in it whose call has no ``function_call`` earlier in the batch,
nor in the session (read with the session's own ``get_items``, only then), is an orphan.
In the policy's ``session`` mode:

- ``enforce``: the ``function_call`` is rebuilt from the call the run recorded (its tool
  and exact raw arguments, from the payload store, as ``repair-session`` does) and written
  in the same batch, right before the output; a ``session_repair`` entry (``by``
  :data:`GUARD_REPAIRER`) records that it did. An orphan whose call the ledger does not
  hold (or whose arguments payload is gone) is written as the SDK gave it, and recorded as
  in ``observe``;
- ``observe``: the batch is written as the SDK gave it, and a ``denied`` entry (mode
  ``observe``, code :data:`~evidence_ledger.policy.judge.ORPHAN_OUTPUT`) records the
  orphan as it happens;
- ``off``: nothing.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable
from typing import Any

from evidence_ledger.policy.judge import ORPHAN_OUTPUT
from evidence_ledger.record.integrations.legs import Leg
from evidence_ledger.record.integrations.native_calls import item_field
from evidence_ledger.record.writer import EvidenceWriter

__all__ = ["GUARD_REPAIRER", "guard_batch"]

GUARD_REPAIRER = "evidence-ledger session guard"
"""The ``by`` of the ``session_repair`` entries the session guard records."""


async def _session_calls(inner: Any) -> tuple[set[str], int]:
    """The call ids of the ``function_call`` items the session holds, and how many items it
    holds (none if it cannot say)."""
    try:
        held = inner.get_items()
        items = await held if inspect.isawaitable(held) else held
    except Exception:
        return set(), 0
    return {item_field(i, "call_id") for i in items
            if item_field(i, "type") == "function_call"}, len(items)


async def guard_batch(leg: Leg, inner: Any, session_id: str, items: list[Any]
                      ) -> tuple[list[Any], list[Callable[[EvidenceWriter], None]]]:
    """The batch to write in place of ``items`` and the writes that record what the guard
    did (see the module docstring), for a leg whose policy has a session guard."""
    policy = leg.policy
    if policy is None or policy.session == "off":
        return items, []
    seen: set[str] = set()
    orphans = []
    for index, item in enumerate(items):
        kind, call_id = item_field(item, "type"), item_field(item, "call_id")
        if kind == "function_call":
            seen.add(call_id)
        elif kind == "function_call_output" and isinstance(call_id, str) and call_id not in seen:
            orphans.append(index)
    held, length = await _session_calls(inner) if orphans else (set(), 0)
    orphans = [i for i in orphans if item_field(items[i], "call_id") not in held]
    if not orphans:
        return items, []
    run_id = leg.run_id
    writer = leg.journal.writer
    batch, records = list(items), []
    for index in reversed(orphans):
        call_id = item_field(items[index], "call_id")
        rebuilt = writer.recorded_call_item(run_id, call_id) \
            if policy.session == "enforce" else None
        if rebuilt is not None:
            batch.insert(index, rebuilt)
            records.append(_repair(run_id, session_id, rebuilt, length + index))
        else:
            records.append(_observed(leg, call_id))
    return batch, records[::-1]


def _repair(run_id: str, session_id: str, item: dict[str, Any], position: int
            ) -> Callable[[EvidenceWriter], None]:
    """The ``session_repair`` entry of a ``function_call`` written at ``position`` (0-based,
    in the session's history: the items before the batch, then its own before it)."""
    def write(writer: EvidenceWriter) -> None:
        writer.session_repair(
            repair_id=uuid.uuid4().hex, session_id=session_id, store="recorded session",
            item=item, position=position, run_id=run_id, by=GUARD_REPAIRER,
            scope=writer.call_scopes(run_id, item["call_id"])[-1],
        )

    return write


def _observed(leg: Leg, call_id: str) -> Callable[[EvidenceWriter], None]:
    policy = leg.policy
    assert policy is not None
    started = leg.started.get((leg.scope, call_id))
    agent, tool, arguments = started if started is not None else ("", "", "")

    def write(writer: EvidenceWriter) -> None:
        writer.guard(
            allowed=False, run_id=leg.run_id, call_id=call_id, scope=leg.scope, agent=agent,
            tool=tool, arguments=arguments, mode="observe", code=ORPHAN_OUTPUT,
            reason=f"a function_call_output of {call_id} was persisted without its "
                   "function_call before it", policy_digest=policy.digest,
            run_state=leg.run_state,
        )

    return write
