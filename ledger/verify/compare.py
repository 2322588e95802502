"""Two runs side by side: their call chains, normalized, and every difference named (pure).

A run is compared by what happened, not by the names it happened under: run ids, call ids,
run-state ids and times are left out, and agent-as-tool scopes keep their tool names only
(``ask_expert:call_7`` -> ``ask_expert``). Each call is keyed by its scope so normalized,
its agent, its tool and its place among that agent's calls of that tool (first, second,
...), so the calls of one run line up with the other's whatever order nested runs
interleaved them in. Per call the comparison reads what the verifier's call state holds:
arguments digest, whether it was gated, its decision (and whether sticky), its status, how
many times it ran and with which results, how many outputs were persisted, and the rules it
broke; and from the log, the leg each execution ran in and the run state its decision was
made on (run states numbered in the order the run made them); per run, the rules broken and
how often.

Used for stream parity (a scenario recorded with ``run`` and with ``run_streamed``) and for a
before/after record of one scenario on two SDK releases (``evidence-ledger diff``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from evidence_ledger.format.entries import Entry
from evidence_ledger.verify.chains import call_chains
from evidence_ledger.verify.findings import Finding
from evidence_ledger.verify.rules import CallState

__all__ = [
    "CallFacts", "Difference", "RunDiff", "compare_runs", "run_facts", "run_legs", "run_rules",
]

CallKey = tuple[tuple[str, ...], str, str, int]
"""A call's key in a comparison: (normalized scope, agent, tool, occurrence, from 1)."""


@dataclass(frozen=True)
class CallFacts:
    """What happened to one call, without ids or times (see the module docstring).

    Attributes:
        arguments: ``sha256:<hex>`` of its canonical arguments.
        gated: True when it needed approval.
        decision: ``approve``, ``reject`` or None (the one in force when it first ran, else
            its latest).
        sticky: True when that decision was sticky (``always``).
        status: ``executed``, ``rejected``, ``blocked``, ``approved_not_executed``,
            ``pending`` or ``called``.
        executions: how many times it ran.
        results: ``sha256:<hex>`` of each distinct result, in the order first returned.
        persisted: how many outputs of it sessions persisted.
        violations: the rules it broke, in order, without repeats.
        ran_in: per execution, the leg it ran in: ``fresh`` (a leg that started the run)
            or ``state N`` (a leg resumed from the run's N-th run state, counted in the
            order the run made them: siblings of a fork are told apart).
        decided_on: the run state its latest decision was made on (as ``ran_in``), or None.
        nested: True for a call of an agent run through ``Agent.as_tool``.
    """

    arguments: str
    gated: bool
    decision: str | None
    sticky: bool
    status: str
    executions: int
    results: tuple[str, ...]
    persisted: int
    violations: tuple[str, ...]
    ran_in: tuple[str, ...] = ()
    decided_on: str | None = None
    nested: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "arguments": self.arguments, "gated": self.gated, "decision": self.decision,
            "sticky": self.sticky, "status": self.status, "executions": self.executions,
            "results": list(self.results), "persisted": self.persisted,
            "violations": list(self.violations), "ran_in": list(self.ran_in),
            "decided_on": self.decided_on, "nested": self.nested,
        }


@dataclass(frozen=True)
class Difference:
    """One difference between the runs: ``what`` differs (a call's name, ``call`` for a call
    only one run made, or ``violations`` for the run's rule counts), ``field`` names the
    fact, ``a`` / ``b`` its values (None: absent in that run)."""

    what: str
    field: str
    a: Any
    b: Any

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "field": self.field, "a": self.a, "b": self.b}

    def __str__(self) -> str:
        if self.field == "call":
            return f"{self.what}: only in {'A' if self.b is None else 'B'}"
        return f"{self.what}: {self.field} {_text(self.a)} in A, {_text(self.b)} in B"


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(str, value)) + "]" if value else "none"
    return "none" if value is None else str(value)


@dataclass(frozen=True)
class RunDiff:
    """Two runs compared (:func:`compare_runs`).

    Attributes:
        a, b: per run, call name -> :class:`CallFacts`, in the run's call order.
        rules_a, rules_b: per run, rule -> how many violations of it name the run.
        differences: every difference, calls in A's order then B's extra ones.
        run_a, run_b: the run ids compared ('' when not given).
        elsewhere_a, elsewhere_b: violations of each ledger that name no compared run (not
            differences; a ledger that fails ``verify`` can hold two runs that compare the
            same).
    """

    a: dict[str, CallFacts]
    b: dict[str, CallFacts]
    rules_a: dict[str, int]
    rules_b: dict[str, int]
    differences: tuple[Difference, ...]
    run_a: str = ""
    run_b: str = ""
    elsewhere_a: int = 0
    elsewhere_b: int = 0

    @property
    def equal(self) -> bool:
        """True when the runs did the same (no difference)."""
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        """``equal``, ``a`` / ``b`` (run id, calls, violations, violations elsewhere in
        the ledger), ``differences``."""
        return {
            "equal": self.equal,
            "a": {"run_id": self.run_a, "calls": {k: v.to_json() for k, v in self.a.items()},
                  "violations": self.rules_a, "violations_elsewhere": self.elsewhere_a},
            "b": {"run_id": self.run_b, "calls": {k: v.to_json() for k, v in self.b.items()},
                  "violations": self.rules_b, "violations_elsewhere": self.elsewhere_b},
            "differences": [d.to_json() for d in self.differences],
        }


