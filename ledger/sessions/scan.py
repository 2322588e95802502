"""The findings in one session's history: items in, findings out (pure).

Scanning is pure (:func:`scan_items` over a list of items). Findings, per session
(``index`` is the 0-based position in the history the SDK's ``get_items()`` returns):

- ``orphan_output``: a ``function_call_output`` whose ``call_id`` has no
  ``function_call`` anywhere in the session;
- ``output_before_call``: a ``function_call_output`` whose ``function_call`` exists only
  later in the session;
- ``dangling_call``: a ``function_call`` with no output in the session although the
  conversation moved on past its turn: after the call, past the rest of its batch of
  calls and then past the outputs that follow that batch, another item exists. (A call
  still awaiting approval sits at the end of the history, or is followed only by calls
  and outputs of its own batch, and is not reported.)
- ``duplicate_call_id``: a second (third, ...) ``function_call``, or a second
  ``function_call_output``, with a ``call_id`` seen before in the session.

Only ``function_call`` / ``function_call_output`` items with a string ``call_id`` take
part; every other item (messages, reasoning, hosted tool calls) only counts as "an item".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DANGLING_CALL",
    "DUPLICATE_CALL_ID",
    "FINDING_KINDS",
    "ORPHAN_OUTPUT",
    "OUTPUT_BEFORE_CALL",
    "SessionFinding",
    "scan_items",
]

FUNCTION_CALL = "function_call"
FUNCTION_CALL_OUTPUT = "function_call_output"

ORPHAN_OUTPUT = "orphan_output"
OUTPUT_BEFORE_CALL = "output_before_call"
DANGLING_CALL = "dangling_call"
DUPLICATE_CALL_ID = "duplicate_call_id"
FINDING_KINDS = (ORPHAN_OUTPUT, OUTPUT_BEFORE_CALL, DANGLING_CALL, DUPLICATE_CALL_ID)
"""Stable names of the findings a scan reports."""


@dataclass(frozen=True)
class SessionFinding:
    """One piece of damage in one session.

    Attributes:
        kind: one of :data:`FINDING_KINDS`.
        session_id: the session.
        call_id: the ``call_id`` concerned.
        index: 0-based position of the offending item in the session's history.
        row: the SQLite ``id`` of its row, or its 1-based line in a JSON Lines dump;
            None for items that came from a ``Session`` object.
        item_type: ``function_call`` or ``function_call_output``.
        detail: one sentence.
    """

    kind: str
    session_id: str
    call_id: str
    index: int
    row: int | None
    item_type: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        """JSON form (``schemas/scan-report.schema.json``, ``findings[]``)."""
        return {
            "kind": self.kind, "session_id": self.session_id, "call_id": self.call_id,
            "index": self.index, "row": self.row, "item_type": self.item_type,
            "detail": self.detail,
        }


def scan_items(
    session_id: str, items: Sequence[Any], rows: Sequence[int] | None = None
) -> list[SessionFinding]:
    """Every finding in one session's history, ordered by index (then kind).

    Args:
        session_id: the session's id (copied into the findings).
        items: the history, oldest first, as ``Session.get_items()`` returns it (dicts;
            anything else counts as an item that is not a tool item).
        rows: per item, its SQLite row id or dump line number (same length as
            ``items``), or None.

    Runs in O(len(items)); never raises on odd items.
    """
    n = len(items)
    kinds: list[str | None] = [None] * n
    calls: dict[str, list[int]] = defaultdict(list)
    outputs: dict[str, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == FUNCTION_CALL:
            found_in = calls
        elif kind == FUNCTION_CALL_OUTPUT:
            found_in = outputs
        else:
            continue
        call_id = item.get("call_id")
        if isinstance(call_id, str):
            kinds[i] = kind
            found_in[call_id].append(i)

    found: list[SessionFinding] = []

    def add(kind: str, call_id: str, index: int, item_type: str, detail: str) -> None:
        row = rows[index] if rows is not None else None
        found.append(SessionFinding(kind, session_id, call_id, index, row, item_type, detail))

    for call_id, where in outputs.items():
        called = calls.get(call_id)
        if not called:  # one orphan per call_id; later outputs are duplicates (below)
            add(ORPHAN_OUTPUT, call_id, where[0], FUNCTION_CALL_OUTPUT,
                f"function_call_output {call_id} has no function_call in the session")
        else:
            for i in where:
                if i < called[0]:
                    add(OUTPUT_BEFORE_CALL, call_id, i, FUNCTION_CALL_OUTPUT,
                        f"function_call_output {call_id} comes before its function_call "
                        f"(item {called[0]})")
        for i in where[1:]:
            add(DUPLICATE_CALL_ID, call_id, i, FUNCTION_CALL_OUTPUT,
                f"second function_call_output {call_id} (first at item {where[0]})")
    for call_id, where in calls.items():
        for i in where[1:]:
            add(DUPLICATE_CALL_ID, call_id, i, FUNCTION_CALL,
                f"second function_call {call_id} (first at item {where[0]})")

    # past_calls[i] / past_outputs[i]: first index >= i that is not a call / not an output
    past_calls, past_outputs = [n] * (n + 1), [n] * (n + 1)
    for i in range(n - 1, -1, -1):
        past_calls[i] = past_calls[i + 1] if kinds[i] == FUNCTION_CALL else i
        past_outputs[i] = past_outputs[i + 1] if kinds[i] == FUNCTION_CALL_OUTPUT else i
    for call_id, where in calls.items():
        if call_id in outputs:
            continue
        first = where[0]
        if past_outputs[past_calls[first + 1]] < n:
            add(DANGLING_CALL, call_id, first, FUNCTION_CALL,
                f"function_call {call_id} has no output and the conversation moved on")
    found.sort(key=lambda f: (f.index, FINDING_KINDS.index(f.kind)))
    return found
