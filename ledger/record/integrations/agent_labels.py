"""How the ledger names agents: by their name, told apart when two agents of one run's
graph share it.

The SDK (0.24) keeps a sticky decision (``always_approve`` / ``always_reject``) per agent
object, and finds the agents of a restored ``RunState`` by their place in the graph of its
starting agent, so two agents with one name are two agents to it. The ledger keys calls and
sticky decisions by the ``agent`` string it records. The recorder labels the graph of the
run's starting agent (a resumed state's own starting agent, whatever agent the app passes
along) for each leg and each decision (:func:`graph_labels`): agents reachable through
handoffs (bare or ``handoff(agent)`` objects) and ``Agent.as_tool``, breadth first, in the
order they are listed. An agent whose name is unique there is recorded by its name; the
second, third, ... agent of a shared name in that order as ``"<name>#2"``, ``"<name>#3"``.
A graph rebuilt the same way (``clone()``, a restore in another process) gets the same
labels. The labels hold for the code run inside :func:`labelled` (a context variable: two
runs at once, from different starting agents, each keep their own).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

from agents import Agent, Handoff

__all__ = ["agent_label", "graph_labels", "labelled", "reachable_agents", "starting_agent"]

Labels = Mapping[int, str]
"""``id(agent)`` -> label, for the agents of one graph."""

_LABELS: ContextVar[Labels] = ContextVar("evidence_ledger_agent_labels",
                                         default=MappingProxyType({}))


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


def starting_agent(agent: Agent[Any], input: Any) -> Agent[Any]:
    """The agent whose graph a run of ``agent`` on ``input`` is labelled by: a resumed
    ``RunState``'s own starting agent (the SDK resumes with the state's agents), else
    ``agent``."""
    started = getattr(input, "_starting_agent", None)
    return started if isinstance(started, Agent) else agent


def graph_labels(root: Agent[Any]) -> Labels:
    """The label of each agent of ``root``'s graph (see the module docstring)."""
    seen: dict[str, int] = {}
    labels = {}
    for agent in reachable_agents(root):
        rank = seen[agent.name] = seen.get(agent.name, 0) + 1
        labels[id(agent)] = agent.name if rank == 1 else f"{agent.name}#{rank}"
    return labels


@contextlib.contextmanager
def labelled(labels: Labels) -> Iterator[None]:
    """Make ``labels`` the labels :func:`agent_label` reads in the ``with`` block."""
    token = _LABELS.set(labels)
    try:
        yield
    finally:
        _LABELS.reset(token)


def agent_label(agent: Any) -> str:
    """The string the ledger records for ``agent``: its label in the labels in force, else
    its name (``""`` for an object without one)."""
    found = _LABELS.get().get(id(agent))
    return found if found is not None else str(getattr(agent, "name", None) or "")