def _digest(value: bytes | None) -> str:
    return "none" if value is None else "sha256:" + value.hex()


Legs = dict[tuple[tuple[str, ...], str], tuple[list[str], str | None]]
"""``(scope, call_id)`` -> (``ran_in``, ``decided_on``) of a run's calls (see
:class:`CallFacts`)."""


def run_legs(entries: Iterable[Entry], run_id: str) -> tuple[Legs, list[str]]:
    """Where each call of ``run_id`` ran and was decided, from ``entries`` (the log, in
    order): its ``execution`` and ``decision`` entries' run states, numbered by the run's
    ``run_state`` entries; and how each of the run's legs ended (``run_end`` statuses at top
    level, in order)."""
    states: dict[str, str] = {}
    legs: Legs = {}
    ends: list[str] = []

    def named(state: str | None) -> str:
        if state is None:
            return "fresh"
        return states.setdefault(state, f"state {len(states) + 1}")

    for entry in entries:
        body = entry.body
        if body.get("run_id") != run_id:
            continue
        if entry.kind == "run_state":
            named(body["state_id"])
        elif entry.kind == "run_end" and not body["scope"]:
            ends.append(body["status"])
        elif entry.kind in ("execution", "decision"):
            ran, decided = legs.get((tuple(body["scope"]), body["call_id"]), ([], None))
            if entry.kind == "execution":
                ran.append(named(body["run_state"]))
            else:
                decided = named(body["run_state"])
            legs[tuple(body["scope"]), body["call_id"]] = (ran, decided)
    return legs, ends


def _facts(call: CallState, legs: Legs) -> CallFacts:
    (chain,) = call_chains([call])
    ran_in, decided_on = legs.get((call.key[1], call.key[2]), ([], None))
    return CallFacts(
        arguments=_digest(chain.args_digest), gated=chain.needs_approval,
        decision=chain.decision, sticky=chain.sticky, status=chain.status,
        executions=len(call.executions), results=tuple(_digest(r) for r in call.results),
        persisted=chain.persisted, violations=chain.violations, ran_in=tuple(ran_in),
        decided_on=decided_on, nested=bool(call.key[1]),
    )


def _name(key: CallKey) -> str:
    scope, agent, tool, nth = key
    where = "/".join(scope) + "/" if scope else ""
    return f"{where}{agent}.{tool}#{nth}"


def run_facts(calls: Iterable[CallState], run_id: str, legs: Legs) -> dict[str, CallFacts]:
    """The calls of ``run_id`` among ``calls`` (the verifier's call states), by name
    (``[scope/]agent.tool#n``), in the order they were recorded; ``legs``: the run's
    (:func:`run_legs`)."""
    seen: Counter[tuple[tuple[str, ...], str, str]] = Counter()
    facts: dict[str, CallFacts] = {}
    for call in sorted((c for c in calls if c.key[0] == run_id), key=lambda c: c.seq):
        scope = tuple(edge.rsplit(":", 1)[0] for edge in call.key[1])
        seen[scope, call.agent, call.tool] += 1
        key = (scope, call.agent, call.tool, seen[scope, call.agent, call.tool])
        name = _name(key)
        if name in facts:  # names with '/' or '.' in them: spelled out in full
            name = json.dumps([list(scope), call.agent, call.tool, key[3]])
        facts[name] = _facts(call, legs)
    return facts


def run_rules(findings: Iterable[Finding], run_id: str) -> dict[str, int]:
    """Rule -> how many of ``findings`` name ``run_id``, sorted by rule."""
    return dict(sorted(Counter(f.rule for f in findings if f.run_id == run_id).items()))


def compare_runs(
    a: dict[str, CallFacts], b: dict[str, CallFacts], rules_a: dict[str, int],
    rules_b: dict[str, int], ends_a: Sequence[str] = (), ends_b: Sequence[str] = (),
) -> RunDiff:
    """Compare two runs' facts (:func:`run_facts`), rule counts (:func:`run_rules`) and
    leg ends (:func:`run_legs`): also the order of their top-level calls, where both made
    the same ones (a nested agent's calls may interleave with them either way)."""
    differences: list[Difference] = []
    if list(ends_a) != list(ends_b):
        differences.append(Difference("run", "leg ends", list(ends_a), list(ends_b)))
    top_a = [n for n, f in a.items() if not f.nested]
    top_b = [n for n, f in b.items() if not f.nested]
    if sorted(top_a) == sorted(top_b) and top_a != top_b:
        differences.append(Difference("run", "call order", top_a, top_b))
    for name in [*a, *(n for n in b if n not in a)]:
        if name not in a or name not in b:
            differences.append(Difference(name, "call", a.get(name) and "present",
                                          b.get(name) and "present"))
            continue
        one, other = a[name].to_json(), b[name].to_json()
        differences += [Difference(name, field, one[field], other[field])
                        for field in one if one[field] != other[field]]
    for rule in sorted(set(rules_a) | set(rules_b)):
        if rules_a.get(rule, 0) != rules_b.get(rule, 0):
            differences.append(Difference("violations", rule, rules_a.get(rule, 0),
                                          rules_b.get(rule, 0)))
    return RunDiff(a, b, rules_a, rules_b, tuple(differences))
