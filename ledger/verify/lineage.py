"""Run-state lineage: which paused run state each one was derived from (pure, no I/O).

A paused run becomes a ``RunState`` that apps fork (``to_state()`` twice), serialise
(``to_json()``), restore (``RunState.from_json()``) and resume. The recorder gives every
``RunState`` object a *state id* and writes a ``run_state`` entry whenever it meets one
(events ``to_state``, ``to_json``, ``loaded``, ``resume``); each entry names the state's
``parent``, the state it was derived from. The states of one run form a forest: the
roots are the states made from a leg that started fresh (``parent`` null), and two
states made from one result are siblings. Decisions carry the id of the state they were
made on; executions and ``run_end`` entries the id of the state their leg resumed from.

- :func:`ancestry` walks the parent links the rules keep (state id -> parent id);
- :func:`run_state_forest` builds, from entries in log order, one tree of run states per
  run, each state with its events and the decisions, executions and leg ends bound to it
  (for ``evidence-ledger trace`` and the query index).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from evidence_ledger.format.entries import Entry

__all__ = ["BoundEntry", "ParentLinks", "StateEvent", "StateNode", "ancestry", "run_state_forest"]


class ParentLinks(Protocol):
    """State id -> parent id, as :func:`ancestry` reads it (a dict is one)."""

    def get(self, state: str, /) -> str | None:
        """The parent of ``state``; None for a root or a state not held."""


def ancestry(parents: ParentLinks, state: str | None) -> list[str]:
    """``state``, then its parent, grandparent, ... by ``parents`` (state id -> parent id);
    empty for None. Stops at a state ``parents`` does not hold, and at a cycle."""
    chain: list[str] = []
    while state is not None and state not in chain:
        chain.append(state)
        state = parents.get(state)
    return chain


@dataclass(frozen=True)
class StateEvent:
    """One ``run_state`` entry of a state.

    Attributes:
        seq, time: the entry (time in ns since the epoch, UTC).
        event: ``to_state``, ``to_json``, ``loaded`` or ``resume``.
        digest: 32-byte digest of the serialised state then, or None.
        interruptions: its pending approvals then (the entry's maps).
    """

    seq: int
    time: int
    event: str
    digest: bytes | None
    interruptions: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class BoundEntry:
    """A decision made on a state, or an execution / leg end of a leg resumed from it.

    Attributes:
        seq, time, kind: the entry.
        call_id, scope: the call concerned (None / () for ``run_end``).
        detail: ``approve`` / ``reject`` (+ `` always``), the ``run_end`` status, or "".
    """

    seq: int
    time: int
    kind: str
    call_id: str | None
    scope: tuple[str, ...]
    detail: str


@dataclass
class StateNode:
    """One run state in its run's tree.

    Attributes:
        state_id, run_id: the state and its run.
        parent: the state it was derived from, or None (a root of the run).
        recorded: False for a state only named (as a parent, or by a decision or leg)
            with no ``run_state`` entry of its own.
        events: its ``run_state`` entries, in log order.
        bound: decisions made on it, executions and ``run_end`` of legs resumed from it.
        children: states derived from it, in the order they were first recorded.
    """

    state_id: str
    run_id: str
    parent: str | None
    recorded: bool = True
    events: list[StateEvent] = field(default_factory=list)
    bound: list[BoundEntry] = field(default_factory=list)
    children: list[StateNode] = field(default_factory=list)

    @property
    def first_seq(self) -> int | None:
        """Seq of its first event or bound entry (None when it has neither)."""
        seqs = [e.seq for e in self.events] + [b.seq for b in self.bound]
        return min(seqs) if seqs else None

    @property
    def pending(self) -> tuple[dict[str, Any], ...]:
        """Its pending approvals as its latest event listed them."""
        return self.events[-1].interruptions if self.events else ()

    def walk(self, depth: int = 0) -> Iterable[tuple[int, StateNode]]:
        """``(depth, node)`` for this node and every descendant, depth first (without
        recursion: a chain of states may be as long as the log)."""
        stack = [(depth, self)]
        while stack:
            at, node = stack.pop()
            yield at, node
            stack.extend((at + 1, child) for child in reversed(node.children))

    def to_json(self) -> dict[str, Any]:
        """JSON form of this state alone (digests as ``sha256:<hex>``): its children name it
        as their ``parent`` (a tree is listed flat, as :meth:`walk` gives it, so that no
        reader needs to nest as deep as the longest chain of states)."""
        return {
            "state_id": self.state_id, "run_id": self.run_id, "parent": self.parent,
            "recorded": self.recorded,
            "events": [
                {"seq": e.seq, "time": e.time, "event": e.event,
                 "digest": None if e.digest is None else "sha256:" + e.digest.hex(),
                 "interruptions": [_json_interruption(i) for i in e.interruptions]}
                for e in self.events
            ],
            "bound": [
                {"seq": b.seq, "time": b.time, "kind": b.kind, "call_id": b.call_id,
                 "scope": list(b.scope), "detail": b.detail}
                for b in self.bound
            ],
        }


def _json_interruption(item: dict[str, Any]) -> dict[str, Any]:
    digest = item.get("args_digest")
    return {**item, "args_digest": None if digest is None else "sha256:" + digest.hex()}


def _bound(entry: Entry) -> BoundEntry | None:
    b = entry.body
    if entry.kind == "decision":
        detail = b["decision"] + (" always" if b["always"] else "")
    elif entry.kind == "run_end":
        detail = b["status"]
    elif entry.kind == "execution":
        detail = ""
    else:
        return None
    return BoundEntry(entry.seq, entry.time, entry.kind, b.get("call_id"),
                      tuple(b["scope"]), detail)


def run_state_forest(entries: Iterable[Entry]) -> dict[str, list[StateNode]]:
    """The run states of every run, as trees: run id -> its root states.

    ``entries`` are decoded entries in log order (e.g. ``(e for e, _ in
    evidence_ledger.format.entries())``).
    A state whose parent no entry records hangs under a node for that parent marked
    ``recorded=False``; a decision or leg naming a state no ``run_state`` entry records
    gets such a node too (a root). Roots and children are ordered by the entry that first
    names them.
    """
    nodes: dict[str, StateNode] = {}
    order: list[str] = []

    def node(state: str, run_id: str, parent: str | None, recorded: bool) -> StateNode:
        if parent is not None and parent not in nodes:
            node(parent, run_id, None, False)  # named first, so ordered first
        found = nodes.get(state)
        if found is None:
            found = nodes[state] = StateNode(state, run_id, parent, recorded)
            order.append(state)
        elif recorded and not found.recorded:
            found.recorded, found.parent = True, parent
        return found

    for entry in entries:
        if entry.kind == "run_state":
            b = entry.body
            current = node(b["state_id"], b["run_id"], b["parent"], True)
            current.events.append(StateEvent(
                entry.seq, entry.time, b["event"], b["digest"], tuple(b["interruptions"]),
            ))
            continue
        bound = _bound(entry)
        state = entry.body.get("run_state") if bound is not None else None
        if bound is not None and isinstance(state, str):
            node(state, entry.body["run_id"], None, False).bound.append(bound)

    forest: dict[str, list[StateNode]] = {}
    for state in order:
        current = nodes[state]
        if current.parent is not None and not _in_cycle(nodes, state):
            nodes[current.parent].children.append(current)
        else:  # a root, or a state whose parent links loop (a damaged lineage)
            forest.setdefault(current.run_id, []).append(current)
    return forest


def _in_cycle(nodes: dict[str, StateNode], state: str) -> bool:
    seen, current = {state}, nodes[state].parent
    while current is not None:
        if current in seen:
            return True
        seen.add(current)
        current = nodes[current].parent if current in nodes else None
    return False
