"""How the ledger names agents: by their name, told apart when two agents of one run's
graph share it.

The SDK (0.24) keeps a sticky decision (``always_approve`` / ``always_reject``) per agent
object, and finds the agents of a restored ``RunState`` by their place in the graph of its
starting agent, so two agents with one name are two agents to it. The ledger keys calls and
sticky decisions by the ``agent`` string it records. The recorder walks the graph of each
starting agent it runs or decides on (:func:`label_agents`): agents reachable through
handoffs (bare or ``handoff(agent)`` objects) and ``Agent.as_tool``, breadth first, in the
order they are listed. An agent whose name is unique there is recorded by its name; the
second, third, ... agent of a shared name in that order as ``"<name>#2"``, ``"<name>#3"``.
A graph rebuilt the same way (``clone()``, a restore in another process) gets the same
labels. Labels are kept outside the agents, weakly, by object identity.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

from agents import Agent, Handoff

__all__ = ["agent_label", "label_agents", "reachable_agents"]

# id(agent) -> (weak reference, label): Agent is a dataclass, hence unhashable
_LABELS: dict[int, tuple[weakref.ref[Any], str]] = {}


def _handoff_target(item: Any) -> Any:
    """The agent a handoff leads to: an ``Agent`` listed bare, or the one a ``handoff(agent)``
    object was made for (the SDK keeps a weak reference to it; None for a custom one)."""
    if isinstance(item, Handoff):
        ref = getattr(item, "_agent_ref", None)
        return ref() if callable(ref) else None
    return item


def reachable_agents(root: Agent[Any]) -> Iterator[Agent[Any]]:
    """``root`` and every agent reachable from it through handoffs and agent tools, each
    once, breadth first, in the order they are listed (handoffs, then tools)."""
    queue, seen = [root], set()
    while queue:
        agent = queue.pop(0)
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        found = [_handoff_target(h) for h in agent.handoffs]
        found += [getattr(t, "_agent_instance", None) for t in agent.tools]
        queue += [a for a in found if isinstance(a, Agent)]


def label_agents(root: Agent[Any]) -> None:
    """Give each agent of ``root``'s graph its label (see the module docstring)."""
    seen: dict[str, int] = {}
    for agent in reachable_agents(root):
        rank = seen[agent.name] = seen.get(agent.name, 0) + 1
        key = id(agent)

        def forget(ref: weakref.ref[Any], key: int = key) -> None:
            if key in _LABELS and _LABELS[key][0] is ref:
                del _LABELS[key]

        label = agent.name if rank == 1 else f"{agent.name}#{rank}"
        _LABELS[key] = (weakref.ref(agent, forget), label)


def agent_label(agent: Any) -> str:
    """The string the ledger records for ``agent``: its label from the latest graph it was
    labelled in, else its name (``""`` for an object without one)."""
    found = _LABELS.get(id(agent))
    if found is not None and found[0]() is agent:
        return found[1]
    return str(getattr(agent, "name", None) or "")
