"""How the ledger names agents and function tools: as the SDK tells them apart when two
agents of one run's graph share a name, or two tools of one agent a name in two namespaces.

Tools: a function tool put in a namespace (``tool_namespace(name=..., tools=[...])``) is
recorded by the SDK's qualified name ``"<namespace>.<name>"`` (its calls carry the
namespace; the SDK's synthetic namespace of a deferred top-level tool, its own name, is
left out), so the approval policy, decisions and executions of ``shop.refund`` are never
taken for those of ``bank.refund`` (:func:`tool_label`).

The SDK (0.24) keeps a sticky decision (``always_approve`` / ``always_reject``) per agent
object, and a ``RunState`` (every release since 0.20) names each agent of its starting
agent's graph by an
*identity*: its name when unique, else ``"<name>#2"``, ``"<name>#3"``, ... in an order of its
own (the agents' configuration: instructions, hooks, tools, ..., then graph position), so
that a graph rebuilt in another process, even with its handoffs listed in another order,
gets the same identities. The ledger keys calls and sticky decisions by the ``agent``
string it records, and records exactly those identities (:func:`graph_labels`, read from
the SDK's own ``_build_agent_identity_keys_by_id``, in ``agents.run_state`` in every
supported release). The graph is the run's starting agent's (a resumed state's own starting
agent, whatever agent the app passes along), labelled for each leg and each decision. The
labels hold for the code run inside :func:`labelled` (a context variable: two runs at once,
from different starting agents, each keep their own).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

from agents import Agent, run_state

__all__ = [
    "agent_label", "approval_tool", "function_tool_label", "graph_labels", "labelled",
    "starting_agent", "tool_label",
]

Labels = Mapping[int, str]
"""``id(agent)`` -> label, for the agents of one graph."""

_LABELS: ContextVar[Labels] = ContextVar("evidence_ledger_agent_labels",
                                         default=MappingProxyType({}))


def starting_agent(agent: Agent[Any], input: Any) -> Agent[Any]:
    """The agent whose graph a run of ``agent`` on ``input`` is labelled by: a resumed
    ``RunState``'s own starting agent (the SDK resumes with the state's agents), else
    ``agent``."""
    started = getattr(input, "_starting_agent", None)
    return started if isinstance(started, Agent) else agent


def graph_labels(root: Agent[Any]) -> Labels:
    """The SDK's identity of each agent of ``root``'s graph, by ``id(agent)`` (see the
    module docstring); empty, so agents go by their names, for a graph the SDK cannot name
    (it then refuses to serialise a state of it too)."""
    try:
        identities = run_state._build_agent_identity_keys_by_id(root)
    except Exception:
        return {}
    return identities if isinstance(identities, dict) else {}


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


def tool_label(name: Any, namespace: Any = None) -> str:
    """The string the ledger records for the function tool ``name`` of ``namespace`` (a
    call's, a tool context's or an approval item's; None: none): see the module
    docstring."""
    text = str(name or "")
    if isinstance(namespace, str) and namespace and namespace != text:
        return f"{namespace}.{text}"
    return text


def function_tool_label(tool: Any) -> str:
    """:func:`tool_label` of a tool object (its namespace as ``tool_namespace`` set it)."""
    return tool_label(getattr(tool, "name", None), getattr(tool, "_tool_namespace", None))


def approval_tool(item: Any) -> str:
    """:func:`tool_label` of the tool a ``ToolApprovalItem`` asks about."""
    return tool_label(getattr(item, "tool_name", None), getattr(item, "tool_namespace", None))
